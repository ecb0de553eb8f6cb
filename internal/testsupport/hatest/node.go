package hatest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// Node is the monitor or a data node of a formation: its PostgreSQL data
// directory and the pg_autoctl process that runs it, in the foreground, as a
// child of this process.
type Node struct {
	f *Formation
	// Name is the node's name on the monitor ("monitor", "node1", "node2").
	Name string
	// Port is its PostgreSQL port on 127.0.0.1.
	Port int
	// PGData is its data directory.
	PGData string

	mu     sync.Mutex
	proc   *process // the current pg_autoctl, nil before the first start
	killed bool     // Kill ran and no start since
}

// process is one pg_autoctl process, leader of its process group.
type process struct {
	pid  int
	done chan struct{}
}

func (p *process) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// LogPath is the file that collects the output of the node's pg_autoctl
// processes (and, through it, of its PostgreSQL server).
func (n *Node) LogPath() string { return filepath.Join(n.f.logDir, n.Name+".log") }

// create runs `pg_autoctl create postgres … --run` for a data node: it
// registers with the monitor (as the primary of an empty group, or as a
// standby made by pg_basebackup) and keeps running it.
func (n *Node) create(ctx context.Context) error {
	return n.start(ctx, "create", "postgres", "--pgdata", n.PGData, "--pgport", strconv.Itoa(n.Port),
		"--pghost", n.f.path("run"), "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--name", n.Name,
		"--username", DBUser, "--dbname", DBName, "--monitor", n.f.monitorURL,
		"--auth", "trust", "--no-ssl", "--pgctl", n.f.pgctl, "--run")
}

// start starts pg_autoctl args… for n, its output appended to n's log.
func (n *Node) start(ctx context.Context, args ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && n.proc.alive() {
		return fmt.Errorf("%s: pg_autoctl is already running (pid %d)", n.Name, n.proc.pid)
	}
	log, err := os.OpenFile(n.LogPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child holds its own descriptor
	fmt.Fprintf(log, "---- %s pg_autoctl %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	// The process outlives ctx: it is ended by Kill, stop or Close only.
	cmd := n.f.command(context.WithoutCancel(ctx), n.f.autoctl, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("error starting pg_autoctl for %s: %w", n.Name, err)
	}
	p := &process{pid: cmd.Process.Pid, done: make(chan struct{})}
	if err := n.f.addGroup(p.pid); err != nil {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return err
	}
	go func() {
		_ = cmd.Wait()
		n.f.dropGroup(p.pid)
		close(p.done)
	}()
	n.proc, n.killed = p, false
	return nil
}

// Restart starts the node's pg_autoctl again (`pg_autoctl run`), as after a
// machine comes back: a former primary learns from the monitor that it was
// demoted, rewinds and rejoins as a standby. Wait for that with
// WaitSecondary.
func (n *Node) Restart(ctx context.Context) error {
	return n.start(ctx, "run", "--pgdata", n.PGData)
}

// Kill kills the node as a crashed machine dies: SIGKILL for its pg_autoctl
// processes and for every process of its PostgreSQL server at once, so
// that nothing restarts the server and nothing is shut down cleanly. It
// returns once they are gone.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || !n.proc.alive() {
		return fmt.Errorf("%s is not running", n.Name)
	}
	pgid := n.proc.pid
	// Stopped, pg_autoctl cannot restart the server and the postmaster
	// (in pg_autoctl's process group) cannot fork: the list of its
	// children is final.
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("error stopping %s: %w", n.Name, err)
	}
	var pids []int
	if pm, ok := postmaster(n.PGData); ok {
		pids = append(children(pm), pm)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("error killing %s: %w", n.Name, err)
	}
	<-n.proc.done
	for _, pid := range pids {
		if err := waitGone(pid, 10*time.Second); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	n.killed = true
	return nil
}

// crashed reports whether the node's pg_autoctl exited although nothing
// asked it to (Kill or Close).
func (n *Node) crashed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.proc.alive() && !n.killed
}

// Running reports whether the node's pg_autoctl is running.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && n.proc.alive()
}

// stop ends the node for Close: SIGQUIT to pg_autoctl's process group (the
// server shuts down at once, as with `pg_autoctl stop --immediate`), then
// SIGKILL if it is still there after 30 s. A node killed and never restarted
// leaves a SysV shared memory segment behind (a postmaster removes it only
// when it exits normally, or when the next one starts in that directory);
// stop removes it.
func (n *Node) stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var err error
	if n.proc != nil && n.proc.alive() {
		_ = syscall.Kill(-n.proc.pid, syscall.SIGQUIT)
		select {
		case <-n.proc.done:
		case <-time.After(30 * time.Second):
			err = fmt.Errorf("%s did not stop within 30s and was killed", n.Name)
		}
		if pm, ok := postmaster(n.PGData); ok {
			err = errors.Join(err, waitGone(pm, 30*time.Second))
		}
		// Whatever of the group outlived its leader (a pg_autoctl
		// subprocess still stopping the server): the group id stays
		// reserved while a member lives, so this reaches only them.
		_ = syscall.Kill(-n.proc.pid, syscall.SIGKILL)
		<-n.proc.done
	}
	if n.killed {
		removeSharedMemory(n.PGData)
	}
	return err
}

// postmaster returns the pid of the data directory's postmaster when it
// runs.
func postmaster(pgdata string) (int, bool) {
	lines := pidFile(pgdata)
	if len(lines) == 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	return pid, true
}

func pidFile(pgdata string) []string {
	f, err := os.Open(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// children returns the children of process pid, read from every
// /proc/PID/stat (Linux). /proc/PID/task/TID/children would be shorter but
// may miss children while processes fork and exit around it.
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		_, rest, ok := strings.Cut(string(b[bytes.LastIndexByte(b, ')')+1:]), " ")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) >= 2 && fields[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// waitGone waits until process pid no longer exists.
func waitGone(pid int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for !gone(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still exists after %s", pid, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// gone reports whether process pid has exited (a zombie, not yet reaped by
// its parent, has).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && strings.HasPrefix(rest, "Z")
}

// removeSharedMemory removes the SysV segment recorded in postmaster.pid
// (line 7: key and id) if no process is attached to it any more.
func removeSharedMemory(pgdata string) {
	lines := pidFile(pgdata)
	if len(lines) < 7 {
		return
	}
	fields := strings.Fields(lines[6])
	if len(fields) != 2 {
		return
	}
	key, err1 := strconv.Atoi(fields[0])
	id, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil {
		return
	}
	var desc unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &desc); err != nil || int(desc.Perm.Key) != key || desc.Nattch != 0 {
		return
	}
	_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
}

// URL returns a URL of database db on this node alone, as the database
// superuser (postgres, trusted on loopback), whatever the node's role.
func (n *Node) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.Port, db)
}

// PauseReplication stops (SIGSTOP) the WAL senders of n, a primary (every
// process pg_stat_replication lists): n goes on committing locally but sends
// its standby nothing more, so with synchronous replication every commit
// waits, committed on n only and visible there, for a confirmation that
// cannot come until resume (SIGCONT) is called or n dies. What was not sent
// is lost with n, as when a network drops it. Call resume in every case (it
// is harmless once n is dead).
func (n *Node) PauseReplication(ctx context.Context) (resume func(), err error) {
	conn, err := pgx.Connect(ctx, n.URL("postgres"))
	if err != nil {
		return nil, fmt.Errorf("error connecting to %s: %w", n.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_replication")
	if err != nil {
		return nil, fmt.Errorf("error listing the WAL senders of %s: %w", n.Name, err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("error listing the WAL senders of %s: %w", n.Name, err)
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("%s has no WAL sender (is it a primary with a standby?)", n.Name)
	}
	var stopped []int
	resume = func() {
		for _, pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(int(pid), syscall.SIGSTOP); err != nil {
			resume()
			return nil, fmt.Errorf("error stopping WAL sender %d of %s: %w", pid, n.Name, err)
		}
		stopped = append(stopped, int(pid))
	}
	return resume, nil
}
