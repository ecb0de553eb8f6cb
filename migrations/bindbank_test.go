package migrations_test

import (
	"context"
	"errors"
	"testing"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/migrations"
)

// migrateBefore applies the app migrations older than version by hand, as
// a deployment of an earlier release had them.
func migrateBefore(t *testing.T, db *dbtest.DB, version int) {
	t.Helper()
	ctx := context.Background()
	ms, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE settle_schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version >= version {
			break
		}
		if _, err := db.Pool.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := db.Pool.Exec(ctx, "INSERT INTO settle_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBindBankMigration: settlements that predate banks are bound to the
// bank the operator names, and without a name the migration refuses and
// changes nothing (it never guesses).
func TestBindBankMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewEmpty(t)
	migrateBefore(t, db, 12)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		VALUES ('old-1', 'acc', 'ba_1', 100, 'USD', 'pending', 'k-old-1', 'sha256:00')`); err != nil {
		t.Fatal(err)
	}

	_, err := migrations.Migrate(ctx, db.Pool)
	if !errors.Is(err, migrations.ErrBindBankRequired) {
		t.Fatalf("Migrate without a bank = %v, want ErrBindBankRequired", err)
	}
	var applied int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM settle_schema_migrations WHERE version >= 12").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != 0 {
		t.Fatalf("a refused run applied %d migrations from 0012 on", applied)
	}
	if _, err := migrations.MigrateWith(ctx, db.Pool, migrations.Options{BindBank: "Stripe; DROP"}); err == nil {
		t.Fatal("an invalid bank name was taken")
	}

	res, err := migrations.MigrateWith(ctx, db.Pool, migrations.Options{BindBank: "stripe"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) == 0 || res.Applied[0] != "0012_settlement_bank" {
		t.Fatalf("applied %v, want 0012_settlement_bank first", res.Applied)
	}
	var bank string
	if err := db.Pool.QueryRow(ctx, "SELECT bank FROM settlements WHERE settlement_id = 'old-1'").Scan(&bank); err != nil {
		t.Fatal(err)
	}
	if bank != "stripe" {
		t.Fatalf("old settlement bound to %q, want stripe", bank)
	}
	// A worker of the previous release names no bank: its settlements go
	// to the bank the deployment was configured with.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		VALUES ('old-2', 'acc', 'ba_1', 100, 'USD', 'pending', 'k-old-2', 'sha256:00')`); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT bank FROM settlements WHERE settlement_id = 'old-2'").Scan(&bank); err != nil || bank != "stripe" {
		t.Fatalf("settlement inserted without a bank: %q, %v; want stripe", bank, err)
	}
	// Once applied, the name is not needed again.
	if _, err := migrations.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
}

// TestBindBankEmptyDatabase: a database with no settlements needs no name,
// and then the column has no default: every settlement names its bank.
func TestBindBankEmptyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewEmpty(t)
	if _, err := migrations.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		VALUES ('s1', 'acc', 'ben', 100, 'EUR', 'pending', 'k1', 'sha256:00')`)
	if err == nil {
		t.Fatal("a settlement without a bank was stored")
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, bank)
		VALUES ('s1', 'acc', 'ben', 100, 'EUR', 'pending', 'k1', 'sha256:00', 'BAD NAME')`); err == nil {
		t.Fatal("a malformed bank name was stored")
	}
}
