package main

import (
	"context"
	"strings"
	"testing"

	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/migrations"
)

// TestMigrateBindBank: on a database of an earlier release holding
// settlements, `settle migrate` refuses, saying to name the bank, and
// changes nothing; `settle migrate --bind-bank NAME` binds them, and
// SETTLE_MIGRATE_BANK does the same.
func TestMigrateBindBank(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	for _, named := range []struct{ arg, env string }{{arg: "stripe"}, {env: "stripe"}} {
		db := dbtest.NewEmpty(t)
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
			if m.Version >= 12 {
				break
			}
			if _, err := db.Pool.Exec(ctx, m.SQL); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Pool.Exec(ctx, "INSERT INTO settle_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ('old', 'acc', 'ba_1', 100, 'USD', 'confirmed', 'k-old', 'sha256:00')`); err != nil {
			t.Fatal(err)
		}
		env := append(envWithout("DATABASE_URL", "SETTLE_"), "DATABASE_URL="+db.URL)
		out, code := runBin(t, bin, env, "migrate")
		if code != exitError || !strings.Contains(out, "--bind-bank NAME") || !strings.Contains(out, "SETTLE_MIGRATE_BANK") {
			t.Fatalf("migrate without a bank: exit %d: %s", code, out)
		}
		args := []string{"migrate"}
		if named.arg != "" {
			args = append(args, "--bind-bank", named.arg)
		} else {
			env = append(env, "SETTLE_MIGRATE_BANK="+named.env)
		}
		if out, code := runBin(t, bin, env, args...); code != exitOK || !strings.Contains(out, "applied 0012_settlement_bank") {
			t.Fatalf("migrate %v: exit %d: %s", args, code, out)
		}
		var bank string
		if err := db.Pool.QueryRow(ctx, "SELECT bank FROM settlements WHERE settlement_id = 'old'").Scan(&bank); err != nil || bank != "stripe" {
			t.Fatalf("old settlement bound to %q (%v), want stripe", bank, err)
		}
	}
}
