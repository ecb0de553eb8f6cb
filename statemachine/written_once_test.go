package statemachine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/eventtest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

// TestHeldEventsWrittenOnce: each transaction writes its events held back
// (CreatedHeld, TransitionHeld) and then more facts about the settlement
// (a counted replay, a bank attempt, a flag, a movement) before it writes
// them (CreationEvents, QueueEvents), and a conflict is recorded alone:
// every such event is final before its commit, is not rewritten by it, and
// is the settlement as GET shows it at the commit. The flag's event,
// written by QueueFlag, is filled at the commit as before.
func TestHeldEventsWrittenOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	step := func(fn func(tx pgx.Tx) (func(), error)) {
		t.Helper()
		var check func()
		if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) (err error) {
			check, err = fn(tx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		check()
	}
	pool := db.Pool
	step(func(tx pgx.Tx) (func(), error) {
		insertSettlement(t, tx, "w1")
		if _, err := tx.Exec(ctx, `INSERT INTO settlement_receipts (settlement_id, payload_hash, received_at) VALUES ('w1', 'sha256:' || repeat('0', 64), $1)`, at); err != nil {
			return nil, err
		}
		if err := statemachine.CreatedHeld(ctx, tx, "received", at, "w1"); err != nil {
			return nil, err
		}
		// The same event again, in the same transaction: a replay counted.
		if _, err := tx.Exec(ctx, `UPDATE settlement_receipts SET replay_count = replay_count + 1, last_replay_at = $1 WHERE settlement_id = 'w1'`, at); err != nil {
			return nil, err
		}
		if err := statemachine.CreationEvents(ctx, tx, "received", at, "w1"); err != nil {
			return nil, err
		}
		after := eventtest.InTx(t, ctx, tx, "w1", 1)
		return func() { after(ctx, pool) }, nil
	})
	step(func(tx pgx.Tx) (func(), error) {
		h, err := statemachine.TransitionHeld(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "w1",
			From: settlement.Pending, To: settlement.Uncertain, Reason: "timeout", At: at})
		if err != nil {
			return nil, err
		}
		if h.N != 2 || h.To != settlement.Uncertain {
			t.Fatalf("held = %+v", h)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at, finished_at, outcome)
			VALUES ('w1', 'send', 'k-w1', $1, $1, 'timeout')`, at); err != nil {
			return nil, err
		}
		b := &pgx.Batch{}
		statemachine.QueueFlag(b, "w1", "key_ttl_passed", at)
		statemachine.QueueEvents(b, h)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
		after := eventtest.InTx(t, ctx, tx, "w1", 2)
		return func() {
			rows, err := eventtest.Rows(ctx, pool, "w1")
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 3 || !rows[2].Final || !rows[2].Current {
				t.Errorf("the flag's event after the commit: %+v", rows)
			}
			after(ctx, pool)
		}, nil
	})
	step(func(tx pgx.Tx) (func(), error) {
		h, err := statemachine.TransitionHeld(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "w1",
			From: settlement.Uncertain, To: settlement.Confirmed, Reason: "settled", At: at})
		if err != nil {
			return nil, err
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency, bank_payment_id)
			VALUES ('w1', 'payout', 'acc', 100, 'EUR', 'pay_1')`)
		statemachine.QueueFlag(b, "w1", "", at)
		statemachine.QueueEvents(b, h)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
		after := eventtest.InTx(t, ctx, tx, "w1", 4)
		return func() { after(ctx, pool) }, nil
	})
	step(func(tx pgx.Tx) (func(), error) {
		if err := statemachine.RecordConflicts(ctx, tx, at,
			statemachine.Conflict{SettlementID: "w1", StoredHash: "sha256:00", IncomingHash: "sha256:01", EventID: "e2"}); err != nil {
			return nil, err
		}
		after := eventtest.InTx(t, ctx, tx, "w1", 5)
		return func() { after(ctx, pool) }, nil
	})
	if v, err := audit.EventViolations(ctx, db.Pool); err != nil || len(v) != 0 {
		t.Fatalf("invariants: %v %v", v, err)
	}
}
