package migrations_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/migrations"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	first, err := migrations.Migrate(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := migrations.All()
	if len(first.Applied) != len(all) || len(first.RiverApplied) == 0 {
		t.Fatalf("first run applied %v and River %v", first.Applied, first.RiverApplied)
	}
	second, err := migrations.Migrate(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Applied) != 0 || len(second.RiverApplied) != 0 {
		t.Fatalf("second run applied %v and River %v, want nothing", second.Applied, second.RiverApplied)
	}
}

// TestMigrateConcurrently runs many migrations at once on an empty
// database: all succeed and the schema is applied once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	applied := make(chan int, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := migrations.Migrate(ctx, db.Pool)
			if err != nil {
				t.Error(err)
				return
			}
			applied <- len(res.Applied)
		}()
	}
	wg.Wait()
	close(applied)
	total := 0
	for n := range applied {
		total += n
	}
	all, _ := migrations.All()
	if total != len(all) {
		t.Fatalf("migrations applied %d times in all, want %d", total, len(all))
	}
}

// TestConstraints checks that each rule the schema enforces rejects a
// violating row. Each case runs in its own rolled-back transaction.
func TestConstraints(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	const seed = `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		VALUES ('s1', 'acc', 'ben', 100, 'EUR', 'confirmed', 'k1', 'sha256:00');
		INSERT INTO settlement_receipts (settlement_id, payload_hash) VALUES ('s1', 'sha256:` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `');
		INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency) VALUES ('s1', 'acc', 100, 'EUR');
		INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason) VALUES ('s1', NULL, 'pending', 'seed');`
	settlement := func(id, amount, currency, state string) string {
		return `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ('` + id + `', 'acc', 'ben', ` + amount + `, '` + currency + `', '` + state + `', 'k-` + id + `', 'sha256:00')`
	}
	cases := []struct {
		name, sql, code string
	}{
		{"zero amount", settlement("s2", "0", "EUR", "pending"), "23514"},
		{"negative amount", settlement("s2", "-5", "EUR", "pending"), "23514"},
		{"unknown state", settlement("s2", "5", "EUR", "paid"), "23514"},
		{"lowercase currency", settlement("s2", "5", "eur", "pending"), "23514"},
		{"duplicate settlement", settlement("s1", "5", "EUR", "pending"), "23505"},
		{"duplicate bank key", `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash) VALUES ('s3', 'a', 'b', 1, 'EUR', 'pending', 'k1', 'h')`, "23505"},
		{"empty settlement id", settlement("", "5", "EUR", "pending"), "23514"},
		{"duplicate receipt", `INSERT INTO settlement_receipts (settlement_id, payload_hash) VALUES ('s1', 'sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb')`, "23505"},
		{"malformed receipt hash", `INSERT INTO settlement_receipts (settlement_id, payload_hash) VALUES ('s9', 'md5:x')`, "23514"},
		{"second movement", `INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency) VALUES ('s1', 'acc', 100, 'EUR')`, "23505"},
		{"movement without settlement", `INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency) VALUES ('nope', 'acc', 100, 'EUR')`, "23503"},
		{"zero movement", settlement("s4", "5", "EUR", "confirmed") + `; INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency) VALUES ('s4', 'acc', 0, 'EUR')`, "23514"},
		{"transition without settlement", `INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason) VALUES ('nope', 'pending', 'sent', 'x')`, "23503"},
		{"transition to unknown state", `INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason) VALUES ('s1', 'pending', 'paid', 'x')`, "23514"},
		{"movement is append-only (update)", `UPDATE ledger_movements SET amount_cents = 1`, "23001"},
		{"movement is append-only (delete)", `DELETE FROM ledger_movements`, "23001"},
		{"history is append-only", `DELETE FROM settlement_transitions`, "23001"},
		{"conflict with equal hashes", `INSERT INTO receipt_conflicts (settlement_id, stored_hash, incoming_hash) VALUES ('s1', 'h', 'h')`, "23514"},
		{"flag without reason", `UPDATE settlements SET needs_investigation = true WHERE settlement_id = 's1'`, "23514"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			if _, err := tx.Exec(ctx, seed); err != nil {
				t.Fatalf("seed: %v", err)
			}
			_, err = tx.Exec(ctx, tc.sql)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != tc.code {
				t.Fatalf("err = %v, want SQLSTATE %s", err, tc.code)
			}
		})
	}
	// The seed itself is valid: a control that the cases fail for their
	// own reason.
	if err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), seed)
		return errors.Join(err, errors.New("rollback"))
	}); err == nil || err.Error() != "rollback" {
		t.Fatalf("seed is not valid on its own: %v", err)
	}
}
