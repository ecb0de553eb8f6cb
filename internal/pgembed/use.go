package pgembed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/settle/settle/internal/flock"
)

// A process that uses a cluster holds a shared flock(2) on Dir/use.lock;
// the kernel drops it when the process exits, however it exits. Whoever
// wants to stop a cluster for good (Release of the process that started it,
// Prune) first takes the lock exclusively without waiting: if it cannot, a
// live process still uses the cluster and it is left alone.
const useLockName = "use.lock"

// ownerFileName names the file in a cluster directory that records the home
// the cluster belongs to.
const ownerFileName = "settle-home"

// uses holds this process's shared use locks, one per cluster directory, so
// that the garbage collector never closes them (which would drop the lock)
// and several Ensure calls share one. It mirrors a per-process kernel
// resource, hence a package variable.
var uses = struct {
	sync.Mutex
	files map[string]*os.File
}{files: map[string]*os.File{}}

// holdUse takes this process's shared use lock on the cluster directory
// dir, waiting (for ctx) while a prune holds it exclusively.
func holdUse(ctx context.Context, dir string) error {
	path := filepath.Join(dir, useLockName)
	uses.Lock()
	if f, ok := uses.files[dir]; ok && samePath(f, path) {
		uses.Unlock()
		return nil
	}
	uses.Unlock()

	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("error opening %s: %w", path, err)
	}
	if err := flockWait(ctx, f, syscall.LOCK_SH); err != nil {
		f.Close()
		return err
	}
	if !samePath(f, path) {
		// A prune removed the cluster while we waited for its lock.
		f.Close()
		return fmt.Errorf("error using the cluster in %s: it was removed meanwhile; try again", dir)
	}
	uses.Lock()
	defer uses.Unlock()
	if old, ok := uses.files[dir]; ok {
		old.Close()
	}
	uses.files[dir] = f
	return nil
}

// dropUse gives up this process's use lock on dir, if it holds one.
func dropUse(dir string) {
	uses.Lock()
	defer uses.Unlock()
	if f, ok := uses.files[dir]; ok {
		f.Close()
		delete(uses.files, dir)
	}
}

// ErrInUse is returned by Prune for a cluster that a live settle process
// holds.
var ErrInUse = errors.New("in use by a running settle process")

// lockUnused takes the use lock of dir exclusively without waiting; it
// returns ErrInUse when another process holds it. The caller closes the
// file to let go.
func lockUnused(dir string) (*os.File, error) {
	path := filepath.Join(dir, useLockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("error opening %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrInUse
		}
		return nil, fmt.Errorf("error locking %s: %w", path, err)
	}
	return f, nil
}

// Release ends this process's use of the cluster. When this process
// started the server (Started) and no other process uses the cluster now,
// it also stops the server with a fast shutdown and reports stopped. A
// cluster that was running before, or that another settle process has
// begun to use since, is left running. Close every connection to the
// cluster first.
func (c *Cluster) Release(ctx context.Context) (stopped bool, err error) {
	// The start lock keeps a concurrent Ensure from taking up the cluster
	// between our check and the stop. A home deleted meanwhile has none.
	if unlock, err := flock.Lock(ctx, filepath.Join(c.Home, "cluster.lock")); err == nil {
		defer unlock()
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	dropUse(c.Dir)
	if !c.Started {
		return false, nil
	}
	f, err := lockUnused(c.Dir)
	if errors.Is(err, ErrInUse) || errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if _, _, running := c.running(); !running {
		return false, nil
	}
	if err := c.Stop(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// samePath reports whether the open file f is still the file at path (it
// was not removed or replaced).
func samePath(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// flockWait takes the flock how on f, waiting for ctx.
func flockWait(ctx context.Context, f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("error locking %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("error waiting for lock %s: %w", f.Name(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeOwner records home in the cluster directory dir unless a home is
// recorded there already.
func writeOwner(dir, home string) error {
	path := filepath.Join(dir, ownerFileName)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.WriteFile(path, []byte(home+"\n"), 0o644); err != nil {
		return fmt.Errorf("error recording the home of %s: %w", dir, err)
	}
	return nil
}

// readOwner returns the home recorded in the cluster directory dir, or ""
// when none is (a cluster made by an older settle).
func readOwner(dir string) string {
	// dir is a cluster directory under ClusterRoot or a server's -D.
	b, err := os.ReadFile(filepath.Join(dir, ownerFileName)) //nolint:gosec // G703: see above
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
