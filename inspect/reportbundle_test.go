package inspect

import (
	"context"
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
