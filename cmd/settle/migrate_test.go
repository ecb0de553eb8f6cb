package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/bintest"
)

// embeddedHome returns a fresh SETTLE_HOME and an environment that points
// settle at it with no DATABASE_URL: the embedded default from nothing.
// The cluster settle starts there is stopped when the test ends.
func embeddedHome(t *testing.T, bin string) []string {
	t.Helper()
	home, err := os.MkdirTemp("", "settle-home-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o711); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "SETTLE_") {
			env = append(env, kv)
		}
	}
	env = append(env, "SETTLE_HOME="+home)
	t.Cleanup(func() {
		cmd := exec.Command(bin, "db", "stop")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("settle db stop: %v: %s", err, out)
		}
		os.RemoveAll(home)
	})
	return env
}

func runBin(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("settle %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), code
}

// TestMigrateFromNothing runs `settle migrate` from several processes at
// once with no database running: one embedded cluster is created and
// shared, the schema is applied once, and every process succeeds. A
// second round finds nothing to do.
func TestMigrateFromNothing(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)

	var wg sync.WaitGroup
	outs := make([]string, 4)
	codes := make([]int, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], codes[i] = runBin(t, bin, env, "migrate")
		}()
	}
	wg.Wait()
	applied := 0
	for i := range outs {
		if codes[i] != 0 {
			t.Fatalf("settle migrate #%d exited %d: %s", i, codes[i], outs[i])
		}
		applied += strings.Count(outs[i], "applied 0001_settlements")
	}
	if applied != 1 {
		t.Fatalf("schema applied %d times, want 1:\n%s", applied, strings.Join(outs, "\n---\n"))
	}
	if strings.Count(strings.Join(outs, ""), "started PostgreSQL") != 1 {
		t.Fatalf("want exactly one cluster started:\n%s", strings.Join(outs, "\n---\n"))
	}

	out, code := runBin(t, bin, env, "migrate")
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: exit %d: %s", code, out)
	}
	out, code = runBin(t, bin, env, "db", "status")
	if code != 0 || !strings.Contains(out, "running") {
		t.Fatalf("db status: exit %d: %s", code, out)
	}
	out, code = runBin(t, bin, env, "db", "stop")
	if code != 0 {
		t.Fatalf("db stop: exit %d: %s", code, out)
	}
	out, code = runBin(t, bin, env, "db", "status")
	if code != 1 || !strings.Contains(out, "stopped") {
		t.Fatalf("db status after stop: exit %d: %s", code, out)
	}
}

// TestMigrateWithoutServerBinaries prints one line saying what to install
// and exits 2.
func TestMigrateWithoutServerBinaries(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := append(embeddedHome(t, bin), "SETTLE_PG_BINDIR="+t.TempDir())
	out, code := runBin(t, bin, env, "migrate")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 2 || len(lines) != 1 || !strings.Contains(out, "install the PostgreSQL server package") {
		t.Fatalf("exit %d, output %q", code, out)
	}
}
