package faulttest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/loadtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, bintest.Cleanup)) }

// deadline returns a context that ends after d (generous: these tests run
// on a loaded 2-core machine) or when the test ends.
func deadline(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startCluster starts a private cluster the test may stop and restart.
func startCluster(t *testing.T) *loadtest.Cluster {
	t.Helper()
	c, err := loadtest.StartCluster(deadline(t, 2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Logf("error closing the cluster: %v", err)
		}
	})
	return c
}

// connect opens a pool to url, closed when the test ends.
func connect(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := database.Connect(context.Background(), url, database.PoolOptions{MaxConns: 4, ApplicationName: "faulttest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// startBank starts a counting, switchable fakebank, closed when the test ends.
func startBank(t *testing.T, seed int64, faults fakebank.Faults) *loadtest.Bank {
	t.Helper()
	b, err := loadtest.StartBank(seed, faults)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// startWorker starts `settle worker` against dbURL; it is killed when the
// test ends, and its log tail is shown if the test failed.
func startWorker(t *testing.T, name, dbURL string, args ...string) *workertest.Worker {
	t.Helper()
	return workertest.StartT(t, name, dbURL, nil, args...)
}

// events returns n events of a run named prefix.
func events(prefix string, n int) []intake.Event {
	evs := make([]intake.Event, n)
	for i := range evs {
		evs[i] = loadtest.NewEvent(prefix, i)
	}
	return evs
}

// waitFor polls cond every 100ms until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkInvariants fails the test on any violated invariant.
func checkInvariants(t *testing.T, pool *pgxpool.Pool, bank *loadtest.Bank, acked map[string]int64) {
	t.Helper()
	v, err := loadtest.CheckInvariants(deadline(t, time.Minute), pool, bank, acked)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range v {
		t.Error(s)
	}
}

// checkProducer fails the test when the producer saw an answer other than
// an acknowledgement, 503 or 429, or a 503/429 without Retry-After.
func checkProducer(t *testing.T, p *loadtest.Producer) loadtest.ProducerStats {
	t.Helper()
	st := p.Stats()
	for _, u := range st.Unexpected {
		t.Errorf("unexpected answer: %s", u)
	}
	if st.NoRetryAfter > 0 {
		t.Errorf("%d answers 503/429 without Retry-After", st.NoRetryAfter)
	}
	for code, n := range st.ByStatus {
		if code >= 500 && code != 503 {
			t.Errorf("%d answers %d", n, code)
		}
	}
	return st
}

func urls(ws ...*workertest.Worker) func() []string {
	return func() []string {
		out := make([]string, len(ws))
		for i, w := range ws {
			out[i] = w.URL()
		}
		return out
	}
}

func fmtStats(st loadtest.ProducerStats) string {
	return fmt.Sprintf("answers %v, connection errors %d, redeliveries %d", st.ByStatus, st.ConnErrors, st.Redeliveries)
}
