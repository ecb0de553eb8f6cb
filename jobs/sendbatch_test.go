package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/testsupport/checktest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/reconcile"
)

// batchIntake is an intake whose send jobs carry up to size settlements.
func (b *testBundle) batchIntake(t *testing.T, size int) *intake.Service {
	t.Helper()
	svc, err := intake.NewService(intake.Config{DB: b.db.Pool, Jobs: Inserter{Client: b.client, SendBatch: size}})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// payouts are n payouts named prefix-NN.
func payouts(prefix string, n int) []intake.Event {
	evs := make([]intake.Event, n)
	for i := range evs {
		id := fmt.Sprintf("%s-%02d", prefix, i)
		evs[i] = intake.Event{SettlementID: id, AccountID: "acc-" + id, AmountCents: int64(100 + i), Currency: "EUR", Beneficiary: "bene-" + id}
	}
	return evs
}

// jobKinds counts the River jobs of each kind in db, and those of them
// not completed.
func (b *testBundle) jobKinds(t *testing.T) (all, open map[string]int) {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT kind, state FROM river_job`)
	if err != nil {
		t.Fatal(err)
	}
	all, open = map[string]int{}, map[string]int{}
	var kind, state string
	if _, err := pgx.ForEachRow(rows, []any{&kind, &state}, func() error {
		all[kind]++
		if state != "completed" {
			open[kind]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return all, open
}

// TestSendBatchPaysEachOnce: an intake batch of 21 settlements with send
// jobs of up to 10 inserts two send_batch jobs and one send_instruction (a
// settlement alone is sent as before), and a bank that drops answers,
// fails before executing and answers status checks with errors still gets
// each paid once, with one movement each; every send job completes.
func TestSendBatchPaysEachOnce(t *testing.T) {
	t.Parallel()
	faults := fakebank.Faults{DropResponseRate: 0.25, FailBeforeRate: 0.15, StatusErrorRate: 0.1, RejectRate: 0.05, LatencyMaxMS: 20}
	b := setup(t, faults, false, nil)
	const n = 21
	if _, err := b.batchIntake(t, 10).SubmitBatch(context.Background(), payouts("sb", n)); err != nil {
		t.Fatal(err)
	}
	all, _ := b.jobKinds(t)
	if all["send_batch"] != 2 || all["send_instruction"] != 1 {
		t.Fatalf("send jobs %v, want 2 send_batch and 1 send_instruction", all)
	}
	var sizes []int
	rows, _ := b.db.Pool.Query(context.Background(), `SELECT jsonb_array_length(args->'settlement_ids') FROM river_job WHERE kind = 'send_batch' ORDER BY id`)
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || !slices.Equal(sizes, []int{10, 10}) {
		t.Fatalf("send_batch sizes %v (%v), want 10 and 10", sizes, err)
	}
	b.start(t)
	waitTerminal(t, b.db, n)
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{Recovered: true})
	if st := b.bank.Stats(); st.MaxPaymentsPerReference > 1 {
		t.Errorf("bank %+v: a settlement paid twice", st)
	}
	waitJobsDone(t, b, "send_batch", "send_instruction")
}

// waitJobsDone waits until no job of kinds is left uncompleted.
func waitJobsDone(t *testing.T, b *testBundle, kinds ...string) {
	t.Helper()
	settletest.Wait(t, "send jobs completed", func() (bool, string) {
		_, open := b.jobKinds(t)
		for _, k := range kinds {
			if open[k] > 0 {
				return false, fmt.Sprintf("open jobs %v", open)
			}
		}
		return true, ""
	})
}

// TestSendBatchRunAgainSendsOnlyWhatIsClaimable is a send_batch job run
// again after a crash of the worker that ran it first: of its settlements,
// one was paid and recorded, one was claimed (its first attempt recorded)
// but its POST never reached the bank, and one was never started. The job
// run again pays the last two once each (the claimed one through the
// lost-answer path: asked by key first, then resent under the same key)
// and leaves the first alone: no second POST, no second payment.
func TestSendBatchRunAgainSendsOnlyWhatIsClaimable(t *testing.T) {
	t.Parallel()
	b := setup(t, fakebank.Faults{}, false, nil)
	ctx := context.Background()
	svc := b.batchIntake(t, 10)
	evs := payouts("again", 3)
	if _, err := svc.SubmitBatch(ctx, evs); err != nil {
		t.Fatal(err)
	}
	paid, claimed := evs[0].SettlementID, evs[1].SettlementID
	if out, err := b.deps.Resolver.Send(ctx, paid, nil); err != nil || out.State != "confirmed" {
		t.Fatalf("paying %s first: %+v, %v", paid, out, err)
	}
	if _, err := b.db.Pool.Exec(ctx, `WITH c AS (
			UPDATE settlements SET first_attempt_at = now(), send_attempts = 1, next_check_at = now() + interval '1 hour'
			WHERE settlement_id = $1 RETURNING settlement_id, bank_key)
		INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at) SELECT settlement_id, $2, bank_key, now() FROM c`,
		claimed, bankclient.OpSend); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	waitTerminal(t, b.db, len(evs))
	waitJobsDone(t, b, "send_batch")
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{})
	if st := b.bank.Stats(); st.Payments != int64(len(evs)) || st.MaxPaymentsPerReference != 1 {
		t.Errorf("bank %+v, want %d payments, one per reference", st, len(evs))
	}
	var sends int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM bank_attempts WHERE settlement_id = $1 AND op = $2`, paid, bankclient.OpSend).Scan(&sends); err != nil || sends != 1 {
		t.Errorf("%s was POSTed %d times (%v), want once: the batch run again left it alone", paid, sends, err)
	}
}

// TestSendBatchHandsOverAtTheTimeout: a batch that cannot start all its
// sends within half its job's time (one bank slot, a bank answering in
// 300 ms, a 3 s job timeout: about five sends start before the hand-over)
// hands the sends not started to a new send_batch job, in the transaction
// that completes it, and the new job (and the one it hands over to in
// turn) pays them: every settlement paid once, every send job completed,
// and the exactly-once checker holds.
func TestSendBatchHandsOverAtTheTimeout(t *testing.T) {
	t.Parallel()
	logs := &settletest.Buffer{}
	b := setup(t, fakebank.Faults{LatencyMinMS: 300, LatencyMaxMS: 300}, false, func(d *Deps) {
		d.BankConcurrency = 1
		d.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	const n = 12
	evs := payouts("ho", n)
	if _, err := b.batchIntake(t, n).SubmitBatch(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	waitTerminal(t, b.db, n)
	waitJobsDone(t, b, "send_batch", "send_instruction")
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{Recovered: true})
	if st := b.bank.Stats(); st.Payments != n || st.MaxPaymentsPerReference != 1 {
		t.Errorf("bank %+v, want %d payments, one per reference", st, n)
	}

	// The first job handed over the sends it had not started: a later
	// send_batch job carries the tail of its settlements.
	rows, err := b.db.Pool.Query(context.Background(), `SELECT args->'settlement_ids' FROM river_job WHERE kind = 'send_batch' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	batches, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) < 2 || len(batches[0]) != n {
		t.Fatalf("send_batch jobs %v, want the intake's batch of %d and at least one handed over", batches, n)
	}
	if handed := batches[1]; len(handed) >= n || !slices.Equal(handed, batches[0][n-len(handed):]) {
		t.Errorf("handed over %v, want the sends of %v not started", handed, batches[0])
	}
	if !strings.Contains(logs.String(), "send_batch: sends not started in time handed to a new job") {
		t.Errorf("no hand-over in the logs:\n%s", logs)
	}
}

// TestSendBatchHandsAnotherBanksSettlementToItsQueue: a send_batch job on
// one bank's queue carrying a settlement of another bank (a job moved by
// mistake) sends its own bank's settlements, refuses the other loudly
// without sending it anywhere, and hands it alone to a send_instruction job
// on its bank's queue, where that bank's worker pays it at its own bank:
// each bank paid exactly its own settlements, once, and the exactly-once
// checker holds against each bank's books.
func TestSendBatchHandsAnotherBanksSettlementToItsQueue(t *testing.T) {
	t.Parallel()
	other := settle.Connector
	other.Name = "other"
	otherBank, otherURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 12})
	oc, err := other.New(otherURL, bankclient.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewUnregistered()
	b := setup(t, fakebank.Faults{}, false, func(d *Deps) {
		r := d.Resolver
		r.BankName = settle.Connector.Name
		d.Resolvers = []*reconcile.Resolver{r, {
			DB: r.DB, Bank: oc, BankName: other.Name, KeyTTL: r.KeyTTL,
			CheckInterval: r.CheckInterval, MaxCheckInterval: r.MaxCheckInterval, Lease: r.Lease, Metrics: r.Metrics,
		}}
		d.Metrics = m
	})
	ctx := context.Background()
	svc, err := intake.NewService(intake.Config{DB: b.db.Pool, Jobs: Inserter{Client: b.client, SendBatch: 10},
		Banks: []bankclient.Connector{settle.Connector, other}})
	if err != nil {
		t.Fatal(err)
	}
	evs := payouts("mix", 5)
	for i := range evs {
		evs[i].Bank = settle.Connector.Name
	}
	evs[2].Bank = other.Name
	if _, err := svc.SubmitBatch(ctx, evs); err != nil {
		t.Fatal(err)
	}
	// One job for the five, on settle's queue, in place of the intake's
	// (one per bank).
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.SettlementID
	}
	if _, err := b.db.Pool.Exec(ctx, `DELETE FROM river_job`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Insert(ctx, SendBatchArgs{SettlementIDs: ids}, &river.InsertOpts{Queue: QueueFor(settle.Connector.Name)}); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	waitTerminal(t, b.db, len(evs))
	waitJobsDone(t, b, "send_batch", "send_instruction")

	all, _ := b.jobKinds(t)
	if all["send_instruction"] != 1 {
		t.Errorf("jobs %v, want the other bank's settlement handed to one send_instruction", all)
	}
	var queue, handed string
	if err := b.db.Pool.QueryRow(ctx, `SELECT queue, args->>'settlement_id' FROM river_job WHERE kind = 'send_instruction'`).Scan(&queue, &handed); err != nil {
		t.Fatal(err)
	}
	if queue != QueueFor(other.Name) || handed != evs[2].SettlementID {
		t.Errorf("send_instruction for %s on %s, want %s on %s", handed, queue, evs[2].SettlementID, QueueFor(other.Name))
	}
	if n := counterValue(t, m, settle.Connector.Name); n != 1 {
		t.Errorf("settle_wrong_bank_jobs_total{bank=settle} = %d, want 1", n)
	}
	if st := b.bank.Stats(); st.Payments != int64(len(evs)-1) || st.MaxPaymentsPerReference != 1 {
		t.Errorf("settle's bank %+v, want %d payments, one per reference", st, len(evs)-1)
	}
	if st := otherBank.Stats(); st.Payments != 1 {
		t.Errorf("the other bank %+v, want its one payment", st)
	}
	checktest.CheckInvariantsAt(t, b.db.Pool, b.deps.Resolvers[0].Bank, audit.Expect{Recovered: true, Bank: settle.Connector.Name})
	checktest.CheckInvariantsAt(t, b.db.Pool, oc, audit.Expect{Recovered: true, Bank: other.Name})
}
