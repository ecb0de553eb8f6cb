package workerproc_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, bintest.Cleanup)) }

// closedPort returns an address nothing listens on: the worker's bank,
// which these tests never reach.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// start starts a worker against a fresh database through workertest
// (which is workerproc plus test cleanup); it is killed when the test ends.
func start(t *testing.T, name string) *workerproc.Proc {
	t.Helper()
	return workertest.StartT(t, name, dbtest.New(t).URL, nil,
		"--listen", "127.0.0.1:0", "--bank-url", "http://"+closedPort(t), "--log-format", "json")
}

func TestStartAndStop(t *testing.T) {
	t.Parallel()
	p := start(t, "w-stop")
	if !strings.HasPrefix(p.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL = %q, want http://127.0.0.1:PORT", p.URL())
	}
	resp, err := http.Get(p.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %d", resp.StatusCode)
	}
	if !p.Alive() || p.PID() <= 0 {
		t.Fatalf("Alive = %v, PID = %d after Start", p.Alive(), p.PID())
	}
	if mb, err := p.PeakRSSMB(); err != nil || mb <= 0 {
		t.Fatalf("PeakRSSMB = %v, %v; want a positive size", mb, err)
	}
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("Stop: %v, want exit status 0", err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	ps, err := p.Wait(time.Second)
	if err != nil || !ps.Success() || workerproc.KilledBySIGKILL(ps) {
		t.Fatalf("Wait after Stop: %v, %v; want exit status 0", ps, err)
	}
	if !strings.Contains(workerproc.Tail(p.LogPath(), 1000), "worker stopped") {
		t.Errorf("the log lacks the graceful stop:\n%s", workerproc.Tail(p.LogPath(), 30))
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	p := start(t, "w-kill")
	p.Kill()
	if p.Alive() {
		t.Fatal("Alive after Kill")
	}
	ps, err := p.Wait(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !workerproc.KilledBySIGKILL(ps) {
		t.Fatalf("after Kill: %v, want killed by SIGKILL", ps)
	}
}

func TestStartExitsBeforeListening(t *testing.T) {
	t.Parallel()
	logPath := filepath.Join(t.TempDir(), "bad.log")
	_, err := workerproc.Start(context.Background(), workerproc.Options{
		Executable: bintest.Build(t),
		Name:       "w-bad",
		LogPath:    logPath,
		Args:       []string{"--no-such-flag"},
	})
	if err == nil || !strings.Contains(err.Error(), "w-bad exited before listening") {
		t.Fatalf("Start with a bad flag: err = %v, want an exit before listening", err)
	}
}

func TestStartRespectsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// sleep stands in for a worker that never listens.
	_, err := workerproc.Start(ctx, workerproc.Options{Executable: "sleep", Name: "w-sleep", LogPath: filepath.Join(t.TempDir(), "sleep.log"), Args: []string{"60"}})
	if err == nil || !strings.Contains(err.Error(), "did not listen") {
		t.Fatalf("Start with an ended context: err = %v, want did not listen", err)
	}
}
