package faulttest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/loadtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// TestPostgresRestart restarts PostgreSQL (fast and immediate shutdown)
// while a producer streams events through the APIs of two workers and their
// jobs talk to a slightly faulty bank. While the server is down, intake
// answers 503 with Retry-After (never a 500) and /readyz says not ready; the
// same worker processes reconnect on their own once it is back; every event it
// acknowledged with 201/200 is stored, every settlement ends terminal, with
// one movement per confirmed settlement and none otherwise, and the bank
// paid nothing twice.
func TestPostgresRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name      string
		immediate bool
	}{{"fast", false}, {"immediate", true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			const n = 240
			cluster := startCluster(t)
			bank := startBank(t, 7, fakebank.Faults{
				DropResponseRate: 0.05, StatusErrorRate: 0.05, LatencyMaxMS: 20, SettleDelayMS: 200,
			})
			w := startWorker(t, "w-"+mode.name, cluster.URL, workerproc.FastFlags(bank.URL)...)
			w2 := startWorker(t, "w2-"+mode.name, cluster.URL, workerproc.FastFlags(bank.URL)...)
			pool := connect(t, cluster.URL)
			p := &loadtest.Producer{URLs: urls(w, w2)}

			ctx := deadline(t, 4*time.Minute)
			streamed := make(chan error, 1)
			go func() { streamed <- p.Stream(ctx, events("pg-"+mode.name, n), 4) }()

			waitFor(t, ctx, "a third of the events acknowledged", func() bool { return len(p.Acked()) >= n/3 })
			before := p.Stats().ByStatus[http.StatusServiceUnavailable]
			if err := cluster.Stop(ctx, mode.immediate); err != nil {
				t.Fatal(err)
			}
			// Down: the producer keeps delivering and must be told 503.
			waitFor(t, ctx, "503 answers while PostgreSQL is down", func() bool {
				return p.Stats().ByStatus[http.StatusServiceUnavailable] >= before+20
			})
			for _, wk := range []*workertest.Worker{w, w2} {
				if code := get(t, wk.URL()+"/readyz"); code != http.StatusServiceUnavailable {
					t.Errorf("%s: /readyz answered %d while PostgreSQL is down, want 503", wk.Name(), code)
				}
			}
			if err := cluster.Start(ctx); err != nil {
				t.Fatal(err)
			}
			for _, wk := range []*workertest.Worker{w, w2} {
				waitFor(t, ctx, wk.Name()+" /readyz after the restart", func() bool { return get(t, wk.URL()+"/readyz") == http.StatusOK })
			}

			if err := <-streamed; err != nil {
				t.Fatalf("stream: %v", err)
			}
			if err := loadtest.WaitTerminal(ctx, pool, n); err != nil {
				t.Fatal(err)
			}
			if !w.Alive() || !w2.Alive() {
				t.Fatal("a worker exited instead of reconnecting")
			}
			st := checkProducer(t, p)
			if st.ByStatus[http.StatusServiceUnavailable] == 0 {
				t.Error("no 503 seen while PostgreSQL was down")
			}
			checkInvariants(t, pool, bank, p.Acked())
			counts, _ := loadtest.StateCounts(ctx, pool)
			t.Logf("%s restart: %s; states %v; bank %+v", mode.name, fmtStats(st), counts, bank.Counts())
		})
	}
}

// get returns the status of GET url, or 0 when there was no answer.
func get(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
