package faulttest

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/loadtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// Bounds of the overload test: generous, far below what an unbounded queue
// of 64 clients redelivering at once would reach over the burst.
const (
	overloadMaxRSS        = 256 << 20
	overloadMaxGoroutines = 600
)

// TestOverload bursts 64 concurrent producers at a worker whose
// --max-inflight is 2. Past the bound it answers 429 with Retry-After
// (never a 5xx), its memory and goroutines stay bounded during the burst
// and come back afterwards, and nothing is lost: every event acknowledged
// is stored, and every settlement ends terminal with the invariants intact.
func TestOverload(t *testing.T) {
	t.Parallel()
	const (
		n       = 640
		clients = 64
	)
	db := dbtest.New(t)
	bank := startBank(t, 13, fakebank.Faults{SettleDelayMS: 50})
	w := startWorker(t, "w-overload", db.URL, append(workerproc.FastFlags(bank.URL), "--max-inflight", "2")...)
	ctx := deadline(t, 4*time.Minute)
	base, err := loadtest.ScrapeMetrics(ctx, w.URL())
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu   sync.Mutex
		peak loadtest.ProcessMetrics
	)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			if m, err := loadtest.ScrapeMetrics(sampleCtx, w.URL()); err == nil {
				mu.Lock()
				peak.RSSBytes = max(peak.RSSBytes, m.RSSBytes)
				peak.Goroutines = max(peak.Goroutines, m.Goroutines)
				peak.OpenFDs = max(peak.OpenFDs, m.OpenFDs)
				peak.Threads = max(peak.Threads, m.Threads)
				mu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	p := &loadtest.Producer{URLs: urls(w), MaxBackoff: 200 * time.Millisecond}
	burstStart := time.Now()
	err = p.Stream(ctx, events("overload", n), clients)
	stopSampling()
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	st := checkProducer(t, p)
	if st.ByStatus[http.StatusTooManyRequests] == 0 {
		t.Error("no 429 from a worker with --max-inflight 2 under 64 concurrent producers")
	}
	if len(p.Acked()) != n {
		t.Errorf("%d of %d events acknowledged", len(p.Acked()), n)
	}
	t.Logf("burst of %s", time.Since(burstStart).Round(time.Millisecond))
	t.Logf("overload: %s; worker before %+v, peak %+v", fmtStats(st), base, peak)
	if peak.RSSBytes > overloadMaxRSS {
		t.Errorf("worker RSS peaked at %.0f MiB, over %d MiB", peak.RSSBytes/(1<<20), overloadMaxRSS>>20)
	}
	if peak.Goroutines > overloadMaxGoroutines {
		t.Errorf("worker goroutines peaked at %.0f, over %d", peak.Goroutines, overloadMaxGoroutines)
	}
	drainStart := time.Now()
	if err := loadtest.WaitTerminal(ctx, db.Pool, n); err != nil {
		t.Fatal(err)
	}
	t.Logf("drained in %s", time.Since(drainStart).Round(time.Millisecond))
	checkInvariants(t, db.Pool, bank, p.Acked())
	// The burst's connections and goroutines are gone once it is over.
	http.DefaultClient.CloseIdleConnections()
	waitGoroutines(t, ctx, w, base.Goroutines)
}

// waitGoroutines waits until the worker runs no more goroutines than base
// plus a margin for River's own (its producers and maintenance services come
// and go), failing the test when they stay above it.
func waitGoroutines(t *testing.T, ctx context.Context, w *workertest.Worker, base float64) {
	t.Helper()
	const margin = 15
	var last loadtest.ProcessMetrics
	for {
		m, err := loadtest.ScrapeMetrics(ctx, w.URL())
		if err == nil && m.Goroutines <= base+margin {
			return
		}
		last = m
		select {
		case <-ctx.Done():
			t.Errorf("worker goroutines stay at %.0f, baseline %.0f (+%d): a leak", last.Goroutines, base, margin)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}
