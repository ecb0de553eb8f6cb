package audit

import (
	"context"
	"fmt"
	"strconv"
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

// reportBundle is one test's ledger (a private database) and bank (an
// in-process fakebank with a manual clock).
type reportBundle struct {
	db     *dbtest.DB
	bank   *fakebank.Bank
	url    string
	client *settle.Client
	clock  *settletest.ManualClock
}

func setupReport(t *testing.T) *reportBundle {
	t.Helper()
	clock := settletest.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	bank, url := fakebanktest.NewServer(t, fakebank.Options{Seed: 1, Now: clock.Now})
	client, err := settle.New(url, bankclient.Options{Timeout: 5 * time.Second, Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return &reportBundle{db: dbtest.New(t), bank: bank, url: url, client: client, clock: clock}
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

// pay creates a payment at the bank for reference id under its stable key.
func (b *reportBundle) pay(t *testing.T, id string, amount int64) bankclient.Payment {
	t.Helper()
	res, err := b.client.Send(context.Background(), bankclient.KeyFor(id), bankclient.PaymentRequest{
		AmountCents: amount, Currency: "EUR", DebtorAccount: "acc-1", CreditorAccount: "bene-1", Reference: id,
	})
	if err != nil {
		t.Fatalf("pay %s: %v", id, err)
	}
	return res.Payment
}

// confirmed seeds a settlement that went through cleanly: paid at the bank,
// confirmed with its movement.
func (b *reportBundle) confirmed(t *testing.T, id string, amount int64) {
	t.Helper()
	b.pay(t, id, amount)
	b.seed(t, id, amount, settlement.Confirmed, true)
}

// deleteMovement removes a ledger movement behind the engine's back (the
// table is append-only; the trigger is bypassed as superuser).
func (b *reportBundle) deleteMovement(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
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

// genBank is a bank whose statement is computed, not stored: n settled
// payments bulk-0 … bulk-(n-1), so that measuring the report's memory does
// not measure the bank's.
type genBank struct{ n int }

func (g *genBank) payment(i int) bankclient.Payment {
	return bankclient.Payment{ID: fmt.Sprintf("pay_%012d", i), IdempotencyKey: "key-" + strconv.Itoa(i),
		Reference: "bulk-" + strconv.Itoa(i), Status: bankclient.StatusSettled, AmountCents: int64(100 + i), Currency: "EUR"}
}

func (g *genBank) Send(context.Context, string, bankclient.PaymentRequest) (bankclient.SendResult, error) {
	return bankclient.SendResult{}, fmt.Errorf("genBank: read only")
}

func (g *genBank) StatusByKey(_ context.Context, key string) (bankclient.Payment, error) {
	var i int
	if _, err := fmt.Sscanf(key, "key-%d", &i); err != nil || i < 0 || i >= g.n {
		return bankclient.Payment{}, bankclient.ErrNotFound
	}
	return g.payment(i), nil
}

func (g *genBank) Statement(_ context.Context, after string, limit int) (bankclient.StatementPage, error) {
	start := 0
	if after != "" {
		var err error
		if start, err = strconv.Atoi(after); err != nil {
			return bankclient.StatementPage{}, err
		}
	}
	end := min(start+limit, g.n)
	p := bankclient.StatementPage{Payments: make([]bankclient.Payment, 0, end-start)}
	for i := start; i < end; i++ {
		p.Payments = append(p.Payments, g.payment(i))
	}
	if end < g.n {
		p.Next = strconv.Itoa(end)
	}
	return p, nil
}
