// Package pgembed runs a private PostgreSQL cluster from the server binaries
// installed on the machine: the embedded default database of settle, used
// when DATABASE_URL is unset, and the throwaway clusters of the tests.
//
// A shared cluster lives under a home directory (SETTLE_HOME), listens on a
// Unix socket in that directory and on loopback, and is found and reused by
// every settle process of the user: starting is serialised by an flock(2)
// lock that the kernel releases when its holder dies, so a crashed process
// never leaves a lock behind, and a stale postmaster.pid is recognised by
// checking whether its process is alive.
//
// When running as root the server runs as the unprivileged "postgres" user
// (PostgreSQL refuses to run as root). The package never touches a cluster it
// did not create, and never stops a shared cluster unless asked to.
//
// Every cluster directory records the home that made it (a file named
// settle-home), and every process that uses a cluster through Ensure holds a
// shared lock on it until it exits or calls Release. A process that started
// the server only for itself stops it in Release unless another process holds
// it; List and Prune find and remove the clusters whose home is gone.
package pgembed

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/settle/settle/internal/childenv"
	"github.com/settle/settle/internal/flock"
)

// ErrNoServer is returned when no PostgreSQL server binaries can be found.
var ErrNoServer = errors.New("no PostgreSQL server binaries found (initdb, pg_ctl, postgres): install the PostgreSQL server package (Debian: apt-get install postgresql) or set DATABASE_URL")

// DBUser is the superuser name of every cluster this package creates.
const DBUser = "settle"

// Options configure a cluster.
type Options struct {
	// Home is the directory that holds the cluster (its data directory,
	// socket, log and lock). Required.
	Home string
	// Ephemeral clusters are for tests: durability is switched off for
	// speed and a watchdog process stops the cluster and removes Home when
	// the process that started it exits, however it exits.
	Ephemeral bool
	// BinDir overrides the discovery of the server binaries; when empty,
	// SETTLE_PG_BINDIR does, and when that is unset FindBinDir looks.
	BinDir string
	// Logf receives one line per notable action (initdb, start, reuse).
	Logf func(format string, args ...any)
	// Port, when not 0, is the TCP port (and Unix socket name) the server
	// starts on, instead of a free one picked at random. Fault tests pass
	// the Port of a cluster they stopped so that a restarted server keeps
	// the address its clients were given. A server that is already running
	// is reused on whatever port it has.
	Port int
}

// Cluster is a running cluster.
type Cluster struct {
	// Home is the home directory the cluster belongs to (Options.Home).
	Home string
	// Dir is the cluster directory: Dir/data is the data directory and
	// the Unix socket lives in Dir/run.
	Dir    string
	BinDir string
	Port   int
	PID    int
	// Started is true when this call started the server, false when it
	// reused one that was already running.
	Started bool

	runAs *credential
}

// DefaultHome returns $SETTLE_HOME, or ~/.local/share/settle.
func DefaultHome() (string, error) {
	if h := os.Getenv("SETTLE_HOME"); h != "" {
		return filepath.Abs(h)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("error finding the home directory (set SETTLE_HOME): %w", err)
	}
	return filepath.Join(home, ".local", "share", "settle"), nil
}

// FindBinDir looks for the server binaries on PATH, through
// `pg_config --bindir`, and in /usr/lib/postgresql/*/bin, newest first.
func FindBinDir() (string, error) {
	has := hasServer
	if p, err := exec.LookPath("pg_ctl"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", ErrNoServer
}

func hasServer(dir string) bool {
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		// dir is a server binary directory being probed (PATH, pg_config,
		// /usr/lib/postgresql, or the operator's SETTLE_PG_BINDIR).
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() { //nolint:gosec // G703: see above
			return false
		}
	}
	return true
}

func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// URL returns a connection URL for database db over the Unix socket.
func (c *Cluster) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(DBUser), Path: "/" + db}
	q := url.Values{}
	q.Set("host", c.socketDir())
	q.Set("port", strconv.Itoa(c.Port))
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

func (c *Cluster) dataDir() string   { return filepath.Join(c.Dir, "data") }
func (c *Cluster) socketDir() string { return filepath.Join(c.Dir, "run") }
func (c *Cluster) logFile() string   { return filepath.Join(c.Dir, "postgres.log") }

// Ensure returns the running cluster under opts.Home, creating and starting
// it first when needed. Concurrent callers, in this process or others, get
// the same cluster. The calling process holds the cluster (see Release)
// until it exits or calls Release.
func Ensure(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Home == "" {
		return nil, errors.New("pgembed: Options.Home is required")
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	binDir := opts.BinDir
	if binDir == "" {
		binDir = os.Getenv("SETTLE_PG_BINDIR")
	}
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	} else if !hasServer(binDir) {
		return nil, fmt.Errorf("%s: %w", binDir, ErrNoServer)
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Home, 0o700); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", opts.Home, err)
	}
	c := &Cluster{Home: opts.Home, Dir: clusterDir(opts.Home, cred), BinDir: binDir, runAs: cred}

	unlock, err := flock.Lock(ctx, filepath.Join(opts.Home, "cluster.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()

	if err := c.prepareDir(); err != nil {
		return nil, err
	}
	if err := holdUse(ctx, c.Dir); err != nil {
		return nil, err
	}
	if pid, port, ok := c.running(); ok {
		c.PID, c.Port = pid, port
		if err := c.waitReady(ctx, 30*time.Second); err == nil {
			return c, nil
		}
	}
	if err := c.initIfNeeded(ctx, opts.Ephemeral, logf); err != nil {
		return nil, err
	}
	if err := c.start(ctx, opts.Port, logf); err != nil {
		return nil, err
	}
	c.Started = true
	if opts.Ephemeral {
		if err := c.startWatchdog(opts.Home); err != nil {
			_ = c.Stop(context.Background())
			return nil, err
		}
	}
	return c, nil
}

// Find returns the cluster under home if it is running, without starting it.
func Find(home string) (*Cluster, bool, error) {
	cred, err := serverCredential()
	if err != nil {
		return nil, false, err
	}
	binDir, _ := FindBinDir()
	c := &Cluster{Home: home, Dir: clusterDir(home, cred), BinDir: binDir, runAs: cred}
	if _, err := os.Stat(filepath.Join(c.dataDir(), "PG_VERSION")); err == nil {
		// A cluster made before clusters recorded their home learns it
		// here, from a home that is known to own it.
		_ = writeOwner(c.Dir, home)
	}
	pid, port, ok := c.running()
	c.PID, c.Port = pid, port
	return c, ok, nil
}

// Stop stops the server with a fast shutdown (sessions are disconnected,
// committed work is kept).
func (c *Cluster) Stop(ctx context.Context) error {
	return c.stop(ctx, "fast")
}

// stop runs pg_ctl stop in mode and then waits for the postmaster's
// process to end: pg_ctl returns when the server has removed its pid file,
// which it does just before it exits, so a caller that checks the process
// right after could still find it.
func (c *Cluster) stop(ctx context.Context, mode string) error {
	pid, _, _ := c.running()
	if err := c.pgctl(ctx, "-D", c.dataDir(), "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return err
	}
	if pid == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for alive(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server (pid %d) at %s had removed its pid file but had not exited: %w", pid, c.Dir, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// StopImmediate stops the server with an immediate shutdown: every server
// process quits at once, as in a crash, and the next start runs crash
// recovery from the WAL. Committed work is kept (synchronous_commit stays on
// even in ephemeral clusters). Fault tests use it to simulate a database
// that dies under load.
func (c *Cluster) StopImmediate(ctx context.Context) error {
	return c.stop(ctx, "immediate")
}

// running reads postmaster.pid and reports the server's pid and port when
// its process is alive. A stale file (the server crashed) reports false.
func (c *Cluster) running() (pid, port int, ok bool) {
	f, err := os.Open(filepath.Join(c.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 4 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || pid <= 0 || !isPostgres(pid) {
		return 0, 0, false
	}
	return pid, port, true
}

// prepareDir creates the cluster directory, owned by the server user, and
// records in it the home it belongs to.
func (c *Cluster) prepareDir() error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("error creating %s: %w", c.Dir, err)
	}
	if err := c.runAs.chown(c.Dir); err != nil {
		return err
	}
	return writeOwner(c.Dir, c.Home)
}

func (c *Cluster) initIfNeeded(ctx context.Context, ephemeral bool, logf func(string, ...any)) error {
	if _, err := os.Stat(filepath.Join(c.dataDir(), "PG_VERSION")); err == nil {
		return nil
	}
	if err := os.MkdirAll(c.socketDir(), 0o700); err != nil {
		return fmt.Errorf("error creating %s: %w", c.socketDir(), err)
	}
	if err := c.runAs.chown(c.socketDir()); err != nil {
		return err
	}
	// A half-finished initdb (crash) leaves a data directory without
	// PG_VERSION; start again from nothing.
	if err := os.RemoveAll(c.dataDir()); err != nil {
		return fmt.Errorf("error removing incomplete data directory: %w", err)
	}
	pw := make([]byte, 16)
	if _, err := rand.Read(pw); err != nil {
		return err
	}
	pwFile := filepath.Join(c.Dir, "password")
	if err := os.WriteFile(pwFile, []byte(hex.EncodeToString(pw)+"\n"), 0o600); err != nil {
		return fmt.Errorf("error writing password file: %w", err)
	}
	if err := c.runAs.chown(pwFile); err != nil {
		return err
	}
	logf("creating PostgreSQL cluster in %s", c.Dir)
	args := []string{"-D", c.dataDir(), "-U", DBUser, "-E", "UTF8", "--no-locale",
		"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile=" + pwFile}
	if ephemeral {
		args = append(args, "--no-sync")
	}
	if out, err := c.command(ctx, "initdb", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("error running initdb: %w: %s", err, lastLines(string(out), 5))
	}
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = '" + c.socketDir() + "'",
		"unix_socket_permissions = 0700",
		"max_connections = 300",
		"shared_buffers = 128MB",
		"log_min_messages = warning",
		"log_min_error_statement = panic",
	}
	if ephemeral {
		// fsync off survives a killed server (the OS keeps the writes), not
		// a killed machine: fine for tests. synchronous_commit stays on, so
		// an acknowledged commit survives an immediate shutdown.
		conf = append(conf, "fsync = off", "full_page_writes = off")
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("error opening postgresql.conf: %w", err)
	}
	_, err = fmt.Fprintf(f, "\n# settle\n%s\n", strings.Join(conf, "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("error writing postgresql.conf: %w", err)
	}
	return nil
}

// start starts the server on fixedPort, or on a free port when it is 0.
func (c *Cluster) start(ctx context.Context, fixedPort int, logf func(string, ...any)) error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		// A fixed port is retried as is: after an immediate stop the old
		// server's children may hold it for a moment.
		port := fixedPort
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return err
			}
		}
		c.Port = port
		err := c.pgctl(ctx, "-D", c.dataDir(), "-l", c.logFile(), "-w", "-t", "60",
			"-o", fmt.Sprintf("-p %d", port), "start")
		if err == nil {
			pid, _, ok := c.running()
			if !ok {
				return fmt.Errorf("error starting PostgreSQL: started but postmaster.pid is unreadable; see %s", c.logFile())
			}
			c.PID = pid
			logf("started PostgreSQL in %s (pid %d, port %d)", c.Dir, pid, port)
			return c.waitReady(ctx, 30*time.Second)
		}
		// The port may have been taken in between, or the children of a
		// crashed server may still hold its shared memory: try again.
		lastErr = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 300 * time.Millisecond):
		}
	}
	return fmt.Errorf("error starting PostgreSQL: %w; see %s", lastErr, c.logFile())
}

// waitReady waits until the server accepts connections on its socket.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	sock := filepath.Join(c.socketDir(), fmt.Sprintf(".s.PGSQL.%d", c.Port))
	for {
		conn, err := net.DialTimeout("unix", sock, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("error waiting for PostgreSQL on %s: %w", sock, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startWatchdog starts a detached process that stops the cluster and
// removes home (and the cluster directory, when it lives elsewhere) once
// the current process has exited, so that a test binary killed by a
// timeout leaves no server behind.
func (c *Cluster) startWatchdog(home string) error {
	remove := shellQuote(home)
	if !strings.HasPrefix(c.Dir, home+string(filepath.Separator)) {
		remove += " " + shellQuote(c.Dir)
	}
	stop := fmt.Sprintf("%s -D %s -m immediate -w stop >/dev/null 2>&1",
		shellQuote(filepath.Join(c.BinDir, "pg_ctl")), shellQuote(c.dataDir()))
	if c.runAs != nil {
		// rm of a root-owned home needs root; pg_ctl refuses root. Run the
		// stop as the server user and the removal as ourselves.
		stop = fmt.Sprintf("setpriv --reuid=%d --regid=%d --clear-groups %s", c.runAs.uid, c.runAs.gid, stop)
	}
	script := fmt.Sprintf("while [ -d /proc/%d ]; do sleep 0.2; done\n%s\nrm -rf %s", os.Getpid(), stop, remove)
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = c.serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("error starting the cluster watchdog: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

func (c *Cluster) pgctl(ctx context.Context, args ...string) error {
	out, err := c.command(ctx, "pg_ctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("error running pg_ctl %s: %w: %s", args[len(args)-1], err, lastLines(string(out), 5))
	}
	return nil
}

// command builds a command for one of the server binaries, run as the
// server user.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, name), args...)
	// The server outlives this process and its environment is readable in
	// /proc: it gets an allow-listed minimum, never settle's secrets.
	cmd.Env = c.serverEnv()
	cmd.Dir = "/"
	// pg_ctl start daemonises the server; keep it out of our process group
	// so a Ctrl-C in the terminal of the first settle process does not stop
	// the cluster every other process shares.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.runAs != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.runAs.uid, Gid: c.runAs.gid, NoSetGroups: true}
	}
	return cmd
}

// serverEnv is the whole environment of initdb, pg_ctl and the server they
// start: PATH (the server binaries first), the C locale, HOME (the cluster
// directory, which the server user owns) and the few harmless variables
// childenv keeps. Nothing else of ours (SETTLE_API_TOKEN,
// SETTLE_BANK_TOKEN, DATABASE_URL, …) reaches the postgres user's processes.
func (c *Cluster) serverEnv() []string {
	path := c.BinDir
	if p := os.Getenv("PATH"); p != "" {
		path += string(os.PathListSeparator) + p
	}
	return childenv.Minimal("PATH="+path, "HOME="+c.Dir)
}

// credential is the unprivileged user the server runs as when we are root.
type credential struct {
	uid, gid uint32
	name     string
}

func (cr *credential) chown(path string) error {
	if cr == nil {
		return nil
	}
	if err := os.Chown(path, int(cr.uid), int(cr.gid)); err != nil {
		return fmt.Errorf("error giving %s to user %s: %w", path, cr.name, err)
	}
	return nil
}

// ServerCredential returns the credential the PostgreSQL binaries run under:
// nil when they can run as the current user, the postgres user's when we are
// root (PostgreSQL refuses root). Test support that runs other PostgreSQL
// tools (internal/testsupport/hatest) starts them with it.
func ServerCredential() (*syscall.Credential, error) {
	cred, err := serverCredential()
	if cred == nil || err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: cred.uid, Gid: cred.gid, NoSetGroups: true}, nil
}

// serverCredential returns nil when the server can run as the current user,
// and the postgres user when we are root.
func serverCredential() (*credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root: PostgreSQL refuses to run as root and there is no \"postgres\" user to run it as (install the PostgreSQL server package, run settle as another user, or set DATABASE_URL): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &credential{uid: uint32(uid), gid: uint32(gid), name: u.Username}, nil
}

// ClusterRoot is where clusters live when settle runs as root and the
// server user cannot reach their home.
const ClusterRoot = "/var/lib/settle"

// clusterDir is home/pg, unless we are root and the server user cannot
// reach home (root's home is usually mode 0700); then the cluster lives in
// ClusterRoot/cluster-<hash of home>, and home/pg.path says where.
func clusterDir(home string, cred *credential) string {
	dir := filepath.Join(home, "pg")
	if cred == nil || reachable(cred, home) {
		return dir
	}
	alt := altClusterDir(home)
	_ = os.MkdirAll(filepath.Dir(alt), 0o755)
	_ = os.WriteFile(filepath.Join(home, "pg.path"), []byte(alt+"\n"), 0o644)
	return alt
}

// reachable reports whether the user cred can traverse every directory on
// the way to dir.
func reachable(cred *credential, dir string) bool {
	p := dir
	for {
		fi, err := os.Stat(p)
		if err != nil {
			return false
		}
		st := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		var ok bool
		switch {
		case st.Uid == cred.uid:
			ok = mode&0o100 != 0
		case st.Gid == cred.gid:
			ok = mode&0o010 != 0
		default:
			ok = mode&0o001 != 0
		}
		if !ok {
			return false
		}
		parent := filepath.Dir(p)
		if parent == p {
			return true
		}
		p = parent
	}
}

// altClusterDir is the directory under ClusterRoot of home's cluster.
func altClusterDir(home string) string {
	return filepath.Join(ClusterRoot, "cluster-"+shortHash(home))
}

func shortHash(s string) string {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 36)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("error finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
