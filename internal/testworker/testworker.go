// Package testworker runs `settle worker` as a subprocess for the tests
// that need a real process to kill: it starts one against a database,
// waits for its "listening on" line, and kills it when the test ends.
//
// It owns only that process handling. It must never be imported by
// non-test code paths of the engine (the soak tool is a test tool too).
package testworker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/settle/settle/internal/testbin"
)

// FastFlags are short intervals, so that a settlement whose job was lost
// is resolved within seconds; append to them (a later flag wins).
func FastFlags(bankURL string) []string {
	return []string{
		"--listen", "127.0.0.1:0",
		"--bank-url", bankURL,
		"--pending-grace", "2s",
		"--job-timeout", "5s",
		"--rescue-after", "7s",
		"--lease", "6s",
		"--sweep-interval", "500ms",
		"--check-interval", "200ms",
		"--max-check-interval", "1s",
		"--fetch-poll-interval", "200ms",
		"--bank-timeout", "2s",
		"--shutdown-timeout", "6s",
		"--bank-concurrency", "8",
		"--db-max-conns", "10",
		"--log-format", "json",
	}
}

// Worker is one `settle worker` subprocess.
type Worker struct {
	Name string
	// URL is the base URL of its HTTP API.
	URL string
	// LogPath holds its stderr.
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // of Wait, once done is closed
}

// Env returns the environment of a worker: ours without DATABASE_URL and
// SETTLE_* (a developer's settings must not leak into a test), plus
// DATABASE_URL=dbURL and extra.
func Env(dbURL string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "SETTLE_") {
			env = append(env, kv)
		}
	}
	return append(append(env, "DATABASE_URL="+dbURL), extra...)
}

// Start starts `bin worker args…` with Env(dbURL, env…), its stderr in
// logPath, and waits (up to a minute, or ctx) until it listens. The caller
// must Kill or Stop it.
func Start(ctx context.Context, bin, name, dbURL, logPath string, env []string, args ...string) (*Worker, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"worker"}, args...)...)
	cmd.Env = Env(dbURL, env...)
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	w := &Worker{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	urls := make(chan string, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "settle worker: listening on "); ok {
				urls <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		<-drained // Wait must not run before the pipe is read to EOF
		w.err = cmd.Wait()
		logFile.Close()
		close(w.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	select {
	case w.URL = <-urls:
		return w, nil
	case <-w.done:
		return nil, fmt.Errorf("%s exited before listening: %v\n%s", name, w.err, Tail(logPath, 30))
	case <-ctx.Done():
		w.Kill()
		return nil, fmt.Errorf("%s did not listen: %w\n%s", name, ctx.Err(), Tail(logPath, 30))
	}
}

// StartT starts a worker for t with the settle binary of testbin, its log
// in t's temporary directory. It fails t if the worker does not listen,
// kills it when t ends, and shows the end of its log if t failed.
func StartT(t testing.TB, name, dbURL string, env []string, args ...string) *Worker {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	w, err := Start(context.Background(), testbin.Build(t), name, dbURL, logPath, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Kill()
		if t.Failed() {
			t.Logf("%s log tail:\n%s", name, Tail(logPath, 30))
		}
	})
	return w
}

// PID returns the process id.
func (w *Worker) PID() int { return w.cmd.Process.Pid }

// Signal sends sig to the process (SIGTERM for a graceful stop).
func (w *Worker) Signal(sig os.Signal) error { return w.cmd.Process.Signal(sig) }

// Done is closed when the process has exited.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Alive reports whether the process is still running.
func (w *Worker) Alive() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

// Wait waits up to within for the process to exit and returns how it
// ended, or an error if it is still running.
func (w *Worker) Wait(within time.Duration) (*os.ProcessState, error) {
	select {
	case <-w.done:
		return w.cmd.ProcessState, nil
	case <-time.After(within):
		return nil, fmt.Errorf("%s still running after %s\n%s", w.Name, within, Tail(w.LogPath, 30))
	}
}

// Kill sends SIGKILL, if the process still runs, and waits for it to die.
func (w *Worker) Kill() {
	if w.Alive() {
		_ = w.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-w.done
}

// Stop sends SIGTERM and waits up to within for a graceful exit, then
// kills. It returns the exit error, if any.
func (w *Worker) Stop(within time.Duration) error {
	if w.Alive() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-w.done:
		return w.err
	case <-time.After(within):
		w.Kill()
		return fmt.Errorf("%s did not stop within %s", w.Name, within)
	}
}

// KilledBySIGKILL reports whether ps ended by SIGKILL (a crash point).
func KilledBySIGKILL(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Tail returns the last n lines of the file at path.
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
