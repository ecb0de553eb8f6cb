package intake_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// startWorker runs `settle worker` on a free port against db with the extra
// environment (its bank does not answer: only intake matters here), and
// waits for it to listen. It is killed when the test ends if it still runs.
func startWorker(t *testing.T, name string, db *dbtest.DB, env ...string) *workertest.Worker {
	t.Helper()
	return workertest.StartT(t, name, db.URL, env, "--listen", "127.0.0.1:0", "--bank-url", "http://"+closedPort(t),
		"--log-format", "json", "--shutdown-timeout", "5s")
}

// wait waits for the worker to end and returns how it ended.
func wait(t *testing.T, w *workertest.Worker) syscall.WaitStatus {
	t.Helper()
	ps, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ps.Sys().(syscall.WaitStatus)
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
	for point, wantStatus := range map[string]int{crash.IntakeBeforeCommit: http.StatusCreated, crash.IntakeAfterCommit: http.StatusOK} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			body := mustJSON(t, eventFields("crash-1"))

			w := startWorker(t, "crashing", db, "SETTLE_CRASH_AT="+point)
			if status, err := postTo(t, w.URL(), body); err == nil {
				t.Fatalf("the crashing worker answered %d", status)
			}
			if ws := wait(t, w); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("worker ended with %v, want SIGKILL\n%s", ws, workerproc.Tail(w.LogPath(), 30))
			}

			w2 := startWorker(t, "restarted", db)
			status, err := postTo(t, w2.URL(), body)
			if err != nil || status != wantStatus {
				t.Fatalf("redelivery: %d %v, want %d\n%s", status, err, wantStatus, workerproc.Tail(w2.LogPath(), 30))
			}
			if status, err := postTo(t, w2.URL(), body); err != nil || status != http.StatusOK {
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
			if err := w2.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if ws := wait(t, w2); ws.ExitStatus() != 0 {
				t.Fatalf("after SIGTERM: %v\n%s", ws, workerproc.Tail(w2.LogPath(), 30))
			}
			if log := workerproc.Tail(w2.LogPath(), 1000); !strings.Contains(log, "worker stopped") {
				t.Fatalf("no clean stop logged:\n%s", log)
			}
		})
	}
}
