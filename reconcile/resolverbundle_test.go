package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

type resolverBundle struct {
	db   *dbtest.DB
	bank *fakebank.Bank
	url  string
	r    *Resolver
}

func setupResolver(t *testing.T, faults fakebank.Faults) *resolverBundle {
	t.Helper()
	return setupResolverOpts(t, fakebank.Options{Seed: 7, Faults: faults})
}

func setupResolverOpts(t *testing.T, opts fakebank.Options) *resolverBundle {
	t.Helper()
	db := dbtest.New(t)
	bank, url := fakebanktest.NewServer(t, opts)
	client, err := settle.New(url, bankclient.Options{Timeout: 2 * time.Second, Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return &resolverBundle{db: db, bank: bank, url: url, r: &Resolver{
		DB: db.Pool, Bank: client, KeyTTL: time.Hour,
		CheckInterval: 50 * time.Millisecond, MaxCheckInterval: time.Second, Lease: 5 * time.Second,
		Metrics: metrics.NewUnregistered(),
	}}
}

// checkAgainst runs the one invariant checker, recovered, against the
// tables of db and the books of bank.
func checkAgainst(t *testing.T, db *dbtest.DB, bank bankclient.Bank) {
	t.Helper()
	ctx := context.Background()
	ps, err := bankclient.AllPayments(ctx, bank)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := audit.CheckInvariants(ctx, db.Pool, audit.Expect{CheckBank: true, Payments: ps, Recovered: true}); err != nil || len(v) > 0 {
		t.Errorf("invariants: %v %v", v, err)
	}
}

// insertSettlement creates a pending settlement as intake would (without a
// receipt or a job).
func insertSettlement(t *testing.T, db *dbtest.DB, id string, amount int64) {
	t.Helper()
	insertSettlementAt(t, db, id, amount, "acc-1", "EUR")
}

// insertSettlementAt is insertSettlement paying from account in currency.
func insertSettlementAt(t *testing.T, db *dbtest.DB, id string, amount int64, account, currency string) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, next_check_at)
			VALUES ($1, $4, 'bene-1', $2, $5, 'pending', $3, 'sha256:00', now() + interval '1 minute')`,
			id, amount, bankclient.KeyFor(id), account, currency); err != nil {
			return err
		}
		return statemachine.Created(ctx, tx, "test", time.Now(), id)
	})
	if err != nil {
		t.Fatalf("insert settlement: %v", err)
	}
}

type row struct {
	state      settlement.State
	movements  int
	moveAmount int64
	flag       *string
	paymentID  *string
	attempts   int
	unfinished int
	nextCheck  *time.Time
}

func readRow(t *testing.T, db *dbtest.DB, id string) row {
	t.Helper()
	var r row
	var st string
	err := db.Pool.QueryRow(context.Background(), `
		SELECT s.state, s.investigation_reason, s.bank_payment_id, s.next_check_at,
		       (SELECT count(*) FROM ledger_movements m WHERE m.settlement_id = s.settlement_id),
		       (SELECT coalesce(sum(amount_cents), 0) FROM ledger_movements m WHERE m.settlement_id = s.settlement_id),
		       (SELECT count(*) FROM bank_attempts a WHERE a.settlement_id = s.settlement_id),
		       (SELECT count(*) FROM bank_attempts a WHERE a.settlement_id = s.settlement_id AND a.finished_at IS NULL)
		FROM settlements s WHERE settlement_id = $1`, id).
		Scan(&st, &r.flag, &r.paymentID, &r.nextCheck, &r.movements, &r.moveAmount, &r.attempts, &r.unfinished)
	if err != nil {
		t.Fatalf("read settlement %s: %v", id, err)
	}
	r.state = settlement.State(st)
	return r
}
