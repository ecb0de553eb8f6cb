package pgembed_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/internal/pgembed"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// newHome returns a fresh home directory the server user can reach.
func newHome(t *testing.T) string {
	t.Helper()
	home, err := os.MkdirTemp("", "pgembed-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	return home
}

func ensure(t *testing.T, home string) *pgembed.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgembed.Ensure(ctx, pgembed.Options{Home: home, Ephemeral: true})
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func exec1(t *testing.T, c *pgembed.Cluster, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestStartAndReuse(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	c1 := ensure(t, home)
	if !c1.Started {
		t.Fatal("first Ensure did not start the cluster")
	}
	exec1(t, c1, "CREATE TABLE kept (x int)")

	// Many callers at once get the one running cluster.
	var wg sync.WaitGroup
	pids := make(chan int, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgembed.Ensure(context.Background(), pgembed.Options{Home: home, Ephemeral: true})
			if err != nil {
				t.Error(err)
				return
			}
			if c.Started {
				t.Error("a second Ensure started another server")
			}
			pids <- c.PID
		}()
	}
	wg.Wait()
	close(pids)
	for pid := range pids {
		if pid != c1.PID {
			t.Fatalf("reused pid %d, want %d", pid, c1.PID)
		}
	}
	found, running, err := pgembed.Find(home)
	if err != nil || !running || found.Port != c1.Port {
		t.Fatalf("Find = %+v, %v, %v", found, running, err)
	}
}

// TestRunsUnprivileged checks that when we are root the server runs as the
// postgres user (PostgreSQL refuses root), and as ourselves otherwise.
func TestRunsUnprivileged(t *testing.T) {
	t.Parallel()
	c := ensure(t, newHome(t))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.PID))
	if err != nil {
		t.Fatal(err)
	}
	var uid int
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Uid:") {
			fmt.Sscan(strings.Fields(line)[1], &uid)
		}
	}
	if os.Geteuid() == 0 && uid == 0 {
		t.Fatal("running as root, the server runs as root too")
	}
	if os.Geteuid() != 0 && uid != os.Geteuid() {
		t.Fatalf("server uid %d, want ours %d", uid, os.Geteuid())
	}
}

// TestStaleAfterCrash kills the server with SIGKILL, leaving a stale
// postmaster.pid behind; the next Ensure notices and starts it again with
// the data intact.
func TestStaleAfterCrash(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	c1 := ensure(t, home)
	exec1(t, c1, "CREATE TABLE survived (x int); INSERT INTO survived VALUES (42)")
	if err := syscall.Kill(c1.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Find must report the killed server as not running once it is gone
	// (a zombie not yet reaped counts as gone).
	settletest.Wait(t, "Find to report the killed server as stopped", func() (bool, string) {
		_, running, err := pgembed.Find(home)
		return err == nil && !running, fmt.Sprintf("running %v, err %v", running, err)
	})
	c2 := ensure(t, home)
	if !c2.Started || c2.PID == c1.PID {
		t.Fatalf("did not restart: started=%v pid=%d", c2.Started, c2.PID)
	}
	var x int
	conn, err := pgx.Connect(context.Background(), c2.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), "SELECT x FROM survived").Scan(&x); err != nil || x != 42 {
		t.Fatalf("data after restart: %d, %v", x, err)
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	c := ensure(t, home)
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, running, _ := pgembed.Find(home); running {
		t.Fatal("still running after Stop")
	}
}

// TestRestartOnSamePort: a cluster stopped (fast or immediate) and started
// again with Options.Port keeps its address, so clients given its URL
// reconnect, and keeps every committed row (crash recovery after immediate).
func TestRestartOnSamePort(t *testing.T) {
	t.Parallel()
	for _, immediate := range []bool{false, true} {
		t.Run(fmt.Sprintf("immediate=%v", immediate), func(t *testing.T) {
			t.Parallel()
			home := newHome(t)
			c := ensure(t, home)
			exec1(t, c, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)")
			stop := c.Stop
			if immediate {
				stop = c.StopImmediate
			}
			if err := stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, running, _ := pgembed.Find(home); running {
				t.Fatal("still running after the stop")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c2, err := pgembed.Ensure(ctx, pgembed.Options{Home: home, Ephemeral: true, Port: c.Port})
			if err != nil {
				t.Fatalf("Ensure again: %v", err)
			}
			if !c2.Started || c2.Port != c.Port || c2.URL("postgres") != c.URL("postgres") {
				t.Fatalf("restarted on port %d (started %v), want %d", c2.Port, c2.Started, c.Port)
			}
			conn, err := pgx.Connect(ctx, c.URL("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var x int
			if err := conn.QueryRow(ctx, "SELECT x FROM kept").Scan(&x); err != nil || x != 7 {
				t.Fatalf("data after restart: %d, %v", x, err)
			}
		})
	}
}

func TestNoServerBinaries(t *testing.T) {
	t.Parallel()
	_, err := pgembed.Ensure(context.Background(), pgembed.Options{Home: newHome(t), BinDir: t.TempDir()})
	if !errors.Is(err, pgembed.ErrNoServer) {
		t.Fatalf("err = %v, want ErrNoServer", err)
	}
	if !strings.Contains(err.Error(), "install the PostgreSQL server package") {
		t.Fatalf("error does not say what to install: %v", err)
	}
}
