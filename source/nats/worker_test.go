package nats_test

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/checktest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/loadtest"
	"github.com/settle/settle/internal/testsupport/natstest"
	"github.com/settle/settle/internal/testsupport/workertest"
	natssrc "github.com/settle/settle/source/nats"
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

// startSourceWorker starts `settle worker --source nats` on dbURL and the
// JetStream server at natsURL, with a 2 s lease, and the extra
// environment env.
func startSourceWorker(t *testing.T, name, dbURL, natsURL, bankURL string, env ...string) *workertest.Worker {
	t.Helper()
	args := append(workerproc.FastFlags(bankURL), "--source", "nats", "--source-lease", "2s", "--source-batch", "50")
	return workertest.StartT(t, name, dbURL, append(env, "NATS_URL="+natsURL), args...)
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

// settleAll waits until want settlements are terminal and the stream is
// drained, then checks every exactly-once invariant against the bank:
// each settlement of amounts exists once with its amount, one payment,
// one movement for a confirmed one.
func settleAll(t *testing.T, pool *pgxpool.Pool, js jetstream.JetStream, bank *loadtest.Bank, amounts map[string]int64) {
	t.Helper()
	ctx := ctxT(t, 3*time.Minute)
	if err := loadtest.WaitTerminal(ctx, pool, len(amounts)); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, pool: pool, js: js}
	h.waitDrained(2 * time.Minute)
	e := audit.Expect{First: checktest.Amounts(amounts), AllCommitted: true, Recovered: true}
	for id := range amounts {
		e.Delivered = append(e.Delivered, id)
	}
	checktest.CheckInvariants(t, pool, bank.URL, e)
	if n := h.count(`SELECT count(*) FROM intake_rejects`); n != 0 {
		t.Errorf("%d rejects, want none", n)
	}
	if n := h.count(`SELECT count(*) FROM settlements`); n != len(amounts) {
		t.Errorf("%d settlements, want %d", n, len(amounts))
	}
	if n := h.count(`SELECT count(*) FROM ledger_movements`); n != h.count(`SELECT count(*) FROM settlements WHERE state = 'confirmed'`) {
		t.Errorf("%d movements for %d confirmed settlements", n, h.count(`SELECT count(*) FROM settlements WHERE state = 'confirmed'`))
	}
}

// TestCrashPoints kills the worker (SIGKILL, SETTLE_CRASH_AT) at each
// crash point of the source, restarts it, and finds one settlement, one
// payment and one movement, and the consumer drained.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	for _, point := range crash.SourcePoints {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			srv := natstest.Start(t)
			h := newHarness(t, db.Pool, srv.URL)
			bank := startBank(t)
			ev := event("crash", 0)
			h.publishEvent(ev)
			w := startSourceWorker(t, "crashing", db.URL, srv.URL, bank.URL, "SETTLE_CRASH_AT="+point)
			waitKilled(t, w)
			w2 := startSourceWorker(t, "restarted", db.URL, srv.URL, bank.URL)
			settleAll(t, db.Pool, h.js, bank, map[string]int64{ev.SettlementID: ev.AmountCents})
			_ = w2.Stop(time.Minute)
		})
	}
}

// TestWorkerKilledMidBatch SIGKILLs a worker while it drains a stream and
// lets a second worker, started beside it on the same consumer, finish:
// every event once.
func TestWorkerKilledMidBatch(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	js, _ := natstest.JetStream(t, srv.URL)
	bank := startBank(t)
	h := newHarness(t, db.Pool, srv.URL)
	const n = 300
	amounts := map[string]int64{}
	for i := range n {
		ev := event("killed", i)
		amounts[ev.SettlementID] = ev.AmountCents
		h.publishEvent(ev)
	}
	a := startSourceWorker(t, "a", db.URL, srv.URL, bank.URL)
	for h.count(`SELECT count(*) FROM settlements`) < 30 {
		time.Sleep(20 * time.Millisecond)
	}
	b := startSourceWorker(t, "b", db.URL, srv.URL, bank.URL)
	a.Kill()
	settleAll(t, db.Pool, js, bank, amounts)
	_ = b.Stop(time.Minute)
}

// publishRetrying publishes data under a fresh message id, retrying while
// the server is away, until ctx ends.
func publishRetrying(ctx context.Context, js jetstream.JetStream, data []byte) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.Publish(pctx, natssrc.DefaultSubject, data)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestJetStreamKilled SIGKILLs the JetStream server process mid-stream and
// restarts it on its store: nothing lost (every write was fsynced),
// nothing applied twice, the consumer drained.
func TestJetStreamKilled(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ns := natstest.StartProcess(t, bintest.Build(t))
	js, _ := natstest.JetStream(t, ns.URL)
	bank := startBank(t)
	h := newHarness(t, db.Pool, ns.URL)
	const n = 300
	amounts := map[string]int64{}
	ctx := ctxT(t, 3*time.Minute)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			ev := event("jskill", i)
			if err := publishRetrying(ctx, js, mustJSON(t, ev)); err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
		}
	})
	for i := range n {
		amounts[event("jskill", i).SettlementID] = event("jskill", i).AmountCents
	}
	w := startSourceWorker(t, "w", db.URL, ns.URL, bank.URL)
	for h.count(`SELECT count(*) FROM settlements`) < 50 {
		time.Sleep(20 * time.Millisecond)
	}
	ns.Kill()
	ns.Start(t)
	wg.Wait()
	settleAll(t, db.Pool, js, bank, amounts)
	_ = w.Stop(time.Minute)
}

// TestDatabaseDownMidStream stops PostgreSQL for 10 s while a worker
// drains a stream that keeps filling: nothing is rejected for the outage,
// nothing acknowledged before it commits, nothing lost or applied twice.
func TestDatabaseDownMidStream(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 4*time.Minute)
	cluster, err := loadtest.StartCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Close() })
	pool, err := database.Connect(ctx, cluster.URL, database.PoolOptions{MaxConns: 4, ApplicationName: "sourcetest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	srv := natstest.Start(t)
	js, _ := natstest.JetStream(t, srv.URL)
	bank := startBank(t)
	w := startSourceWorker(t, "w", cluster.URL, srv.URL, bank.URL)

	const n = 400
	amounts := map[string]int64{}
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			ev := event("dbdown", i)
			amounts[ev.SettlementID] = ev.AmountCents
			if err := publishRetrying(ctx, js, mustJSON(t, ev)); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
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
	publish(n/2, n)                               // the stream keeps coming while the database is down
	time.Sleep(10*time.Second - time.Since(down)) // the rest of the outage
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	settleAll(t, pool, js, bank, amounts)
	ci := natstest.ConsumerInfo(t, js, natssrc.DefaultStream, natssrc.DefaultConsumer)
	if ci.NumPending != 0 || ci.NumAckPending != 0 {
		t.Errorf("consumer: %d pending, %d awaiting ack", ci.NumPending, ci.NumAckPending)
	}
	if log := workerproc.Tail(w.LogPath(), 100000); !strings.Contains(log, "the source stops fetching") || !strings.Contains(log, "the source resumes") {
		t.Errorf("the worker never paused and resumed its source:\n%s", workerproc.Tail(w.LogPath(), 40))
	}
	_ = w.Stop(time.Minute)
}
