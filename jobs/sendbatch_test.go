package jobs

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/checktest"
	"github.com/settle/settle/internal/testsupport/settletest"
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
