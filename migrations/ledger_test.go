package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/ledger"
	"github.com/settle/settle/migrations"
)

// TestLedgerMigration: migration 0015 turns a database of the previous
// release into a ledger that passes its checks: every ledger movement
// becomes a posting with its amount, accounts and time (nothing is lost),
// every settlement in flight holds its amount, the others' holds are
// closed, and the kept balances are the sums.
func TestLedgerMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewEmpty(t)
	migrateBefore(t, db, 15)
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, bank)
		VALUES ('p', 'acc', 'b', 100, 'EUR', 'pending', 'k-p', 'sha256:00', 'settle'),
		       ('u', 'acc', 'b', 200, 'EUR', 'uncertain', 'k-u', 'sha256:00', 'settle'),
		       ('c', 'acc', 'b', 300, 'EUR', 'confirmed', 'k-c', 'sha256:00', 'settle'),
		       ('r', 'acc', 'b', 400, 'EUR', 'returned', 'k-r', 'sha256:00', 'stripe'),
		       ('f', 'acc', 'b', 500, 'EUR', 'failed', 'k-f', 'sha256:00', 'settle'),
		       ('g', 'acc2', 'b', 7, 'GBP', 'confirmed', 'k-g', 'sha256:00', 'obie');
		INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason)
		SELECT settlement_id, NULL, 'pending', 'received' FROM settlements;
		INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency, created_at)
		VALUES ('c', 'payout', 'acc', 300, 'EUR', '2026-01-01T00:00:00Z'),
		       ('r', 'payout', 'acc', 400, 'EUR', '2026-01-02T00:00:00Z'),
		       ('r', 'reversal', 'acc', 400, 'EUR', '2026-01-03T00:00:00Z'),
		       ('g', 'payout', 'acc2', 7, 'GBP', '2026-01-04T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}

	ps, err := ledger.Postings(ctx, db.Pool, ledger.PostingFilter{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		id, kind, debit, credit string
		amount                  int64
		day                     int
	}
	want := []row{
		{"c", "payout", "acc", "settle:clearing:settle", 300, 1},
		{"r", "payout", "acc", "settle:clearing:stripe", 400, 2},
		{"r", "reversal", "settle:clearing:stripe", "acc", 400, 3},
		{"g", "payout", "acc2", "settle:clearing:obie", 7, 4},
	}
	if len(ps) != len(want) {
		t.Fatalf("postings %+v, want %d", ps, len(want))
	}
	for i, p := range ps {
		got := row{p.SettlementID, p.Kind, p.DebitAccount, p.CreditAccount, p.AmountMinor, p.CreatedAt.UTC().Day()}
		if got != want[i] {
			t.Errorf("posting %d = %+v, want %+v", i, got, want[i])
		}
	}

	bs, err := ledger.Balances(ctx, db.Pool, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int64{}
	for _, b := range bs {
		got[b.AccountID+" "+b.Currency] = [2]int64{b.Posted, b.Held}
	}
	wantB := map[string][2]int64{
		"acc EUR":                    {-300, 300},
		"acc2 GBP":                   {-7, 0},
		"settle:clearing:settle EUR": {300, 0},
		"settle:clearing:stripe EUR": {0, 0},
		"settle:clearing:obie GBP":   {7, 0},
	}
	if len(got) != len(wantB) {
		t.Errorf("balances %v, want %v", got, wantB)
	}
	for k, w := range wantB {
		if got[k] != w {
			t.Errorf("balance of %s = %v, want %v", k, got[k], w)
		}
	}
	ms, err := inspect.LedgerMismatches(ctx, db.Pool)
	if err != nil || len(ms) != 0 {
		t.Fatalf("ledger mismatches after the migration: %v, %v", ms, err)
	}
}

// TestLedgerMigrationRefusesReservedAccounts: an earlier release's intake
// took account ids starting with "settle:", the prefix of the ledger's own
// accounts. Migration 0015 refuses such a database with an error that
// names the accounts and the remedy, and changes nothing; once they are
// renamed it applies.
func TestLedgerMigrationRefusesReservedAccounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewEmpty(t)
	migrateBefore(t, db, 15)
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, bank)
		VALUES ('a', 'settle:funding', 'b', 100, 'EUR', 'confirmed', 'k-a', 'sha256:00', 'settle'),
		       ('b', 'settle:clearing:settle', 'b', 200, 'EUR', 'pending', 'k-b', 'sha256:00', 'settle'),
		       ('c', 'acc', 'b', 300, 'EUR', 'confirmed', 'k-c', 'sha256:00', 'settle');
		INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency)
		VALUES ('a', 'payout', 'settle:funding', 100, 'EUR'), ('c', 'payout', 'acc', 300, 'EUR')`); err != nil {
		t.Fatal(err)
	}
	_, err := migrations.Migrate(ctx, db.Pool)
	var reserved *migrations.ReservedAccountsError
	if !errors.As(err, &reserved) {
		t.Fatalf("Migrate = %v, want a ReservedAccountsError", err)
	}
	if reserved.Settlements != 3 || len(reserved.Examples) != 2 {
		t.Fatalf("error %+v, want 3 rows (two settlements, one movement) and two accounts", reserved)
	}
	for _, want := range []string{`"settle:clearing:settle"`, `"settle:funding"`, "rename", "nothing was changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	var applied int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM settle_schema_migrations WHERE version >= 15").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	var ledger bool
	if err := db.Pool.QueryRow(ctx, "SELECT to_regclass('ledger_accounts') IS NOT NULL").Scan(&ledger); err != nil {
		t.Fatal(err)
	}
	if applied != 0 || ledger {
		t.Fatalf("a refused run applied %d migrations from 0015 on (ledger_accounts exists: %v)", applied, ledger)
	}

	// The remedy the error names.
	if _, err := db.Pool.Exec(ctx, `BEGIN;
		ALTER TABLE ledger_movements DISABLE TRIGGER ledger_movements_append_only;
		UPDATE settlements SET account_id = 'legacy-' || account_id WHERE starts_with(account_id, 'settle:');
		UPDATE ledger_movements SET account_id = 'legacy-' || account_id WHERE starts_with(account_id, 'settle:');
		ALTER TABLE ledger_movements ENABLE TRIGGER ledger_movements_append_only;
		COMMIT`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	var debit string
	if err := db.Pool.QueryRow(ctx, `SELECT debit_account FROM ledger_postings WHERE settlement_id = 'a' AND kind = 'payout'`).Scan(&debit); err != nil {
		t.Fatal(err)
	}
	if debit != "legacy-settle:funding" {
		t.Fatalf("settlement a's payout debits %q, want the renamed account", debit)
	}
}
