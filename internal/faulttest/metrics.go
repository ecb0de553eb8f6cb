package faulttest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// WorkerFlags are short intervals, so that a settlement whose job was lost
// is resolved within seconds; append to them (a later flag wins).
func WorkerFlags(bankURL string) []string {
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

// StartWorker starts `bin worker args…` with DATABASE_URL=dbURL and env, its
// stderr in logPath, and waits (up to a minute, or ctx) until it listens.
// The caller must Kill it.
func StartWorker(ctx context.Context, bin, name, dbURL, logPath string, env []string, args ...string) (*Worker, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"worker"}, args...)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	cmd.Env = append(cmd.Env, env...)
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
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "settle worker: listening on "); ok {
				urls <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
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
		err := w.err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return nil, fmt.Errorf("%s exited before listening: %w\n%s", name, err, Tail(logPath, 30))
	case <-ctx.Done():
		w.Kill()
		return nil, fmt.Errorf("%s did not listen: %w\n%s", name, ctx.Err(), Tail(logPath, 30))
	}
}

// PID returns the process id.
func (w *Worker) PID() int { return w.cmd.Process.Pid }

// Alive reports whether the process is still running.
func (w *Worker) Alive() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
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

// ProcessMetrics are a process's resource figures as its /metrics reports
// them (the Go and process collectors).
type ProcessMetrics struct {
	Goroutines float64
	RSSBytes   float64
	OpenFDs    float64
	Threads    float64
}

// Metrics reads go_goroutines, process_resident_memory_bytes,
// process_open_fds and go_threads from the worker's /metrics.
func (w *Worker) Metrics(ctx context.Context) (ProcessMetrics, error) {
	return ScrapeMetrics(ctx, w.URL)
}

// ScrapeMetrics reads the process figures from baseURL/metrics.
func ScrapeMetrics(ctx context.Context, baseURL string) (ProcessMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return ProcessMetrics{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ProcessMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ProcessMetrics{}, fmt.Errorf("GET /metrics answered %d", resp.StatusCode)
	}
	var m ProcessMetrics
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "go_goroutines":
			dst = &m.Goroutines
		case "process_resident_memory_bytes":
			dst = &m.RSSBytes
		case "process_open_fds":
			dst = &m.OpenFDs
		case "go_threads":
			dst = &m.Threads
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return ProcessMetrics{}, fmt.Errorf("error parsing %s: %w", name, err)
		}
		*dst = v
		found++
	}
	if err := sc.Err(); err != nil {
		return ProcessMetrics{}, err
	}
	if found < 4 {
		return ProcessMetrics{}, errors.New("GET /metrics lacks the Go and process collectors")
	}
	return m, nil
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
