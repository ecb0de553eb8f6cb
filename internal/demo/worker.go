package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// workerProc is `settle worker` running as a child process.
type workerProc struct {
	cmd  *exec.Cmd
	url  string
	done chan error
	log  string
}

// workerFlags make the demo quick: short check intervals and sweeps, so a
// settlement left uncertain by a lost answer is resolved within seconds.
var workerFlags = []string{
	"--listen", "127.0.0.1:0",
	"--log-format", "json",
	"--check-interval", "200ms",
	"--max-check-interval", "2s",
	"--sweep-interval", "1s",
	"--fetch-poll-interval", "100ms",
	"--pending-grace", "5s",
	"--bank-timeout", "3s",
	// One request per bank call: a lost answer is not retried in the call
	// but becomes uncertain and is resolved by a status check, so the demo
	// shows the path that matters when money is in doubt.
	"--bank-attempts", "1",
}

// startWorker runs exe worker against dbURL and bankURL with the API token
// token, logging to logPath, and waits until it listens.
func startWorker(ctx context.Context, exe, dbURL, bankURL, token, logPath string) (*workerProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("error creating the worker log: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	args := append([]string{"worker", "--bank-url", bankURL}, workerFlags...)
	cmd := exec.Command(exe, args...)
	cmd.Env = childEnv(dbURL, token)
	cmd.Stderr = logf
	cmd.SysProcAttr = childAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("error starting the worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("error starting the worker: %w", err)
	}
	w := &workerProc{cmd: cmd, done: make(chan error, 1), log: logPath}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "settle worker: listening on "); ok {
				addr <- strings.TrimSpace(u)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { w.done <- cmd.Wait() }()
	select {
	case w.url = <-addr:
		return w, nil
	case err := <-w.done:
		w.done <- err
		return nil, fmt.Errorf("the worker exited before listening (%v); its log: %s\n%s", err, logPath, tail(logPath, 10))
	case <-time.After(60 * time.Second):
		_ = w.stop()
		return nil, fmt.Errorf("the worker did not listen within 60s; its log: %s", logPath)
	case <-ctx.Done():
		_ = w.stop()
		return nil, ctx.Err()
	}
}

// stop asks the worker to shut down gracefully (SIGTERM) and kills it if it
// has not exited within 20s.
func (w *workerProc) stop() error {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.done:
		w.done <- err
		return err
	case <-time.After(20 * time.Second):
		_ = w.cmd.Process.Kill()
		err := <-w.done
		w.done <- err
		return errors.New("the worker did not stop within 20s and was killed")
	}
}

// childEnv is this process's environment for the worker, pointed at the
// demo database, with the demo's token and none of the user's SETTLE_*
// settings (worker flags, crash points, bank credentials), so the demo
// always runs the same way.
func childEnv(dbURL, token string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || (strings.HasPrefix(k, "SETTLE_") && k != "SETTLE_PG_BINDIR" && k != "SETTLE_HOME") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "DATABASE_URL="+dbURL, "SETTLE_API_TOKEN="+token)
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
