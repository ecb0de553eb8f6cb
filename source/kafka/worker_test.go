package kafka_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/checktest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/kafkatest"
	"github.com/settle/settle/internal/testsupport/loadtest"
	"github.com/settle/settle/internal/testsupport/workertest"
	kafkasrc "github.com/settle/settle/source/kafka"
	"github.com/settle/settle/source/sourcetest"
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

// startSourceWorker starts `settle worker --source kafka://…` on dbURL and
// the cluster c, with a 2 s session, and the extra environment env.
func startSourceWorker(t *testing.T, name, dbURL string, c *kafkatest.Cluster, bankURL string, env ...string) *workertest.Worker {
	t.Helper()
	args := append(workerproc.FastFlags(bankURL), "--source", c.Spec(topic), "--source-lease", "2s", "--source-batch", "50")
	return workertest.StartT(t, name, dbURL, env, args...)
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

// settleAll waits until every settlement of amounts is terminal and the
// group committed every partition to its end, then checks every
// exactly-once invariant against the bank: each settlement once with its
// amount, one payment, one movement for a confirmed one, no reject.
func settleAll(t *testing.T, pool *pgxpool.Pool, c *kafkatest.Cluster, bank *loadtest.Bank, amounts map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := loadtest.WaitTerminal(ctx, pool, len(amounts)); err != nil {
		t.Fatal(err)
	}
	_, adm := c.Client(t)
	waitFor(t, "the group drained", func() bool { ok, _ := kafkatest.Drained(adm, kafkasrc.DefaultGroup, topic); return ok })
	e := audit.Expect{First: checktest.Amounts(amounts), AllCommitted: true, Recovered: true}
	for id := range amounts {
		e.Delivered = append(e.Delivered, id)
	}
	checktest.CheckInvariants(t, pool, bank.URL, e)
	if n := countRows(t, pool, `SELECT count(*) FROM intake_rejects`); n != 0 {
		t.Errorf("%d rejects, want none", n)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM settlements`); n != len(amounts) {
		t.Errorf("%d settlements, want %d", n, len(amounts))
	}
}

// TestCrashPoints kills the worker (SIGKILL, SETTLE_CRASH_AT) at each
// crash point of the source, restarts it, and finds one settlement, one
// payment and one movement, and the group committed to the end.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	for _, point := range crash.SourcePoints {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			c := startCluster(t)
			pub := newPublisher(t, c)
			bank := startBank(t)
			ev := sourcetest.Event("crash", 0)
			if _, err := pub.PublishEvent(context.Background(), mustJSON(t, ev)); err != nil {
				t.Fatal(err)
			}
			w := startSourceWorker(t, "crashing", db.URL, c, bank.URL, "SETTLE_CRASH_AT="+point)
			waitKilled(t, w)
			w2 := startSourceWorker(t, "restarted", db.URL, c, bank.URL)
			settleAll(t, db.Pool, c, bank, map[string]int64{ev.SettlementID: ev.AmountCents})
			_ = w2.Stop(time.Minute)
		})
	}
}

// TestWorkerKilledMidBatch SIGKILLs a worker while it drains the topic and
// lets a second worker, started beside it in the same group, finish once
// the first one's session has run out: every event once.
func TestWorkerKilledMidBatch(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	c := startCluster(t)
	pub := newPublisher(t, c)
	bank := startBank(t)
	const n = 300
	amounts := map[string]int64{}
	for i := range n {
		ev := sourcetest.Event("killed", i)
		amounts[ev.SettlementID] = ev.AmountCents
		if _, err := pub.PublishEvent(context.Background(), mustJSON(t, ev)); err != nil {
			t.Fatal(err)
		}
	}
	a := startSourceWorker(t, "a", db.URL, c, bank.URL)
	waitFor(t, "30 settlements", func() bool { return countRows(t, db.Pool, `SELECT count(*) FROM settlements`) >= 30 })
	b := startSourceWorker(t, "b", db.URL, c, bank.URL)
	a.Kill()
	settleAll(t, db.Pool, c, bank, amounts)
	_ = b.Stop(time.Minute)
}

// TestBrokerRestartUnderWorker restarts the broker (kfake, on its
// directory and port) while a worker drains the topic and a producer keeps
// producing: nothing lost, nothing applied twice, the group committed to
// the end.
func TestBrokerRestartUnderWorker(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	c := startCluster(t)
	pub := newPublisher(t, c)
	bank := startBank(t)
	const n = 300
	amounts := map[string]int64{}
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			ev := sourcetest.Event("restart", i)
			amounts[ev.SettlementID] = ev.AmountCents
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := pub.PublishEvent(ctx, mustJSON(t, ev))
			cancel()
			if err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produce(0, n/2)
	w := startSourceWorker(t, "w", db.URL, c, bank.URL)
	waitFor(t, "50 settlements", func() bool { return countRows(t, db.Pool, `SELECT count(*) FROM settlements`) >= 50 })
	c.Restart(t)
	produce(n/2, n) // the producer retries until the broker is back
	settleAll(t, db.Pool, c, bank, amounts)
	_ = w.Stop(time.Minute)
}
