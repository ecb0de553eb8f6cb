package intake_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/testbin"
	"github.com/settle/settle/internal/testdb"
)

// workerProc is a `settle worker` subprocess.
type workerProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
	done   chan struct{}
}

// startWorker runs `settle worker` on a free port against db with the extra
// environment, and waits for its "listening on" line. The process is
// killed when the test ends if it still runs.
func startWorker(t *testing.T, bin string, db *testdb.DB, env ...string) *workerProc {
	t.Helper()
	cmd := exec.Command(bin, "worker", "--listen", "127.0.0.1:0", "--bank-url", "http://"+closedPort(t),
		"--log-format", "json", "--shutdown-timeout", "5s")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "SETTLE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append([]string{"DATABASE_URL=" + db.URL}, env...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &workerProc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	var drained sync.WaitGroup
	drained.Add(1)
	go func() {
		defer drained.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "settle worker: listening on "); ok {
				urls <- u
			}
		}
	}()
	go func() {
		drained.Wait() // Wait must not run before the pipe is read to EOF
		_ = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = cmd.Process.Kill()
			<-w.done
		}
	})
	select {
	case w.url = <-urls:
	case <-w.done:
		t.Fatalf("worker exited before listening: %v\n%s", cmd.ProcessState, w.stderr)
	case <-time.After(2 * time.Minute):
		t.Fatalf("worker did not start listening\n%s", w.stderr)
	}
	return w
}

// wait waits for the process to end and returns how it ended.
func (w *workerProc) wait(t *testing.T) syscall.WaitStatus {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		t.Fatalf("worker did not exit\n%s", w.stderr)
	}
	return w.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func postTo(t *testing.T, url, body string) (int, error) {
	t.Helper()
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Post(url+"/v1/settlements", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestWorkerCrashPoints kills the worker (SIGKILL, through SETTLE_CRASH_AT)
// just before and just after the intake commit, restarts it, redelivers
// the event and finds exactly one receipt, one settlement and one job.
func TestWorkerCrashPoints(t *testing.T) {
	t.Parallel()
	bin := testbin.Build(t)
	for point, wantStatus := range map[string]int{crash.IntakeBeforeCommit: http.StatusCreated, crash.IntakeAfterCommit: http.StatusOK} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			body := mustJSON(t, eventFields("crash-1"))

			w := startWorker(t, bin, db, "SETTLE_CRASH_AT="+point)
			if status, err := postTo(t, w.url, body); err == nil {
				t.Fatalf("the crashing worker answered %d", status)
			}
			if ws := w.wait(t); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("worker ended with %v, want SIGKILL\n%s", w.cmd.ProcessState, w.stderr)
			}

			w2 := startWorker(t, bin, db)
			status, err := postTo(t, w2.url, body)
			if err != nil || status != wantStatus {
				t.Fatalf("redelivery: %d %v, want %d\n%s", status, err, wantStatus, w2.stderr)
			}
			if status, err := postTo(t, w2.url, body); err != nil || status != http.StatusOK {
				t.Fatalf("second redelivery: %d %v", status, err)
			}
			// The worker runs the River workers too (against a bank that
			// does not answer), so count only what intake writes.
			var receipts, settlements, creations, sends int
			if err := db.Pool.QueryRow(context.Background(), `SELECT
				(SELECT count(*) FROM settlement_receipts), (SELECT count(*) FROM settlements),
				(SELECT count(*) FROM settlement_transitions WHERE from_state IS NULL),
				(SELECT count(*) FROM river_job WHERE kind = 'send_instruction')`).Scan(&receipts, &settlements, &creations, &sends); err != nil {
				t.Fatal(err)
			}
			if receipts != 1 || settlements != 1 || creations != 1 || sends != 1 {
				t.Fatalf("receipts=%d settlements=%d creations=%d send jobs=%d, want 1 each", receipts, settlements, creations, sends)
			}

			// SIGTERM: graceful stop, exit 0.
			if err := w2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if ws := w2.wait(t); ws.ExitStatus() != 0 {
				t.Fatalf("after SIGTERM: %v\n%s", w2.cmd.ProcessState, w2.stderr)
			}
			if !bytes.Contains([]byte(w2.stderr.String()), []byte("worker stopped")) {
				t.Fatalf("no clean stop logged:\n%s", w2.stderr)
			}
		})
	}
}
