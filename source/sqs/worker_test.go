package sqs_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/checktest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/loadtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// startBank starts a fakebank, closed when the test ends.
func startBank(t *testing.T) *loadtest.Bank {
	t.Helper()
	b, err := loadtest.StartBank(7, fakebank.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// startSourceWorker starts `settle worker --source sqs:QUEUE` on dbURL,
// reaching moto_server through the standard AWS environment, with a 2 s
// visibility timeout, and the extra environment env.
func (h *harness) startSourceWorker(name, dbURL, bankURL string, env ...string) *workertest.Worker {
	h.t.Helper()
	args := append(workerproc.FastFlags(bankURL), "--source", "sqs:"+h.queue, "--source-lease", "2s", "--source-batch", "50")
	return workertest.StartT(h.t, name, dbURL, append(env, h.moto.Env()...), args...)
}

// waitKilled waits for w to end and fails t unless SIGKILL ended it.
func waitKilled(t *testing.T, w *workertest.Worker) {
	t.Helper()
	ps, err := w.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ws := ps.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("%s ended with %v, want SIGKILL\n%s", w.Name(), ws, workerproc.Tail(w.LogPath(), 30))
	}
}

// settleAll waits until the settlements of amounts are terminal and the
// queue is drained, then checks every exactly-once invariant against the
// bank: each settlement exists once with its amount, one payment, one
// movement for a confirmed one, no rejects.
func (h *harness) settleAll(pool *pgxpool.Pool, bank *loadtest.Bank, amounts map[string]int64) {
	t := h.t
	t.Helper()
	ctx := ctxT(t, 3*time.Minute)
	if err := loadtest.WaitTerminal(ctx, pool, len(amounts)); err != nil {
		t.Fatal(err)
	}
	h.waitDrained(2 * time.Minute)
	e := audit.Expect{First: checktest.Amounts(amounts), AllCommitted: true, Recovered: true}
	for id := range amounts {
		e.Delivered = append(e.Delivered, id)
	}
	checktest.CheckInvariants(t, pool, bank.URL, e)
	hp := &harness{t: t, pool: pool}
	if n := hp.count(`SELECT count(*) FROM intake_rejects`); n != 0 {
		t.Errorf("%d rejects, want none", n)
	}
	if n := hp.count(`SELECT count(*) FROM settlements`); n != len(amounts) {
		t.Errorf("%d settlements, want %d", n, len(amounts))
	}
	confirmed := hp.count(`SELECT count(*) FROM settlements WHERE state = 'confirmed'`)
	if n := hp.count(`SELECT count(*) FROM ledger_movements`); n != confirmed {
		t.Errorf("%d movements for %d confirmed settlements", n, confirmed)
	}
}

// TestCrashPoints kills the worker (SIGKILL, SETTLE_CRASH_AT) at each
// crash point of the source, restarts it, and finds one settlement, one
// payment and one movement, and the queue drained.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	for _, point := range crash.SourcePoints {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			h := newHarness(t, db.Pool, 2*time.Second)
			bank := startBank(t)
			ev := event("crash", 0)
			h.publishEvent(ev)
			w := h.startSourceWorker("crashing", db.URL, bank.URL, "SETTLE_CRASH_AT="+point)
			waitKilled(t, w)
			w2 := h.startSourceWorker("restarted", db.URL, bank.URL)
			h.settleAll(db.Pool, bank, map[string]int64{ev.SettlementID: ev.AmountCents})
			_ = w2.Stop(time.Minute)
		})
	}
}

// TestWorkerKilledMidBatch SIGKILLs a worker while it drains a queue and
// lets a second worker, started beside it, finish: every event once.
func TestWorkerKilledMidBatch(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, 2*time.Second)
	bank := startBank(t)
	const n = 300
	amounts := map[string]int64{}
	for i := range n {
		ev := event("killed", i)
		amounts[ev.SettlementID] = ev.AmountCents
		h.publishEvent(ev)
	}
	a := h.startSourceWorker("a", db.URL, bank.URL)
	for h.count(`SELECT count(*) FROM settlements`) < 30 {
		time.Sleep(20 * time.Millisecond)
	}
	b := h.startSourceWorker("b", db.URL, bank.URL)
	a.Kill()
	h.settleAll(db.Pool, bank, amounts)
	_ = b.Stop(time.Minute)
}

// TestDatabaseDownMidStream stops PostgreSQL for 10 s while a worker
// drains a queue that keeps filling: nothing is rejected for the outage,
// nothing deleted before it commits, nothing lost or applied twice, and
// the worker resumes by itself.
func TestDatabaseDownMidStream(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 4*time.Minute)
	cluster, err := loadtest.StartCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Close() })
	pool, err := database.Connect(ctx, cluster.URL, database.PoolOptions{MaxConns: 4, ApplicationName: "sqstest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h := newHarness(t, pool, 2*time.Second)
	bank := startBank(t)
	w := h.startSourceWorker("w", cluster.URL, bank.URL)

	const n = 400
	amounts := map[string]int64{}
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			ev := event("dbdown", i)
			amounts[ev.SettlementID] = ev.AmountCents
			h.publishEvent(ev)
		}
	}
	count := func() int {
		var c int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM settlements`).Scan(&c); err != nil {
			return -1
		}
		return c
	}
	publish(0, n/2)
	for count() < 40 {
		time.Sleep(20 * time.Millisecond)
	}
	if err := cluster.Stop(ctx, true); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	publish(n/2, n)                               // the queue keeps filling while the database is down
	time.Sleep(10*time.Second - time.Since(down)) // the rest of the outage
	if v, f := h.depth(); v+f < n/2 {
		t.Errorf("during the outage the queue held %d visible and %d in flight, want at least the %d sent meanwhile", v, f, n/2)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h.settleAll(pool, bank, amounts)
	if log := workerproc.Tail(w.LogPath(), 100000); !strings.Contains(log, "the source stops fetching") || !strings.Contains(log, "the source resumes") {
		t.Errorf("the worker never paused and resumed its source:\n%s", workerproc.Tail(w.LogPath(), 40))
	}
	_ = w.Stop(time.Minute)
}
