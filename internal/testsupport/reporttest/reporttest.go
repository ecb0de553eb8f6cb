// Package reporttest is the ledger and bank of the report tests (inspect,
// audit, statement/importer): a private database, an in-process fakebank
// with a manual clock and a client of it, and settlements written as the
// engine would have left them.
package reporttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
)

// Bundle is one test's ledger (a private database) and bank (an
// in-process fakebank with a manual clock). A Bundle with DB alone serves
// the tests that need no bank.
type Bundle struct {
	DB     *dbtest.DB
	Bank   *fakebank.Bank
	URL    string
	Client *settle.Client
	Clock  *settletest.ManualClock
}

// New returns a Bundle with a private database and a bank of its own.
func New(t *testing.T) *Bundle {
	t.Helper()
	clock := settletest.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	bank, url := fakebanktest.NewServer(t, fakebank.Options{Seed: 1, Now: clock.Now})
	client, err := settle.New(url, bankclient.Options{Timeout: 5 * time.Second, Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return &Bundle{DB: dbtest.New(t), Bank: bank, URL: url, Client: client, Clock: clock}
}

// Seed writes a settlement in state st directly, with its history and, when
// movement is true, its ledger movement, as the engine would have left it.
func (b *Bundle) Seed(t *testing.T, id string, amount int64, st settlement.State, movement bool) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.DB.Pool, func(tx pgx.Tx) error {
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

// Pay creates a payment at the bank for reference id under its stable key.
func (b *Bundle) Pay(t *testing.T, id string, amount int64) bankclient.Payment {
	t.Helper()
	res, err := b.Client.Send(context.Background(), bankclient.KeyFor(id), bankclient.PaymentRequest{
		AmountCents: amount, Currency: "EUR", DebtorAccount: "acc-1", CreditorAccount: "bene-1", Reference: id,
	})
	if err != nil {
		t.Fatalf("pay %s: %v", id, err)
	}
	return res.Payment
}

// Confirmed seeds a settlement that went through cleanly: paid at the bank,
// Confirmed with its movement.
func (b *Bundle) Confirmed(t *testing.T, id string, amount int64) {
	t.Helper()
	b.Pay(t, id, amount)
	b.Seed(t, id, amount, settlement.Confirmed, true)
}

// DeleteMovement removes a ledger movement behind the engine's back (the
// table is append-only; the trigger is bypassed as superuser).
func (b *Bundle) DeleteMovement(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.DB.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "DELETE FROM ledger_movements WHERE settlement_id = $1", id)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("deleted %d movements", tag.RowsAffected())
		}
		return err
	})
	if err != nil {
		t.Fatalf("delete movement of %s: %v", id, err)
	}
}

// SeedBulk writes n settlements bulk-<i>, amount 100+i, in two statements:
// confirmed with their movements, except every openEvery-th (when > 0),
// which is still sent.
func SeedBulk(t testing.TB, db *dbtest.DB, n, openEvery int) {
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
