package pgembed

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNotOrphaned is returned by Prune for a cluster whose home still owns
// it (or, unless allowed, whose home is unknown).
var ErrNotOrphaned = errors.New("its home still owns it")

// HomeState says whether the home that made a cluster still owns it.
type HomeState int

const (
	// HomeUnknown: the cluster was made by a settle that did not record
	// its home, and no home known to this process hashes to it.
	HomeUnknown HomeState = iota
	// HomeExists: the home exists and nothing says it uses another cluster.
	HomeExists
	// HomeGone: the home no longer exists.
	HomeGone
	// HomeMoved: the home exists, but its pg.path names another cluster.
	HomeMoved
)

func (s HomeState) String() string {
	switch s {
	case HomeExists:
		return "exists"
	case HomeGone:
		return "gone"
	case HomeMoved:
		return "points elsewhere"
	default:
		return "unknown"
	}
}

// Info describes a cluster found by List.
type Info struct {
	// Dir is the cluster directory.
	Dir string
	// Home is the home the cluster belongs to; empty when unknown.
	Home      string
	HomeState HomeState
	// Running, PID and Port describe its server.
	Running   bool
	PID, Port int
	// DirGone: the server runs on a cluster directory that was deleted
	// (its home was removed with the cluster inside). Only the process is
	// left; it still holds the deleted files' disk space.
	DirGone bool
	// Size is the disk space of Dir in bytes.
	Size int64
}

// Orphaned reports whether the cluster's home is gone or no longer points
// at it, so that Prune removes it.
func (i Info) Orphaned() bool {
	return i.DirGone || i.HomeState == HomeGone || i.HomeState == HomeMoved
}

// List returns the clusters of this user found on the machine: as root,
// every cluster under ClusterRoot; and every server of this user (of the
// server user, as root) that runs on a deleted cluster directory. The
// clusters that live inside their home (home/pg) are not listed: they go
// with their home.
func List() ([]Info, error) {
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	var out []Info
	if cred != nil {
		entries, err := os.ReadDir(ClusterRoot)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("error listing %s: %w", ClusterRoot, err)
		}
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), "cluster-") {
				out = append(out, inspect(filepath.Join(ClusterRoot, e.Name())))
			}
		}
	}
	uid := serverUID(cred)
	procs, _ := os.ReadDir("/proc") // without /proc, no deleted-directory servers to find
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if i, ok := strayServer(pid, uid); ok {
			out = append(out, i)
		}
	}
	return out, nil
}

// serverUID is the uid servers run as: the server user's when we are root
// (cred is not nil), ours otherwise.
func serverUID(cred *credential) uint32 {
	if cred != nil {
		return cred.uid
	}
	return uint32(os.Geteuid())
}

// inspect describes the cluster directory dir under ClusterRoot.
func inspect(dir string) Info {
	i := Info{Dir: dir, Home: readOwner(dir)}
	if i.Home == "" {
		// Made before clusters recorded their home: a home this process
		// knows of may hash to it.
		for _, h := range knownHomes() {
			if altClusterDir(h) == dir {
				i.Home = h
				_ = writeOwner(dir, h)
			}
		}
	}
	i.HomeState = homeState(i.Home, dir)
	c := &Cluster{Dir: dir}
	i.PID, i.Port, i.Running = c.running()
	i.Size = dirSize(dir)
	return i
}

// homeState says whether home still owns the cluster in dir.
func homeState(home, dir string) HomeState {
	if home == "" {
		return HomeUnknown
	}
	// home comes from the cluster directory's own record (written by
	// settle, in a directory only root and the server user can write) or
	// from the command line of a server of this user.
	if _, err := os.Lstat(home); errors.Is(err, fs.ErrNotExist) { //nolint:gosec // G703: see above
		return HomeGone
	}
	// Any other answer (the home exists, or cannot be looked at) keeps it.
	if b, err := os.ReadFile(filepath.Join(home, "pg.path")); err == nil { //nolint:gosec // G703: see above
		if p := strings.TrimSpace(string(b)); p != "" && filepath.Clean(p) != filepath.Clean(dir) {
			return HomeMoved
		}
	}
	return HomeExists
}

// knownHomes are the homes this process would use: $SETTLE_HOME and the
// default one.
func knownHomes() []string {
	var homes []string
	if h, err := DefaultHome(); err == nil {
		homes = append(homes, h)
	}
	if u, err := os.UserHomeDir(); err == nil {
		homes = append(homes, filepath.Join(u, ".local", "share", "settle"))
	}
	return homes
}

// strayServer describes process pid when it is the postmaster of a settle
// cluster, run by uid, whose directory was deleted.
func strayServer(pid int, uid uint32) (Info, bool) {
	if procUID(pid) != int64(uid) || !isPostgres(pid) {
		return Info{}, false
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil || !strings.HasSuffix(cwd, " (deleted)") {
		return Info{}, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return Info{}, false
	}
	// The postmaster keeps the command line pg_ctl gave it
	// (postgres -D DIR -p PORT); its children retitle themselves.
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	var data string
	var port int
	for k := 1; k+1 < len(args); k++ {
		switch args[k] {
		case "-D":
			data = args[k+1]
		case "-p":
			port, _ = strconv.Atoi(args[k+1])
		}
	}
	if filepath.Base(args[0]) != "postgres" || !filepath.IsAbs(data) || filepath.Base(data) != "data" {
		return Info{}, false
	}
	dir := filepath.Dir(data)
	i := Info{Dir: dir, Running: true, PID: pid, Port: port, DirGone: true}
	switch {
	case filepath.Base(dir) == "pg":
		i.Home = filepath.Dir(dir)
	case filepath.Dir(dir) == ClusterRoot && strings.HasPrefix(filepath.Base(dir), "cluster-"):
		i.Home = readOwner(dir)
	default:
		return Info{}, false // not laid out by settle
	}
	i.HomeState = homeState(i.Home, dir)
	if i.HomeState == HomeExists {
		// The home is there, but the cluster directory this server runs
		// on is not: a new cluster may have been made in its place.
		i.HomeState = HomeMoved
	}
	return i, true
}

// Prune stops the server of an orphaned cluster (fast shutdown) and
// removes the cluster directory. A cluster whose home still owns it is
// refused with ErrNotOrphaned, and so is one whose home is unknown unless
// unknown is true; one that a live settle process holds is refused with
// ErrInUse. Both are checked again under the cluster's use lock.
func Prune(ctx context.Context, i Info, unknown bool) error {
	if i.DirGone {
		cred, err := serverCredential()
		if err != nil {
			return err
		}
		now, ok := strayServer(i.PID, serverUID(cred))
		if !ok || now.Dir != i.Dir {
			return nil // gone meanwhile
		}
		return stopServer(ctx, i.PID)
	}
	if filepath.Dir(i.Dir) != ClusterRoot || !strings.HasPrefix(filepath.Base(i.Dir), "cluster-") {
		return fmt.Errorf("error pruning %s: not a cluster directory under %s", i.Dir, ClusterRoot)
	}
	if _, err := os.Stat(i.Dir); errors.Is(err, fs.ErrNotExist) {
		return nil // removed meanwhile
	}
	prunable := func(i Info) bool { return i.Orphaned() || (unknown && i.HomeState == HomeUnknown) }
	if !prunable(inspect(i.Dir)) {
		return fmt.Errorf("error pruning %s: %w", i.Dir, ErrNotOrphaned)
	}
	f, err := lockUnused(i.Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile
		}
		return fmt.Errorf("error pruning %s: %w", i.Dir, err)
	}
	defer f.Close()
	now := inspect(i.Dir) // again, under the lock
	if !prunable(now) {
		return fmt.Errorf("error pruning %s: %w", i.Dir, ErrNotOrphaned)
	}
	if now.Running {
		if err := stopServer(ctx, now.PID); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(i.Dir); err != nil {
		return fmt.Errorf("error removing %s: %w", i.Dir, err)
	}
	return nil
}

// stopServer stops the postmaster pid with a fast shutdown (SIGINT), as
// pg_ctl stop -m fast does, and waits until it has exited; one that does
// not exit in time gets an immediate shutdown (SIGQUIT).
func stopServer(ctx context.Context, pid int) error {
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, 60 * time.Second}, {syscall.SIGQUIT, 10 * time.Second}} {
		if err := syscall.Kill(pid, step.sig); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return nil
			}
			return fmt.Errorf("error stopping PostgreSQL (pid %d): %w", pid, err)
		}
		if err := waitExit(ctx, pid, step.wait); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return fmt.Errorf("error stopping PostgreSQL (pid %d): still running", pid)
}

// waitExit waits until process pid has exited, for at most d.
func waitExit(ctx context.Context, pid int, d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for alive(pid) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("process %d still running after %s", pid, d)
		case <-tick.C:
		}
	}
	return nil
}

// alive reports whether process pid exists and is not a zombie (an exited
// process its parent has not reaped yet).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	// "pid (comm) S …": the state follows the last parenthesis.
	s := string(stat)
	if k := strings.LastIndexByte(s, ')'); k >= 0 && k+2 < len(s) {
		return s[k+2] != 'Z'
	}
	return true
}

// isPostgres reports whether process pid is alive and a PostgreSQL server
// process (a pid in a stale postmaster.pid may have been reused).
func isPostgres(pid int) bool {
	if !alive(pid) {
		return false
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err != nil || strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres")
}

// procUID returns the real uid of process pid, or -1.
func procUID(pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return -1
			}
			return uid
		}
	}
	return -1
}

// dirSize is the disk space of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
