package workerproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// listeningPrefix starts the line `settle worker` prints on stdout once it
// accepts connections; the base URL of its API follows.
const listeningPrefix = "settle worker: listening on "

// StartTimeout is how long Start waits at the most for the listening line.
const StartTimeout = time.Minute

// tailLines is how many lines of the log an error of Start or Wait shows.
const tailLines = 30

// Options say how to start a worker.
type Options struct {
	// Executable is the settle binary; Start runs `Executable worker Args…`.
	Executable string
	// Name names the worker in errors (default "worker").
	Name string
	// DatabaseURL is the worker's DATABASE_URL.
	DatabaseURL string
	// LogPath is the file the worker's stderr is written to (created or
	// truncated). Required.
	LogPath string
	// Env are extra variables (KEY=value) for the worker; they win over
	// the ones kept from our environment.
	Env []string
	// Args follow `worker` on the command line.
	Args []string
	// KeepSettleEnv names the SETTLE_* variables of our environment the
	// worker inherits (the demo keeps SETTLE_HOME and SETTLE_PG_BINDIR).
	// By default it inherits none, so that a developer's settings (crash
	// points, tokens, flags) never leak into it; DATABASE_URL is never
	// inherited.
	KeepSettleEnv []string
	// DieWithParent asks the kernel to send the worker SIGTERM when its
	// parent dies, however it dies (Linux only; ignored elsewhere).
	DieWithParent bool
}

// Proc is one running or exited `settle worker` subprocess.
type Proc struct {
	name    string
	logPath string
	url     string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // of cmd.Wait, set before done is closed
}

// Start starts the worker that o describes and waits until it listens, at
// the most StartTimeout or until ctx ends; ctx does not bound the worker's
// life after Start returns. On error nothing is left running. The caller
// must Stop or Kill the Proc.
func Start(ctx context.Context, o Options) (*Proc, error) {
	if o.Name == "" {
		o.Name = "worker"
	}
	if o.Executable == "" || o.LogPath == "" {
		return nil, fmt.Errorf("error starting %s: Executable and LogPath are required", o.Name)
	}
	logFile, err := os.Create(o.LogPath)
	if err != nil {
		return nil, fmt.Errorf("error creating the log of %s: %w", o.Name, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(o.Executable, append([]string{"worker"}, o.Args...)...)
	cmd.Env = environ(os.Environ(), o.KeepSettleEnv, o.DatabaseURL, o.Env)
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr(o.DieWithParent)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("error starting %s: %w", o.Name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("error starting %s: %w", o.Name, err)
	}
	p := &Proc{name: o.Name, logPath: o.LogPath, cmd: cmd, done: make(chan struct{})}
	urls := make(chan string, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), listeningPrefix); ok {
				select {
				case urls <- strings.TrimSpace(u):
				default: // only the first one counts
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		// cmd.Wait closes the pipe: it must not run before the pipe is
		// read to EOF, or the listening line could be lost.
		<-drained
		p.err = cmd.Wait()
		close(p.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	select {
	case p.url = <-urls:
		return p, nil
	case <-p.done:
		select {
		case p.url = <-urls: // it listened, then exited: the caller sees it in Done
			return p, nil
		default:
		}
		err := p.err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return nil, fmt.Errorf("%s exited before listening: %w; its log %s ends:\n%s", o.Name, err, o.LogPath, Tail(o.LogPath, tailLines))
	case <-ctx.Done():
		p.Kill()
		return nil, fmt.Errorf("%s did not listen: %w; its log %s ends:\n%s", o.Name, ctx.Err(), o.LogPath, Tail(o.LogPath, tailLines))
	}
}

// environ is base without DATABASE_URL and without the SETTLE_* variables
// not named in keep, plus DATABASE_URL=dbURL and extra.
func environ(base, keep []string, dbURL string, extra []string) []string {
	env := make([]string, 0, len(base)+1+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || (strings.HasPrefix(k, "SETTLE_") && !slices.Contains(keep, k)) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "DATABASE_URL="+dbURL)
	return append(env, extra...)
}

// Name returns the worker's name (Options.Name).
func (p *Proc) Name() string { return p.name }

// URL returns the base URL of the worker's HTTP API.
func (p *Proc) URL() string { return p.url }

// LogPath returns the path of the file that holds the worker's stderr.
func (p *Proc) LogPath() string { return p.logPath }

// PID returns the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Alive reports whether the process is still running.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process (SIGTERM for a graceful stop).
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits up to within for the process to exit and returns how it
// ended, or an error if it is still running.
func (p *Proc) Wait(within time.Duration) (*os.ProcessState, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-p.done:
		return p.cmd.ProcessState, nil
	case <-t.C:
		return nil, fmt.Errorf("%s still running after %s; its log %s ends:\n%s", p.name, within, p.logPath, Tail(p.logPath, tailLines))
	}
}

// Kill sends SIGKILL, if the process still runs, and waits for it to exit.
func (p *Proc) Kill() {
	if p.Alive() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// Stop sends SIGTERM and waits up to within for a graceful exit, then
// kills. It returns the error of the exit (nil for status 0), or an error
// saying it had to kill.
func (p *Proc) Stop(within time.Duration) error {
	if p.Alive() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		p.Kill()
		return fmt.Errorf("%s did not stop within %s and was killed", p.name, within)
	}
}

// PeakRSSMB returns the process's peak resident set size (VmHWM of
// /proc/PID/status) in MiB. It works on Linux, while the process runs.
func (p *Proc) PeakRSSMB() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID()))
	if err != nil {
		return 0, fmt.Errorf("error reading the peak RSS of %s: %w", p.name, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("error parsing VmHWM %q of %s: %w", v, p.name, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("error reading the peak RSS of %s: no VmHWM in /proc status", p.name)
}

// KilledBySIGKILL reports whether ps ended by SIGKILL (a crash point, or
// Kill).
func KilledBySIGKILL(ps *os.ProcessState) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Tail returns the last n lines of the file at path, or the error reading
// it.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
