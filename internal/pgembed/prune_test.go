package pgembed_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/settle/settle/internal/pgembed"
)

// find returns the Info of List for dir.
func find(t *testing.T, dir string) (pgembed.Info, bool) {
	t.Helper()
	all, err := pgembed.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range all {
		if i.Dir == dir {
			return i, true
		}
	}
	return pgembed.Info{}, false
}

// stopLeftover makes sure the server pid is gone when the test ends,
// whatever the test did to its directory.
func stopLeftover(t *testing.T, pid int) {
	t.Cleanup(func() {
		if pgembed.Alive(pid) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = pgembed.StopServer(ctx, pid)
		}
	})
}

// TestPruneRemovesOrphanedCluster (as root): a cluster that lives under
// ClusterRoot because the server user cannot reach its home records that
// home; while the home exists Prune refuses it, once the home is gone it
// is listed as such, refused while a process still uses it, then stopped
// and removed.
func TestPruneRemovesOrphanedCluster(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("clusters live under " + pgembed.ClusterRoot + " only when settle runs as root")
	}
	home, err := os.MkdirTemp("", "pgembed-prune-") // mode 0700: the postgres user cannot reach it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	c := ensure(t, home)
	stopLeftover(t, c.PID)
	t.Cleanup(func() { os.RemoveAll(c.Dir) })
	if filepath.Dir(c.Dir) != pgembed.ClusterRoot {
		t.Fatalf("cluster in %s, want under %s", c.Dir, pgembed.ClusterRoot)
	}
	ctx := context.Background()

	i, ok := find(t, c.Dir)
	if !ok || i.Home != home || i.HomeState != pgembed.HomeExists || i.Orphaned() || !i.Running || i.PID != c.PID {
		t.Fatalf("listed %+v (found %v), want home %s existing, running pid %d", i, ok, home, c.PID)
	}
	if err := pgembed.Prune(ctx, i, true); !errors.Is(err, pgembed.ErrNotOrphaned) {
		t.Fatalf("Prune with the home in place: %v, want ErrNotOrphaned", err)
	}

	if err := os.RemoveAll(home); err != nil {
		t.Fatal(err)
	}
	i, ok = find(t, c.Dir)
	if !ok || i.HomeState != pgembed.HomeGone || !i.Orphaned() || !i.Running {
		t.Fatalf("after removing the home: %+v (found %v), want home gone, running", i, ok)
	}
	// This process still holds it, as a settle worker whose home was
	// deleted under it would.
	if err := pgembed.Prune(ctx, i, false); !errors.Is(err, pgembed.ErrInUse) {
		t.Fatalf("Prune of a held cluster: %v, want ErrInUse", err)
	}
	reused := *c
	reused.Started = false
	if _, err := reused.Release(ctx); err != nil { // gives up the hold, leaves it running
		t.Fatal(err)
	}
	if err := pgembed.Prune(ctx, i, false); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s still there: %v", c.Dir, err)
	}
	if pgembed.Alive(c.PID) {
		t.Fatalf("server pid %d still alive", c.PID)
	}
}

// TestPruneStopsServerOfDeletedHome: a cluster inside its home (home/pg)
// goes with the home, but its server keeps running on the deleted files;
// List finds it and Prune stops it.
func TestPruneStopsServerOfDeletedHome(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	c := ensure(t, home)
	stopLeftover(t, c.PID)
	if err := os.RemoveAll(home); err != nil {
		t.Fatal(err)
	}
	i, ok := find(t, c.Dir)
	if !ok {
		// Only a concurrent prune (settle db prune in another test) may
		// have stopped it first.
		if pgembed.Alive(c.PID) {
			t.Fatalf("the server of deleted %s (pid %d) is not listed", c.Dir, c.PID)
		}
		return
	}
	if !i.DirGone || !i.Orphaned() || i.PID != c.PID || i.Home != home || i.HomeState != pgembed.HomeGone {
		t.Fatalf("listed %+v, want a server on a deleted directory, pid %d, home %s gone", i, c.PID, home)
	}
	if err := pgembed.Prune(context.Background(), i, false); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if pgembed.Alive(c.PID) {
		t.Fatalf("server pid %d still alive", c.PID)
	}
}
