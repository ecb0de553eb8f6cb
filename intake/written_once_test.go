package intake_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/eventtest"
)

// TestCreationEventWrittenOnce: intake writes a settlement's creation event
// last in the transaction that creates it, after the replays of the same
// batch are counted: the event is final before the commit, not rewritten
// by it, and the settlement as GET shows it at the commit (replay_count 1).
func TestCreationEventWrittenOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	ev := event("once-1", "acc", 100)
	var after func(context.Context, inspect.Querier)
	outs, err := b.svc.SubmitBatchTx(ctx, []intake.Event{ev, ev}, func(ctx context.Context, tx pgx.Tx, _ []error) error {
		after = eventtest.InTx(t, ctx, tx, "once-1", 1)
		return nil
	})
	if err != nil || len(outs) != 2 {
		t.Fatalf("submit: %v, %+v", err, outs)
	}
	if after == nil {
		t.Fatal("the transaction's hook did not run")
	}
	after(ctx, b.db.Pool)
	var replays int
	if err := b.db.Pool.QueryRow(ctx, `SELECT (payload->'receipt'->>'replay_count')::int FROM settlement_events WHERE event_id = 'once-1:1'`).Scan(&replays); err != nil || replays != 1 {
		t.Fatalf("the creation event's replay_count %d, %v; want 1", replays, err)
	}
}
