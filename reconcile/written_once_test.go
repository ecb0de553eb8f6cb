package reconcile

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/eventtest"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/settlement"
)

// TestOutcomeEventWrittenOnce: the Resolver writes a transition's event
// last in the transaction of its outcome, after the bank attempt's answer,
// the bank's facts, the flag and the movement: each event is final before
// the commit, not rewritten by it, and the settlement as GET shows it at
// the commit. The hook runs in that transaction, after the events.
func TestOutcomeEventWrittenOnce(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	resolvertest.InsertSettlement(t, b.db, "s-once", 1234)
	ctx := context.Background()

	checked := 0
	call := func(do func(TxHook) (Outcome, error)) Outcome {
		t.Helper()
		had, err := eventtest.Rows(ctx, b.db.Pool, "s-once")
		if err != nil {
			t.Fatal(err)
		}
		var after func()
		out, err := do(func(ctx context.Context, tx pgx.Tx, _ Outcome) error {
			rows, err := eventtest.Rows(ctx, tx, "s-once")
			if err != nil {
				return err
			}
			var ns []int
			for _, r := range rows[len(had):] {
				ns = append(ns, r.N)
			}
			if len(ns) > 0 {
				check := eventtest.InTx(t, ctx, tx, "s-once", ns...)
				after = func() { check(context.Background(), b.db.Pool) }
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if after != nil {
			after()
			checked++
		}
		return out
	}
	out := call(func(h TxHook) (Outcome, error) { return b.r.Send(ctx, "s-once", h) })
	want := 1 // pending → confirmed, its movement written in the transaction
	if !out.State.Terminal() {
		// Sent: the bank settles at once, so the first check confirms it.
		out = call(func(h TxHook) (Outcome, error) { return b.r.Resolve(ctx, "s-once", h) })
		want = 2
	}
	if out.State != settlement.Confirmed || checked != want {
		t.Fatalf("final: %+v, %d transactions with events checked, want %d", out, checked, want)
	}
}
