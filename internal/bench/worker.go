package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// workerProc is a `settle worker` subprocess.
type workerProc struct {
	cmd  *exec.Cmd
	base string
	done chan error
	errs *tail
}

const listeningPrefix = "settle worker: listening on "

// startWorker starts cfg.WorkerCommand against dbURL and bankURL and
// returns once it accepts connections. The process is stopped when ctx
// ends or by stop.
func startWorker(ctx context.Context, cfg Config, dbURL, bankURL string) (*workerProc, error) {
	args := append([]string{}, cfg.WorkerCommand[1:]...)
	args = append(args, "--listen", "127.0.0.1:0", "--bank-url", bankURL, "--log-level", "warn", "--log-format", "json")
	if cfg.BankConcurrency > 0 {
		args = append(args, "--bank-concurrency", strconv.Itoa(cfg.BankConcurrency))
	}
	if cfg.WorkerCPUProfile != "" {
		args = append(args, "--cpuprofile", cfg.WorkerCPUProfile)
	}
	cmd := exec.CommandContext(ctx, cfg.WorkerCommand[0], args...)
	cmd.Env = workerEnv(os.Environ(), dbURL)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("error starting the worker: %w", err)
	}
	w := &workerProc{cmd: cmd, done: make(chan error, 1), errs: &tail{max: 4096}}
	cmd.Stderr = w.errs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("error starting the worker: %w", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), listeningPrefix); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
	}()
	go func() { w.done <- cmd.Wait() }()
	select {
	case w.base = <-addr:
		return w, nil
	case err := <-w.done:
		return nil, fmt.Errorf("error starting the worker: it exited (%v): %s", err, w.errs)
	case <-time.After(time.Minute):
		w.kill()
		return nil, fmt.Errorf("error starting the worker: not listening after a minute: %s", w.errs)
	}
}

// workerEnv is env without settle's own variables (a crash point or an API
// token set in the caller's shell must not reach the benchmark's worker),
// with DATABASE_URL set to dbURL.
func workerEnv(env []string, dbURL string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if strings.HasPrefix(kv, "SETTLE_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "DATABASE_URL="+dbURL)
}

// peakRSSMB reads the worker's peak resident set size (VmHWM) in MB.
func (w *workerProc) peakRSSMB() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("error reading the worker's peak RSS: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("error parsing VmHWM %q: %w", v, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, errors.New("error reading the worker's peak RSS: no VmHWM in /proc status")
}

// stop ends the worker gracefully (SIGTERM), killing it if it takes longer
// than 30 seconds, and waits for it.
func (w *workerProc) stop() error {
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		w.kill()
	}
	select {
	case err := <-w.done:
		if err != nil {
			return fmt.Errorf("error stopping the worker: %w: %s", err, w.errs)
		}
		return nil
	case <-time.After(30 * time.Second):
		w.kill()
		<-w.done
		return fmt.Errorf("error stopping the worker: killed after 30s: %s", w.errs)
	}
}

func (w *workerProc) kill() { _ = w.cmd.Process.Kill() }

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
