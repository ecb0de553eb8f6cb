// Package natsembed runs the embedded default JetStream server of settle
// (DESIGN.md section 18): with `--source nats` and no NATS_URL, a NATS
// server with JetStream, built into the settle binary, runs under
// $SETTLE_HOME/nats, started on first use and shared by every settle
// process of the user, exactly as the embedded PostgreSQL cluster is
// (internal/pgembed).
//
// The server runs as a process of its own (the settle binary re-executed
// as the hidden `settle nats-server` subcommand, in a session of its own),
// so it outlives the command that started it. Starting is serialised by an
// flock(2) on Dir/start.lock, which the kernel releases when its holder
// dies; the running server is recorded in Dir/server.json once it accepts
// connections, and a record whose process is gone is stale. Every process
// that uses the server through Ensure holds a shared flock on Dir/use.lock
// until it exits or calls Release; Release stops a server the caller
// started only when no other process holds it. The server fsyncs every
// write (sync_interval: always), as durable as the database, and exits by
// itself when its directory is removed.
package natsembed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/settle/settle/internal/childenv"
	"github.com/settle/settle/internal/flock"
)

// Subcommand is the hidden settle subcommand that runs the server.
const Subcommand = "nats-server"

// Server is the embedded server under a home.
type Server struct {
	// Home is the settle home; Dir is Home/nats (store, log, locks).
	Home string `json:"-"`
	Dir  string `json:"-"`
	// PID and Port are the server process's and its client port (on
	// 127.0.0.1).
	PID  int `json:"pid"`
	Port int `json:"port"`
	// Started is true when this process started the server.
	Started bool `json:"-"`
}

// URL is the server's client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }

// StoreDir is where JetStream keeps its streams.
func (s *Server) StoreDir() string { return filepath.Join(s.Dir, "store") }

// LogFile is the server's log.
func (s *Server) LogFile() string { return filepath.Join(s.Dir, "nats.log") }

func (s *Server) recordFile() string { return filepath.Join(s.Dir, "server.json") }

// DirOf returns the server directory of home.
func DirOf(home string) string { return filepath.Join(home, "nats") }

// Options configure Ensure.
type Options struct {
	// Home is the settle home ($SETTLE_HOME). Required.
	Home string
	// Executable is the settle binary to run as `settle nats-server`
	// (default: this process's own executable).
	Executable string
	// Logf receives one line per notable action (start, reuse).
	Logf func(format string, args ...any)
}

// Ensure returns the running server under opts.Home, starting it first
// when needed. Concurrent callers, in this process or others, get the same
// server. The calling process holds the server (see Release) until it
// exits or calls Release.
func Ensure(ctx context.Context, opts Options) (*Server, error) {
	if opts.Home == "" {
		return nil, errors.New("natsembed: Options.Home is required")
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s := &Server{Home: opts.Home, Dir: DirOf(opts.Home)}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", s.Dir, err)
	}
	unlock, err := flock.Lock(ctx, filepath.Join(s.Dir, "start.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.holdUse(); err != nil {
		return nil, err
	}
	if pid, port, ok := s.running(); ok {
		s.PID, s.Port = pid, port
		logf("using the embedded NATS server at %s (pid %d, port %d)", s.Dir, pid, port)
		return s, nil
	}
	exe := opts.Executable
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("error finding the settle binary: %w", err)
		}
	}
	if err := s.start(ctx, exe); err != nil {
		return nil, err
	}
	s.Started = true
	logf("started the embedded NATS server in %s (pid %d, port %d)", s.Dir, s.PID, s.Port)
	return s, nil
}

// Find returns the server under home and whether it runs, without
// starting it.
func Find(home string) (*Server, bool) {
	s := &Server{Home: home, Dir: DirOf(home)}
	pid, port, ok := s.running()
	s.PID, s.Port = pid, port
	return s, ok
}

// running reads the record and reports the server's pid and port when its
// process is alive and a settle nats-server, and it accepts connections.
func (s *Server) running() (pid, port int, ok bool) {
	b, err := os.ReadFile(s.recordFile())
	if err != nil {
		return 0, 0, false
	}
	var rec Server
	if json.Unmarshal(b, &rec) != nil || rec.PID <= 0 || rec.Port <= 0 || !isServer(rec.PID) {
		return 0, 0, false
	}
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", rec.Port), 2*time.Second)
	if err != nil {
		return 0, 0, false
	}
	conn.Close()
	return rec.PID, rec.Port, true
}

// isServer reports whether pid is alive and runs `settle nats-server`.
func isServer(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "\x00"+Subcommand+"\x00")
}

// start runs `exe nats-server --dir Dir` detached (its own session, its
// output in LogFile) and waits until it records itself.
func (s *Server) start(ctx context.Context, exe string) error {
	_ = os.Remove(s.recordFile())
	logf, err := os.OpenFile(s.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("error opening %s: %w", s.LogFile(), err)
	}
	defer logf.Close()
	cmd := exec.Command(exe, Subcommand, "--dir", s.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The server outlives this process and its environment is readable in
	// /proc: it gets an allow-listed minimum, never settle's secrets.
	cmd.Env = childenv.Minimal(homeEnv()...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("error starting the embedded NATS server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		if pid, port, ok := s.running(); ok && pid == cmd.Process.Pid {
			s.PID, s.Port = pid, port
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("error starting the embedded NATS server: it exited (%w); see %s", err, s.LogFile())
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return ctx.Err()
		case <-deadline.C:
			_ = cmd.Process.Kill()
			return fmt.Errorf("error starting the embedded NATS server: not ready after 30s; see %s", s.LogFile())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// homeEnv is HOME, when set: the one variable of ours the server keeps
// besides childenv's minimum.
func homeEnv() []string {
	if h, ok := os.LookupEnv("HOME"); ok {
		return []string{"HOME=" + h}
	}
	return nil
}

// Stop stops the server (SIGTERM: JetStream shuts down cleanly, every
// write already on disk) and waits until its process is gone.
func (s *Server) Stop(ctx context.Context) error {
	pid, _, ok := s.running()
	if !ok {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("error stopping the embedded NATS server (pid %d): %w", pid, err)
	}
	for isServer(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("error waiting for the embedded NATS server (pid %d) to stop: %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Release ends this process's use of the server. When this process
// started it and no other process uses it now, it also stops it and
// reports stopped.
func (s *Server) Release(ctx context.Context) (stopped bool, err error) {
	unlock, err := flock.Lock(ctx, filepath.Join(s.Dir, "start.lock"))
	if err != nil {
		return false, err
	}
	defer unlock()
	dropUse(s.Dir)
	if !s.Started {
		return false, nil
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, useLockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return false, fmt.Errorf("error opening the use lock: %w", err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil // another settle process uses it
	}
	if err != nil {
		return false, fmt.Errorf("error locking %s: %w", f.Name(), err)
	}
	if _, _, ok := s.running(); !ok {
		return false, nil
	}
	if err := s.Stop(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Dir holds the store (Dir/store) and the record (Dir/server.json).
	Dir string
	// Port is the client port on 127.0.0.1 (0: a free one).
	Port int
}

// NewServer returns a started JetStream server on 127.0.0.1:port (0: a
// free port) storing its streams in storeDir, fsyncing every write; it
// logs to stderr when logs is true. Tests run it in their own process;
// Serve runs it as the embedded server.
func NewServer(storeDir string, port int, logs bool) (*server.Server, error) {
	if port == 0 {
		port = -1 // the server picks a free port
	}
	opts := &server.Options{
		ServerName: "settle",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		SyncAlways: true,
		NoSigs:     true,
		NoLog:      !logs,
		// The HTTP monitoring port stays closed; nothing listens but the
		// client port.
		HTTPPort: 0,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("error configuring the NATS server: %w", err)
	}
	ns.ConfigureLogger()
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("error starting the NATS server on %s: not ready after 30s", storeDir)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		return nil, errors.New("error starting the NATS server: JetStream did not start")
	}
	return ns, nil
}

// Serve runs the embedded server until ctx ends or its directory is
// removed: it starts the server, records its pid and port in
// Dir/server.json, and shuts it down cleanly at the end.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Dir == "" {
		return errors.New("natsembed: ServeOptions.Dir is required")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("error creating %s: %w", o.Dir, err)
	}
	// A store lock keeps two servers off one store, whatever started them.
	f, err := os.OpenFile(filepath.Join(o.Dir, "store.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("error opening the store lock: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("error locking the store in %s: another server uses it", o.Dir)
	}
	ns, err := NewServer(filepath.Join(o.Dir, "store"), o.Port, true)
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	addr, ok := ns.Addr().(*net.TCPAddr)
	if !ok {
		return errors.New("error reading the NATS server's address")
	}
	rec, _ := json.Marshal(Server{PID: os.Getpid(), Port: addr.Port})
	tmp := filepath.Join(o.Dir, "server.json.tmp")
	if err := os.WriteFile(tmp, rec, 0o600); err != nil {
		return fmt.Errorf("error recording the server: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(o.Dir, "server.json")); err != nil {
		return fmt.Errorf("error recording the server: %w", err)
	}
	fmt.Fprintf(os.Stderr, "settle nats-server: serving JetStream on nats://127.0.0.1:%d, store %s (pid %d)\n", addr.Port, filepath.Join(o.Dir, "store"), os.Getpid())
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := os.Stat(o.Dir); errors.Is(err, os.ErrNotExist) {
				return nil // the home was removed: nobody can find this server any more
			}
		}
	}
}

// A process that uses the server holds a shared flock(2) on Dir/use.lock;
// the kernel drops it when the process exits.
const useLockName = "use.lock"

// uses holds this process's shared use locks, one per server directory.
// It mirrors a per-process kernel resource, hence a package variable.
var uses = struct {
	m     chan struct{}
	files map[string]*os.File
}{m: make(chan struct{}, 1), files: map[string]*os.File{}}

func (s *Server) holdUse() error {
	uses.m <- struct{}{}
	defer func() { <-uses.m }()
	if _, ok := uses.files[s.Dir]; ok {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, useLockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("error opening the use lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return fmt.Errorf("error locking %s: %w", f.Name(), err)
	}
	uses.files[s.Dir] = f
	return nil
}

func dropUse(dir string) {
	uses.m <- struct{}{}
	defer func() { <-uses.m }()
	if f, ok := uses.files[dir]; ok {
		f.Close()
		delete(uses.files, dir)
	}
}
