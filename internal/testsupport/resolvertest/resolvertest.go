// Package resolvertest is what the tests of the Resolver (reconcile and
// statement/importer) share: one test's database and bank, a settlement
// inserted as intake would, its row read back, and the invariant checker
// run against the bank's books.
package resolvertest

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
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

// Setup returns one test's private database, an in-process fakebank with
// opts, its URL, and a client of it that sends each request once.
func Setup(t *testing.T, opts fakebank.Options) (*dbtest.DB, *fakebank.Bank, string, *settle.Client) {
	t.Helper()
	db := dbtest.New(t)
	bank, url := fakebanktest.NewServer(t, opts)
	client, err := settle.New(url, bankclient.Options{Timeout: 2 * time.Second, Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return db, bank, url, client
}

// CheckAgainst runs the one invariant checker, recovered, against the
// tables of db and the books of bank.
func CheckAgainst(t *testing.T, db *dbtest.DB, bank bankclient.Bank) {
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

// InsertSettlement creates a pending settlement as intake would (without a
// receipt or a job).
func InsertSettlement(t *testing.T, db *dbtest.DB, id string, amount int64) {
	t.Helper()
	InsertSettlementAt(t, db, id, amount, "acc-1", "EUR")
}

// InsertSettlementAt is insertSettlement paying from account in currency.
func InsertSettlementAt(t *testing.T, db *dbtest.DB, id string, amount int64, account, currency string) {
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

// Row is what the tests read back of one settlement: its state, flag and
// bank payment id, its ledger movements, its bank attempts (and those
// unfinished), and when it is next checked.
type Row struct {
	State      settlement.State
	Movements  int
	MoveAmount int64
	Flag       *string
	PaymentID  *string
	Attempts   int
	Unfinished int
	NextCheck  *time.Time
}

// ReadRow reads the Row of settlement id.
func ReadRow(t *testing.T, db *dbtest.DB, id string) Row {
	t.Helper()
	var r Row
	var st string
	err := db.Pool.QueryRow(context.Background(), `
		SELECT s.state, s.investigation_reason, s.bank_payment_id, s.next_check_at,
		       (SELECT count(*) FROM ledger_movements m WHERE m.settlement_id = s.settlement_id),
		       (SELECT coalesce(sum(amount_cents), 0) FROM ledger_movements m WHERE m.settlement_id = s.settlement_id),
		       (SELECT count(*) FROM bank_attempts a WHERE a.settlement_id = s.settlement_id),
		       (SELECT count(*) FROM bank_attempts a WHERE a.settlement_id = s.settlement_id AND a.finished_at IS NULL)
		FROM settlements s WHERE settlement_id = $1`, id).
		Scan(&st, &r.Flag, &r.PaymentID, &r.NextCheck, &r.Movements, &r.MoveAmount, &r.Attempts, &r.Unfinished)
	if err != nil {
		t.Fatalf("read settlement %s: %v", id, err)
	}
	r.State = settlement.State(st)
	return r
}
