package importer

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
)

// reportBundle is one test's ledger (a private database).
type reportBundle struct {
	db *dbtest.DB
}

// seed writes a settlement in state st directly, with its history and, when
// movement is true, its ledger movement, as the engine would have left it.
func (b *reportBundle) seed(t *testing.T, id string, amount int64, st settlement.State, movement bool) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ($1, 'acc-1', 'bene-1', $2, 'EUR', $3, $4, 'sha256:'||repeat('0', 64))`,
			id, amount, string(st), bankclient.KeyFor(id)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason)
			VALUES ($1, NULL, 'pending', 'test'), ($1, 'pending', $2, 'test')`, id, string(st)); err != nil {
			return err
		}
		if movement {
			_, err := tx.Exec(ctx, `INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency)
				VALUES ($1, 'acc-1', $2, 'EUR')`, id, amount)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed %s: %v", id, err)
	}
}

// seedBulk writes n settlements bulk-<i>, amount 100+i, in two statements:
// confirmed with their movements, except every openEvery-th (when > 0),
// which is still sent.
func seedBulk(t testing.TB, db *dbtest.DB, n, openEvery int) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		SELECT 'bulk-' || i, 'acc', 'bene', 100 + i, 'EUR',
		       CASE WHEN $2::int > 0 AND i % $2::int = 0 THEN 'sent' ELSE 'confirmed' END, 'key-' || i, 'sha256:' || repeat('0', 64)
		FROM generate_series(0, $1::int - 1) i`, n, openEvery); err != nil {
		t.Fatalf("seed: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency)
		SELECT settlement_id, 'acc', amount_cents, 'EUR' FROM settlements WHERE state = 'confirmed'`); err != nil {
		t.Fatalf("seed: %v", err)
	}
}
