package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/pgembed"
	"github.com/settle/settle/internal/testsupport/bintest"
)

// settleHome returns a fresh SETTLE_HOME and the environment that points
// settle at it (no DATABASE_URL, no other SETTLE_ setting). With reachable
// false, the postgres user cannot traverse it, so that as root the cluster
// lives under pgembed.ClusterRoot.
func settleHome(t *testing.T, reachable bool) (string, []string) {
	t.Helper()
	home, err := os.MkdirTemp("", "settle-db-test-")
	if err != nil {
		t.Fatal(err)
	}
	if reachable {
		if err := os.Chmod(home, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	return home, append(envWithout("DATABASE_URL", "SETTLE_"), "SETTLE_HOME="+home)
}

// runSettle runs the settle binary and returns its stdout, stderr and exit
// status.
func runSettle(t *testing.T, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("settle %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errOut.String(), code
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// alive reports whether process pid exists and has not exited (a zombie
// has).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	k := strings.LastIndexByte(s, ')')
	return k < 0 || k+2 >= len(s) || s[k+2] != 'Z'
}

var statusRE = regexp.MustCompile(`(?m)^cluster:\s+(\S+)\nstatus:\s+running \(pid (\d+),`)

// startedCluster runs `settle db url` for env's SETTLE_HOME, which starts
// the cluster and leaves it running, and returns the cluster directory and
// server pid from `settle db status`. The test's cleanup stops the server
// and removes the directory, whatever the test did.
func startedCluster(t *testing.T, bin string, env []string) (dir string, pid int) {
	t.Helper()
	url, stderr, code := runSettle(t, bin, env, "db", "url")
	if code != exitOK || !strings.HasPrefix(url, "postgres://") || strings.Count(url, "\n") != 1 {
		t.Fatalf("settle db url: exit %d, stdout %q, stderr %q", code, url, stderr)
	}
	out, _, code := runSettle(t, bin, env, "db", "status")
	m := statusRE.FindStringSubmatch(out)
	if code != exitOK || m == nil {
		t.Fatalf("settle db status: exit %d:\n%s", code, out)
	}
	dir = m[1]
	pid, _ = strconv.Atoi(m[2])
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGQUIT) // immediate shutdown
			for deadline := time.Now().Add(time.Minute); alive(pid) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond) // waiting for the process to exit
			}
		}
		if filepath.Dir(dir) == pgembed.ClusterRoot {
			os.RemoveAll(dir)
		}
	})
	want := fmt.Sprintf("settle: the embedded PostgreSQL cluster at %s is still running (pid %d); `settle db stop` stops it", dir, pid)
	if lastLine(stderr) != want {
		t.Errorf("settle db url: last line %q, want %q", lastLine(stderr), want)
	}
	return dir, pid
}

// pruning keeps the tests that run `settle db prune` apart: prune removes
// every cluster whose home is gone, so one test's prune took the orphan
// another test had made to watch its own prune remove.
var pruning sync.Mutex

// TestDBPruneAfterHomeDeleted creates a cluster for a SETTLE_HOME, deletes
// that SETTLE_HOME, and finds the cluster listed by `settle db status`,
// listed only by `settle db prune --dry-run`, then stopped and removed by
// `settle db prune`. The subtests run one after the other: each prune
// would also take the other's orphan.
func TestDBPruneAfterHomeDeleted(t *testing.T) {
	t.Parallel()
	pruning.Lock()
	defer pruning.Unlock()
	bin := bintest.Build(t)
	for _, tc := range []struct {
		name      string
		reachable bool
	}{
		// As root the cluster of an unreachable home lives under
		// ClusterRoot and outlives the home.
		{"cluster under " + pgembed.ClusterRoot, false},
		// The cluster inside the home goes with it, but its server runs on.
		{"cluster inside the home", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.reachable && os.Geteuid() != 0 {
				t.Skip("only root keeps clusters under " + pgembed.ClusterRoot)
			}
			home, env := settleHome(t, tc.reachable)
			dir, pid := startedCluster(t, bin, env)
			if under := filepath.Dir(dir) == pgembed.ClusterRoot; under == tc.reachable {
				t.Fatalf("cluster in %s", dir)
			}
			if err := os.RemoveAll(home); err != nil {
				t.Fatal(err)
			}
			_, other := settleHome(t, false) // settle runs from another home

			out, _, code := runSettle(t, bin, other, "db", "status")
			if code != exitFindings || !regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(dir)+` .*running \(pid `+strconv.Itoa(pid)+`, .*home `+regexp.QuoteMeta(home)+` \(gone\)$`).MatchString(out) {
				t.Fatalf("settle db status: exit %d, want the cluster listed with its home gone:\n%s", code, out)
			}

			out, stderr, code := runSettle(t, bin, other, "db", "prune", "--dry-run")
			if code != exitOK || !strings.Contains(out, dir) || !strings.Contains(out, "would") {
				t.Fatalf("settle db prune --dry-run: exit %d:\n%s%s", code, out, stderr)
			}
			if !alive(pid) {
				t.Fatal("--dry-run stopped the server")
			}

			out, stderr, code = runSettle(t, bin, other, "db", "prune")
			wantLine := regexp.MustCompile(`(?m)^settle db prune: (removed ` + regexp.QuoteMeta(dir) + ` \(|stopped server pid ` + strconv.Itoa(pid) + `, left running on deleted ` + regexp.QuoteMeta(dir) + ` )`)
			if code != exitOK || !wantLine.MatchString(out) {
				t.Fatalf("settle db prune: exit %d:\n%s%s", code, out, stderr)
			}
			if alive(pid) {
				t.Errorf("server pid %d still running after prune", pid)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after prune: %v", dir, err)
			}
		})
	}
}

// TestDBPruneKeepsLiveHomes: prune never touches the cluster of a home that
// exists, running or not.
func TestDBPruneKeepsLiveHomes(t *testing.T) {
	t.Parallel()
	pruning.Lock()
	defer pruning.Unlock()
	bin := bintest.Build(t)
	_, env := settleHome(t, false)
	dir, pid := startedCluster(t, bin, env)
	_, other := settleHome(t, false)
	if out, stderr, code := runSettle(t, bin, other, "db", "prune"); code != exitOK || strings.Contains(out, dir) {
		t.Fatalf("settle db prune: exit %d, mentions %s:\n%s%s", code, dir, out, stderr)
	}
	if !alive(pid) {
		t.Fatal("prune stopped the server of a live home")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("prune removed the cluster of a live home: %v", err)
	}
}

// TestMigrateSaysClusterStillRunning: `settle migrate` that started the
// cluster says in its last line that it left it running; one that found
// it running says nothing about it.
func TestMigrateSaysClusterStillRunning(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	_, env := settleHome(t, true)
	out, stderr, code := runSettle(t, bin, env, "migrate")
	if code != exitOK || !strings.Contains(stderr, "started PostgreSQL") {
		t.Fatalf("settle migrate: exit %d:\n%s%s", code, out, stderr)
	}
	m := regexp.MustCompile("^settle: the embedded PostgreSQL cluster at (.+) is still running \\(pid (\\d+)\\); `settle db stop` stops it$").FindStringSubmatch(lastLine(stderr))
	if m == nil {
		t.Fatalf("settle migrate: last line %q", lastLine(stderr))
	}
	pid, _ := strconv.Atoi(m[2])
	t.Cleanup(func() { runSettle(t, bin, env, "db", "stop") })
	if !alive(pid) {
		t.Fatalf("pid %d named in the last line is not running", pid)
	}
	out, stderr, code = runSettle(t, bin, env, "migrate")
	if code != exitOK || strings.Contains(stderr, "still running") {
		t.Fatalf("second settle migrate: exit %d:\n%s%s", code, out, stderr)
	}
}

// TestEndClusterUse checks what a command does with the embedded cluster
// when it ends: one that started it for itself stops it; one that found it
// running leaves it alone and quiet; one that shares it leaves it running
// and says so last.
func TestEndClusterUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	embedded := func(t *testing.T, home string) *pgembed.Cluster {
		t.Helper()
		c, err := database.Embedded(ctx, home, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c, running, err := pgembed.Find(home); err == nil && running {
				_ = c.Stop(context.Background())
			}
		})
		return c
	}
	t.Run("own, started here", func(t *testing.T) {
		t.Parallel()
		home, _ := settleHome(t, true)
		c := embedded(t, home)
		var errOut bytes.Buffer
		endClusterUse(ctx, Stdio{Err: &errOut}, c, ownCluster)
		if want := "settle: stopped the embedded PostgreSQL cluster at " + c.Dir + " (started for this command)"; lastLine(errOut.String()) != want {
			t.Errorf("last line %q, want %q", lastLine(errOut.String()), want)
		}
		if _, running, _ := pgembed.Find(home); running || alive(c.PID) {
			t.Fatal("still running")
		}
	})
	t.Run("own, running before", func(t *testing.T) {
		t.Parallel()
		home, _ := settleHome(t, true)
		first := embedded(t, home)
		again := embedded(t, home)
		var errOut bytes.Buffer
		endClusterUse(ctx, Stdio{Err: &errOut}, again, ownCluster)
		if errOut.Len() != 0 {
			t.Errorf("said %q about a cluster it did not start", errOut.String())
		}
		if _, running, _ := pgembed.Find(home); !running {
			t.Fatal("stopped a cluster that was running before")
		}
		endClusterUse(ctx, Stdio{Err: &errOut}, first, shareCluster)
		want := fmt.Sprintf("settle: the embedded PostgreSQL cluster at %s is still running (pid %d); `settle db stop` stops it", first.Dir, first.PID)
		if lastLine(errOut.String()) != want {
			t.Errorf("shared: last line %q, want %q", lastLine(errOut.String()), want)
		}
		if _, running, _ := pgembed.Find(home); !running {
			t.Fatal("a shared cluster was stopped")
		}
	})
}

// TestDBFlags checks settle db's usage: --help names prune and its flags,
// flags may follow the action, and prune's flags go with prune only.
func TestDBFlags(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"db", "--help"}, Stdio{Out: &out, Err: &errOut}); code != exitOK {
		t.Fatalf("--help: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"status", "stop", "url", "prune", "--dry-run", "--unknown", pgembed.ClusterRoot} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
	for _, args := range [][]string{{"db"}, {"db", "status", "--dry-run"}, {"db", "url", "--unknown"}, {"db", "prune", "extra"}, {"db", "nope"}, {"db", "prune", "--nope"}} {
		out.Reset()
		errOut.Reset()
		if code := run(context.Background(), args, Stdio{Out: &out, Err: &errOut}); code != exitError {
			t.Errorf("%v: exit %d, want %d", args, code, exitError)
		}
	}
}
