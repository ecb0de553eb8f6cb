package hatest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/settle/settle/internal/pgembed"
)

// ErrNotInstalled is returned by Start when pg_auto_failover is not
// installed.
var ErrNotInstalled = errors.New("pg_auto_failover is not installed (Debian: apt-get install postgresql-15-auto-failover pg-auto-failover-cli)")

// DBName is the application database the formation creates; DBUser is the
// role that owns it (a superuser, trusted on loopback).
const (
	DBName = "settle"
	DBUser = "settle"
)

// The monitor's failover timing. pg_auto_failover's defaults (health checks
// every 5 s, a node unhealthy after 20 s, 30 s for a primary to drain) leave
// a formation without a primary for about 50 s; these shorten it to a few
// seconds, with margins for a loaded two-core machine, so that a test can
// fail over twice in well under a minute. A deployment keeps the defaults
// unless it has measured otherwise (README, "High availability").
var monitorSettings = []string{
	"pgautofailover.health_check_period = 1000",
	"pgautofailover.health_check_timeout = 2000",
	"pgautofailover.health_check_max_retries = 1",
	"pgautofailover.health_check_retry_delay = 500",
	"pgautofailover.node_considered_unhealthy_timeout = 4000",
	"pgautofailover.primary_demote_timeout = 3000",
	"pgautofailover.startup_grace_period = 1000",
}

// Formation is a running pg_auto_failover formation: a monitor and two data
// nodes. Its methods are safe for concurrent use.
type Formation struct {
	home    string // the temporary directory, removed by Close
	dir     string // home/f: everything the server user writes
	logDir  string
	pgctl   string
	autoctl string
	cred    *syscall.Credential
	env     []string

	// Monitor is the monitor node; Nodes are the two data nodes, node1
	// (the first primary) and node2.
	Monitor *Node
	Nodes   []*Node

	monitorURL string
	changed    chan struct{} // a notification from the monitor arrived
	stopListen context.CancelFunc
	listenDone chan struct{}

	mu     sync.Mutex
	pgids  []int // process groups of the pg_autoctl processes alive
	closed bool
}

// Options tune a formation.
type Options struct {
	// Logf receives a line per step of the setup (default: none).
	Logf func(format string, args ...any)
	// LogDir, when set, holds the nodes' logs (NAME.log), which then
	// outlive the formation; by default they live in its directory.
	LogDir string
}

// Start creates and starts a formation under a new directory in
// os.TempDir() and waits until node1 is the primary and node2 its
// synchronous standby. On error nothing is left running. Call Close when
// done; a watchdog process stops the formation anyway when the calling
// process exits.
func Start(ctx context.Context, o Options) (_ *Formation, err error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	begin := time.Now()
	autoctl, binDir, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := pgembed.ServerCredential()
	if err != nil {
		return nil, err
	}
	home, err := os.MkdirTemp("", "settle-ha-")
	if err != nil {
		return nil, err
	}
	f := &Formation{home: home, dir: filepath.Join(home, "f"), logDir: o.LogDir, pgctl: filepath.Join(binDir, "pg_ctl"), autoctl: autoctl,
		cred: cred, changed: make(chan struct{}, 1), listenDone: make(chan struct{})}
	if f.logDir == "" {
		f.logDir = f.dir
	} else if err := os.MkdirAll(f.logDir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	// The server user must traverse home, and owns everything below it.
	if err := os.Chmod(home, 0o711); err != nil {
		return nil, err
	}
	if err := f.watchdog(); err != nil {
		return nil, err
	}
	for _, d := range []string{f.dir, f.path("run"), f.path("tmp")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
		if err := f.chown(d); err != nil {
			return nil, err
		}
	}
	f.env = []string{
		"PATH=" + binDir + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + f.dir,
		"XDG_CONFIG_HOME=" + f.path("config"),
		"XDG_DATA_HOME=" + f.path("data"),
		"XDG_RUNTIME_DIR=" + f.path("run"),
		"TMPDIR=" + f.path("tmp"),
		"PGHOST=" + f.path("run"),
		"LC_ALL=C", "LANG=C",
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	f.Monitor = &Node{f: f, Name: "monitor", Port: ports[0], PGData: f.path("monitor")}
	f.Nodes = []*Node{
		{f: f, Name: "node1", Port: ports[1], PGData: f.path("node1")},
		{f: f, Name: "node2", Port: ports[2], PGData: f.path("node2")},
	}
	f.monitorURL = fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.Monitor.Port)

	logf("ha: creating the monitor on port %d in %s", f.Monitor.Port, f.dir)
	if err := f.initdb(ctx, f.Monitor, monitorSettings); err != nil {
		return nil, err
	}
	if err := f.Monitor.start(ctx, "create", "monitor", "--pgdata", f.Monitor.PGData, "--pgport", strconv.Itoa(f.Monitor.Port),
		"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", f.pgctl, "--run"); err != nil {
		return nil, err
	}
	if err := f.waitMonitor(ctx); err != nil {
		return nil, err
	}
	listenCtx, stop := context.WithCancel(context.Background())
	f.stopListen = stop
	go f.listen(listenCtx)

	// node1 starts from a data directory made here, so that its settings
	// (below pg_auto_failover's include, so they win) are in place from its
	// first start; node2 is a base backup of it and inherits them.
	n1, n2 := f.Nodes[0], f.Nodes[1]
	logf("ha: creating %s (port %d), the first primary", n1.Name, n1.Port)
	if err := f.initdb(ctx, n1, []string{
		"shared_buffers = 32MB",
		// A SIGKILLed server loses nothing the kernel holds: fsync is for
		// machines that lose power, which tests do not.
		"fsync = off",
		// Checkpoints at once, not spread: pg_basebackup waits for one,
		// when a standby is made and when a killed primary rejoins and
		// pg_rewind fails (pg_auto_failover 2.0 with PostgreSQL 15 often
		// starts the crash recovery pg_rewind needs while its own still
		// holds the data directory, then falls back to pg_basebackup).
		"checkpoint_completion_target = 0",
	}); err != nil {
		return nil, err
	}
	if err := n1.create(ctx); err != nil {
		return nil, err
	}
	if _, err := f.Wait(ctx, n1.Name+" single", func(s State) bool { return s.Is(n1, "single") }); err != nil {
		return nil, err
	}
	logf("ha: creating %s (port %d), its standby", n2.Name, n2.Port)
	if err := n2.create(ctx); err != nil {
		return nil, err
	}
	if _, err := f.Wait(ctx, n2.Name+" a synchronous standby of "+n1.Name, func(s State) bool {
		return s.Is(n1, "primary") && s.Is(n2, "secondary")
	}); err != nil {
		return nil, err
	}
	logf("ha: formation ready after %s: %s primary, %s secondary", time.Since(begin).Round(100*time.Millisecond), n1.Name, n2.Name)
	return f, nil
}

// URL returns the multi-host URL of database db that only ever connects to
// the primary (target_session_attrs=read-write), as settle's workers use it.
func (f *Formation) URL(db string) string {
	hosts := make([]string, len(f.Nodes))
	for i, n := range f.Nodes {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port))
	}
	q := url.Values{}
	q.Set("sslmode", "disable")
	q.Set("target_session_attrs", "read-write")
	return fmt.Sprintf("postgres://%s@%s/%s?%s", DBUser, strings.Join(hosts, ","), db, q.Encode())
}

// MonitorURL returns the URL of the monitor's database (user autoctl_node).
func (f *Formation) MonitorURL() string { return f.monitorURL }

// Dir returns the directory that holds the formation (data directories,
// pg_autoctl's configuration and the logs, one per node: Node.LogPath).
func (f *Formation) Dir() string { return f.dir }

// Node returns the data node with that name, or nil.
func (f *Formation) Node(name string) *Node {
	for _, n := range f.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Close stops every node (an immediate shutdown through pg_autoctl, then
// SIGKILL for what is left after a while) and removes the formation's
// directory. It is safe to call more than once.
func (f *Formation) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	if f.stopListen != nil {
		f.stopListen()
		<-f.listenDone
	}
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	nodes := append([]*Node{}, f.Nodes...)
	if f.Monitor != nil {
		nodes = append(nodes, f.Monitor)
	}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		wg.Go(func() {
			if err := n.stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	errs = append(errs, os.RemoveAll(f.home))
	return errors.Join(errs...)
}

func (f *Formation) path(elem ...string) string {
	return filepath.Join(append([]string{f.dir}, elem...)...)
}

func (f *Formation) chown(path string) error {
	if f.cred == nil {
		return nil
	}
	return os.Chown(path, int(f.cred.Uid), int(f.cred.Gid))
}

// command returns cmd name args… run as the server user, in the
// formation's environment, in a process group of its own.
func (f *Formation) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = f.env
	cmd.Dir = f.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: f.cred}
	return cmd
}

// initdb makes n's data directory with settle's settings for tests plus
// extra, appended to postgresql.conf.
func (f *Formation) initdb(ctx context.Context, n *Node, extra []string) error {
	out, err := f.command(ctx, filepath.Join(filepath.Dir(f.pgctl), "initdb"), "-D", n.PGData, "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("error running initdb for %s: %w: %s", n.Name, err, lastLines(string(out), 5))
	}
	conf := append([]string{
		"# settle hatest: after pg_auto_failover's include, so these win",
		"unix_socket_directories = '" + f.path("run") + "'",
		"unix_socket_permissions = 0700",
		"max_connections = 200",
	}, extra...)
	file, err := os.OpenFile(filepath.Join(n.PGData, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(file, "\n%s\n", strings.Join(conf, "\n"))
	return errors.Join(err, file.Close())
}

// addGroup records the process group of a pg_autoctl process for the
// watchdog; dropGroup forgets it once the process has exited.
func (f *Formation) addGroup(pgid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pgids = append(f.pgids, pgid)
	return f.writeGroups()
}

func (f *Formation) dropGroup(pgid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pgids = slices.DeleteFunc(f.pgids, func(g int) bool { return g == pgid })
	_ = f.writeGroups()
}

func (f *Formation) writeGroups() error {
	var b strings.Builder
	for _, g := range f.pgids {
		fmt.Fprintln(&b, g)
	}
	tmp := filepath.Join(f.home, "pgids.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(f.home, "pgids"))
}

// watchdog starts a detached process that, once this process has exited
// (however it exited), stops the pg_autoctl process groups still recorded
// in home/pgids (SIGQUIT: pg_autoctl and PostgreSQL shut down at once, as
// `pg_autoctl stop --immediate` does; SIGKILL for anything left ten seconds
// later) and removes home. Processes are named by their ids only.
func (f *Formation) watchdog() error {
	script := fmt.Sprintf(`while [ -d /proc/%d ]; do sleep 0.2; done
groups=$(cat %[2]s/pgids 2>/dev/null)
for g in $groups; do kill -QUIT -$g 2>/dev/null; done
i=0
while [ $i -lt 50 ]; do
	alive=
	for g in $groups; do kill -0 -$g 2>/dev/null && alive=1; done
	[ -z "$alive" ] && break
	sleep 0.2; i=$((i+1))
done
for g in $groups; do kill -KILL -$g 2>/dev/null; done
rm -rf %[2]s
`, os.Getpid(), shellQuote(f.home))
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("error starting the formation's watchdog: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// findBinaries returns pg_autoctl and the directory of the PostgreSQL
// server binaries whose version has the pgautofailover extension.
func findBinaries() (autoctl, binDir string, err error) {
	autoctl, err = exec.LookPath("pg_autoctl")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_autoctl")
		if len(found) == 0 {
			return "", "", ErrNotInstalled
		}
		autoctl = found[len(found)-1]
	}
	controls, _ := filepath.Glob("/usr/share/postgresql/*/extension/pgautofailover.control")
	version := func(control string) string { return filepath.Base(filepath.Dir(filepath.Dir(control))) }
	major := func(control string) float64 { v, _ := strconv.ParseFloat(version(control), 64); return v }
	slices.SortFunc(controls, func(a, b string) int { return cmp.Compare(major(b), major(a)) }) // newest first
	for _, c := range controls {
		dir := filepath.Join("/usr/lib/postgresql", version(c), "bin")
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return autoctl, dir, nil
		}
	}
	return "", "", ErrNotInstalled
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("error finding a free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
