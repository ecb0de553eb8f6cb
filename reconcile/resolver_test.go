package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// resolveUntilTerminal calls Resolve until the settlement is terminal (or
// done), as the reconcile job would: each call at the next check the
// previous one set.
func resolveUntilTerminal(t *testing.T, b *resolverBundle, id string) Outcome {
	t.Helper()
	var out Outcome
	next := time.Now()
	settletest.Wait(t, "settlement "+id+" terminal", func() (bool, string) {
		if time.Now().Before(next) {
			return false, fmt.Sprintf("%+v", out)
		}
		var err error
		if out, err = b.r.Resolve(context.Background(), id, nil); err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		next = out.NextCheckAt
		return out.State.Terminal() || out.Done, fmt.Sprintf("%+v", out)
	})
	return out
}

func TestResolverSendThenConfirm(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{SettleDelayMS: 100})
	resolvertest.InsertSettlement(t, b.db, "s-ok", 1234)

	out, err := b.r.Send(context.Background(), "s-ok", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != settlement.Sent || out.Done || out.NextCheckAt.IsZero() {
		t.Fatalf("after send: %+v", out)
	}
	// A second send (a redelivered job) does nothing.
	again, err := b.r.Send(context.Background(), "s-ok", nil)
	if err != nil || again.Action != ActionNone || !again.Done {
		t.Fatalf("second send = %+v, %v", again, err)
	}
	out = resolveUntilTerminal(t, b, "s-ok")
	if out.State != settlement.Confirmed {
		t.Fatalf("final: %+v", out)
	}
	r := resolvertest.ReadRow(t, b.db, "s-ok")
	if r.State != settlement.Confirmed || r.Movements != 1 || r.MoveAmount != 1234 || r.PaymentID == nil || r.Unfinished != 0 || r.NextCheck != nil {
		t.Fatalf("row = %+v", r)
	}
	// Resolving a confirmed settlement is a no-op.
	if out, err := b.r.Resolve(context.Background(), "s-ok", nil); err != nil || out.Action != ActionNone {
		t.Fatalf("resolve confirmed = %+v, %v", out, err)
	}
	if st := b.bank.Stats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 {
		t.Fatalf("bank stats %+v", st)
	}
}

func TestResolverRejectedFails(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{RejectRate: 1})
	resolvertest.InsertSettlement(t, b.db, "s-rej", 100)
	out, err := b.r.Send(context.Background(), "s-rej", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != settlement.Failed || !out.Done {
		t.Fatalf("out = %+v", out)
	}
	if r := resolvertest.ReadRow(t, b.db, "s-rej"); r.Movements != 0 || r.State != settlement.Failed {
		t.Fatalf("row = %+v", r)
	}
}

func TestResolverSettlementFailure(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{SettlementFailureRate: 1, SettleDelayMS: 20})
	resolvertest.InsertSettlement(t, b.db, "s-fail", 100)
	if _, err := b.r.Send(context.Background(), "s-fail", nil); err != nil {
		t.Fatal(err)
	}
	if out := resolveUntilTerminal(t, b, "s-fail"); out.State != settlement.Failed {
		t.Fatalf("out = %+v", out)
	}
	if r := resolvertest.ReadRow(t, b.db, "s-fail"); r.Movements != 0 {
		t.Fatalf("row = %+v", r)
	}
}

func TestResolverDroppedResponseBecomesUncertainThenConfirmed(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{DropResponseRate: 1, SettleDelayMS: 20})
	resolvertest.InsertSettlement(t, b.db, "s-drop", 500)
	out, err := b.r.Send(context.Background(), "s-drop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != settlement.Uncertain {
		t.Fatalf("out = %+v", out)
	}
	if err := b.bank.SetFaults(fakebank.Faults{SettleDelayMS: 20}); err != nil {
		t.Fatal(err)
	}
	if out := resolveUntilTerminal(t, b, "s-drop"); out.State != settlement.Confirmed {
		t.Fatalf("out = %+v", out)
	}
	if r := resolvertest.ReadRow(t, b.db, "s-drop"); r.Movements != 1 || r.MoveAmount != 500 {
		t.Fatalf("row = %+v", r)
	}
	if st := b.bank.Stats(); st.MaxPaymentsPerReference != 1 {
		t.Fatalf("bank stats %+v", st)
	}
}

func TestResolverBankDownNeverFails(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{FailBeforeRate: 1, StatusErrorRate: 1})
	resolvertest.InsertSettlement(t, b.db, "s-down", 100)
	out, err := b.r.Send(context.Background(), "s-down", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != settlement.Uncertain || out.Done {
		t.Fatalf("out = %+v", out)
	}
	for range 3 {
		out, err = b.r.Resolve(context.Background(), "s-down", nil)
		if err != nil {
			t.Fatal(err)
		}
		if out.State != settlement.Uncertain || out.Done {
			t.Fatalf("out = %+v", out)
		}
	}
	if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
		t.Fatal(err)
	}
	// The bank never saw the key (503 before processing), the key is young:
	// resend with the same key, then it settles.
	if out := resolveUntilTerminal(t, b, "s-down"); out.State != settlement.Confirmed {
		t.Fatalf("out = %+v", out)
	}
	if st := b.bank.Stats(); st.MaxPaymentsPerReference != 1 || st.Payments != 1 {
		t.Fatalf("bank stats %+v", st)
	}
}

func TestResolverKeyReuseIsFlagged(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	resolvertest.InsertSettlement(t, b.db, "s-reuse", 100)
	// Someone else used our key with another body.
	if _, err := b.r.Bank.Send(context.Background(), bankclient.KeyFor("s-reuse"), bankclient.PaymentRequest{
		AmountCents: 999, Currency: "EUR", DebtorAccount: "x", CreditorAccount: "y", Reference: "other"}); err != nil {
		t.Fatal(err)
	}
	out, err := b.r.Send(context.Background(), "s-reuse", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != settlement.Uncertain || !out.Done || out.Decision.Flag != ReasonKeyReuse {
		t.Fatalf("out = %+v", out)
	}
	r := resolvertest.ReadRow(t, b.db, "s-reuse")
	if r.Flag == nil || *r.Flag != ReasonKeyReuse || r.NextCheck != nil || r.Movements != 0 {
		t.Fatalf("row = %+v", r)
	}
	// Asked again, the bank's payment under our key is not ours: still flagged, never confirmed.
	out, err = b.r.Resolve(context.Background(), "s-reuse", nil)
	if err != nil || out.State != settlement.Uncertain || out.Decision.Flag != ReasonPaymentMismatch {
		t.Fatalf("resolve = %+v, %v", out, err)
	}
}

// TestResolverKeyTTL: the bank forgets keys while the settlement is
// uncertain; the engine never resends after the key TTL and flags it.
func TestResolverKeyTTL(t *testing.T) {
	t.Parallel()
	// One clock for the bank and the engine.
	clock := settletest.NewManualClock(time.Now())
	b := setupResolverOpts(t, fakebank.Options{Now: clock.Now, Faults: fakebank.Faults{DropResponseRate: 1, SettleDelayMS: 10_000, KeyTTLMS: 1000}})
	b.r.Now = clock.Now
	b.r.KeyTTL = time.Second
	resolvertest.InsertSettlement(t, b.db, "s-ttl", 100)
	out, err := b.r.Send(context.Background(), "s-ttl", nil)
	if err != nil || out.State != settlement.Uncertain {
		t.Fatalf("send = %+v, %v", out, err)
	}
	if err := b.bank.SetFaults(fakebank.Faults{SettleDelayMS: 10_000, KeyTTLMS: 1000}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // past the key TTL: the bank forgets the key
	payments := b.bank.Stats().Payments
	out, err = b.r.Resolve(context.Background(), "s-ttl", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != settlement.Uncertain || !out.Done || out.Decision.Flag != ReasonKeyForgotten {
		t.Fatalf("resolve = %+v", out)
	}
	// A redelivered send job does not POST either.
	if _, err := b.r.Send(context.Background(), "s-ttl", nil); err != nil {
		t.Fatal(err)
	}
	if got := b.bank.Stats().Payments; got != payments {
		t.Fatalf("bank payments %d → %d: the engine resent after the key TTL", payments, got)
	}
	r := resolvertest.ReadRow(t, b.db, "s-ttl")
	if r.State != settlement.Uncertain || r.Flag == nil || *r.Flag != ReasonKeyForgotten || r.NextCheck != nil {
		t.Fatalf("row = %+v", r)
	}
}

// TestResolverPendingOldAttemptNeverSent: a pending settlement whose first
// attempt is older than the key TTL (the worker died long ago) is checked,
// never POSTed.
func TestResolverPendingOldAttemptNeverSent(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	resolvertest.InsertSettlement(t, b.db, "s-old", 100)
	if _, err := b.db.Pool.Exec(context.Background(), `UPDATE settlements SET first_attempt_at = now() - interval '2 hours' WHERE settlement_id = 's-old'`); err != nil {
		t.Fatal(err)
	}
	out, err := b.r.Send(context.Background(), "s-old", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != ActionCheck || out.State != settlement.Uncertain || out.Decision.Flag != ReasonKeyForgotten {
		t.Fatalf("out = %+v", out)
	}
	if st := b.bank.Stats(); st.Payments != 0 {
		t.Fatalf("bank stats %+v", st)
	}
}

// TestResolverKeyAliveButNotReplayable: a pending settlement whose key the
// bank still remembers now, but may have forgotten by the time a request
// decided now arrives (first attempt within RequestBound of the key TTL),
// is checked and flagged, never POSTed: the bank could take the POST as a
// new payment. The model checker found this edge (issue 30).
func TestResolverKeyAliveButNotReplayable(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	b.r.RequestBound = 2 * time.Minute
	resolvertest.InsertSettlement(t, b.db, "s-edge", 100)
	// One hour TTL, first attempt 59 minutes ago: alive for one more
	// minute, less than the two a request may take.
	if _, err := b.db.Pool.Exec(context.Background(), `UPDATE settlements SET first_attempt_at = now() - interval '59 minutes' WHERE settlement_id = 's-edge'`); err != nil {
		t.Fatal(err)
	}
	out, err := b.r.Send(context.Background(), "s-edge", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != settlement.Uncertain || out.Decision.Flag != ReasonKeyForgotten {
		t.Fatalf("out = %+v", out)
	}
	if _, err := b.r.Resolve(context.Background(), "s-edge", nil); err != nil {
		t.Fatal(err)
	}
	if st := b.bank.Stats(); st.Payments != 0 {
		t.Fatalf("bank stats %+v: the engine POSTed under a key the bank may forget before the request lands", st)
	}
}

func TestResolverConcurrentResolveOneMovement(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{SettleDelayMS: 0})
	resolvertest.InsertSettlement(t, b.db, "s-race", 700)
	if _, err := b.r.Send(context.Background(), "s-race", nil); err != nil {
		t.Fatal(err)
	}
	// Whatever the send decided, many concurrent resolvers converge.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if _, err := b.r.Resolve(context.Background(), "s-race", nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r := resolvertest.ReadRow(t, b.db, "s-race")
	if r.State != settlement.Confirmed || r.Movements != 1 || r.MoveAmount != 700 || r.Unfinished != 0 {
		t.Fatalf("row = %+v", r)
	}
}

func TestResolverHookRunsInTransaction(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	resolvertest.InsertSettlement(t, b.db, "s-hook", 100)
	boom := errors.New("boom")
	_, err := b.r.Send(context.Background(), "s-hook", func(ctx context.Context, tx pgx.Tx, out Outcome) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	// The outcome was rolled back with the hook: still pending, like a
	// crash before the answer was recorded. A second send asks the bank by
	// key first and finds the payment: no second POST.
	if r := resolvertest.ReadRow(t, b.db, "s-hook"); r.State != settlement.Pending {
		t.Fatalf("row = %+v", r)
	}
	out, err := b.r.Send(context.Background(), "s-hook", nil)
	if err != nil || out.Action != ActionCheck || out.State != settlement.Confirmed && out.State != settlement.Sent {
		t.Fatalf("out = %+v, %v", out, err)
	}
	if st := b.bank.Stats(); st.Payments != 1 || st.Replays != 0 {
		t.Fatalf("bank stats %+v", st)
	}
}

func TestResolverNotFound(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	_, err := b.r.Resolve(context.Background(), "nope", nil)
	if !errors.Is(err, settlement.ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
}

// TestResolverOutcomeRewritesTheRowOnce records each answer with one new
// version of the settlement's row, in the transaction of the outcome: the
// transition carries the bank's facts and the next check when the
// decision moves the settlement, and an UPDATE of their own writes them
// when it does not.
func TestResolverOutcomeRewritesTheRowOnce(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{SettleDelayMS: 60_000})
	resolvertest.InsertSettlement(t, b.db, "s-once", 100)
	countRowVersions(t, b.db)
	updates := func(want string) TxHook {
		return func(ctx context.Context, tx pgx.Tx, out Outcome) error {
			n, err := rowVersions(ctx, tx)
			if err != nil {
				return err
			}
			var paymentID *string
			if err := tx.QueryRow(ctx, "SELECT bank_payment_id FROM settlements WHERE settlement_id = 's-once'").Scan(&paymentID); err != nil {
				return err
			}
			if n != 1 || paymentID == nil || out.State != settlement.State(want) {
				t.Errorf("outcome %s: %d row versions of the settlement, payment id %v; want 1 and the bank's", out.State, n, paymentID)
			}
			return nil
		}
	}
	// pending → sent (the transition writes the bank's answer).
	if out, err := b.r.Send(context.Background(), "s-once", updates("sent")); err != nil || out.State != settlement.Sent {
		t.Fatalf("send = %+v, %v", out, err)
	}
	// sent, still processing at the bank: the answer moves nothing.
	if out, err := b.r.Resolve(context.Background(), "s-once", updates("sent")); err != nil || out.State != settlement.Sent || out.Done {
		t.Fatalf("resolve = %+v, %v", out, err)
	}
	if r := resolvertest.ReadRow(t, b.db, "s-once"); r.PaymentID == nil || r.Unfinished != 0 || r.NextCheck == nil {
		t.Fatalf("row = %+v", r)
	}
}

// countRowVersions makes every new version of a settlements row in db
// count in the transaction's setting test.row_versions (a trigger of this
// test's own database), so that a test can read how many times a
// transaction rewrote settlements rows.
func countRowVersions(t *testing.T, db *dbtest.DB) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `
		CREATE FUNCTION test_count_row_versions() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM set_config('test.row_versions',
				(coalesce(nullif(current_setting('test.row_versions', true), ''), '0')::int + 1)::text, true);
			RETURN NULL;
		END $$;
		CREATE TRIGGER test_count_row_versions AFTER UPDATE ON settlements
			FOR EACH ROW EXECUTE FUNCTION test_count_row_versions()`); err != nil {
		t.Fatal(err)
	}
}

// rowVersions is how many settlements rows q's transaction has rewritten
// so far (countRowVersions).
func rowVersions(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var n int
	err := q.QueryRow(ctx, "SELECT coalesce(nullif(current_setting('test.row_versions', true), ''), '0')::int").Scan(&n)
	return n, err
}
