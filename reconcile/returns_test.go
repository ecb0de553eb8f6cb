package reconcile

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
)

// confirmedBundle is a settlement confirmed at a fakebank, the Resolver
// watching for returns for an hour.
func confirmedBundle(t *testing.T, id string, amount int64) (*resolverBundle, string) {
	t.Helper()
	b := setupResolver(t, fakebank.Faults{})
	b.r.ReturnWatch = time.Hour
	resolvertest.InsertSettlement(t, b.db, id, amount)
	out, err := b.r.Send(context.Background(), id, nil)
	if err != nil || out.State != settlement.Confirmed {
		t.Fatalf("send: %+v, %v; want confirmed at once", out, err)
	}
	r := resolvertest.ReadRow(t, b.db, id)
	if r.PaymentID == nil || r.NextCheck == nil {
		t.Fatalf("confirmed without a payment id or a watch check: %+v", r)
	}
	return b, *r.PaymentID
}

func bookedMovements(t *testing.T, b *resolverBundle, id string) map[string]int {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT kind, amount_cents FROM ledger_movements WHERE settlement_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var kind string
		var amount int64
		if err := rows.Scan(&kind, &amount); err != nil {
			t.Fatal(err)
		}
		got[kind]++
	}
	return got
}

// TestReturnByStatus: the bank returns a settled payment; the return
// watch's status check moves the settlement to returned with one reversal.
func TestReturnByStatus(t *testing.T) {
	t.Parallel()
	b, payID := confirmedBundle(t, "ret-status", 2500)
	ctx := context.Background()
	if out, err := b.r.Resolve(ctx, "ret-status", nil); err != nil || out.State != settlement.Confirmed {
		t.Fatalf("watch check before any return: %+v, %v", out, err)
	}
	if err := b.bank.Return(payID, "AC04"); err != nil {
		t.Fatal(err)
	}
	out, err := b.r.Resolve(ctx, "ret-status", nil)
	if err != nil || out.State != settlement.Returned {
		t.Fatalf("watch check after the return: %+v, %v; want returned", out, err)
	}
	if got := bookedMovements(t, b, "ret-status"); got["payout"] != 1 || got["reversal"] != 1 {
		t.Errorf("movements %v, want one payout and one reversal", got)
	}
	if out, _ := b.r.Resolve(ctx, "ret-status", nil); out.Action != ActionNone {
		t.Errorf("a returned settlement is asked again: %+v", out)
	}
	resolvertest.CheckAgainst(t, b.db, b.r.Bank)
}

// TestReturnFromEverySourceAtOnce: the same return reported by the status
// API, by webhook hints (the settlement found by the hint, then a status
// check, as internal/webhook does) and by statements, several times each,
// concurrently: one reversal.
func TestReturnFromEverySourceAtOnce(t *testing.T) {
	t.Parallel()
	b, payID := confirmedBundle(t, "ret-race", 900)
	if err := b.bank.Return(payID, "MS03"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 18)
	for range 6 {
		wg.Go(func() {
			id, found, err := FindByHint(ctx, b.db.Pool, bankclient.Hint{PaymentID: payID})
			if err == nil && !found {
				err = errors.New("the webhook's hint names no settlement")
			}
			if err == nil {
				_, err = b.r.Resolve(ctx, id, nil)
			}
			errs <- err
		})
		wg.Go(func() {
			_, err := b.r.ApplyReturn(ctx, "ret-race", "statement", LineFacts{Line: "1.1", AmountMinor: minor(900), Currency: "EUR", ReturnReason: "MS03"})
			errs <- err
		})
		wg.Go(func() {
			_, err := b.r.Resolve(ctx, "ret-race", nil)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if r := resolvertest.ReadRow(t, b.db, "ret-race"); r.State != settlement.Returned {
		t.Errorf("state %s, want returned", r.State)
	}
	if got := bookedMovements(t, b, "ret-race"); got["payout"] != 1 || got["reversal"] != 1 {
		t.Errorf("movements %v, want one payout and one reversal", got)
	}
	var n int
	_ = b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlement_transitions WHERE settlement_id = 'ret-race' AND to_state = 'returned'`).Scan(&n)
	if n != 1 {
		t.Errorf("%d transitions to returned, want one", n)
	}
}

// TestReturnRolledBackLeavesNeither: when the transaction that moves the
// settlement to returned fails before it commits, neither the transition
// nor the reversal remains.
func TestReturnRolledBackLeavesNeither(t *testing.T) {
	t.Parallel()
	b, payID := confirmedBundle(t, "ret-crash", 700)
	if err := b.bank.Return(payID, ""); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("crash before commit")
	_, err := b.r.Resolve(context.Background(), "ret-crash", func(context.Context, pgx.Tx, Outcome) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the hook's", err)
	}
	if r := resolvertest.ReadRow(t, b.db, "ret-crash"); r.State != settlement.Confirmed {
		t.Errorf("state %s after the rollback, want confirmed", r.State)
	}
	if got := bookedMovements(t, b, "ret-crash"); got["reversal"] != 0 {
		t.Errorf("movements %v after the rollback, want no reversal", got)
	}
	if out, err := b.r.Resolve(context.Background(), "ret-crash", nil); err != nil || out.State != settlement.Returned {
		t.Errorf("the next check: %+v, %v; want returned", out, err)
	}
}

// TestReturnOfWhatWasNeverConfirmed and of another amount: a statement's
// return of a settlement still sent leaves it sent with no movement (the
// bank's status decides); a partial return flags the confirmed
// settlement, never guessed.
func TestReturnOfWhatWasNeverConfirmedAndPartialReturns(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{SettleDelayMS: 60_000})
	ctx := context.Background()
	resolvertest.InsertSettlement(t, b.db, "ret-sent", 100)
	if out, err := b.r.Send(ctx, "ret-sent", nil); err != nil || out.State != settlement.Sent {
		t.Fatalf("send: %+v, %v", out, err)
	}
	if out, err := b.r.ApplyReturn(ctx, "ret-sent", "statement", LineFacts{AmountMinor: minor(100), Currency: "EUR", ReturnReason: "AC01"}); err != nil || out.State != settlement.Sent {
		t.Errorf("a statement's return of a sent settlement: %+v, %v; want it left sent", out, err)
	}
	if got := bookedMovements(t, b, "ret-sent"); len(got) != 0 {
		t.Errorf("movements %v, want none", got)
	}

	c, _ := confirmedBundle(t, "ret-part", 1000)
	out, err := c.r.ApplyReturn(ctx, "ret-part", "statement", LineFacts{AmountMinor: minor(400), Currency: "EUR", ReturnReason: "AM05"})
	if err != nil || out.State != settlement.Confirmed || out.FlagReason != ReasonPartialReturn {
		t.Errorf("a partial return: %+v, %v; want confirmed and flagged %s", out, err, ReasonPartialReturn)
	}
	if got := bookedMovements(t, c, "ret-part"); got["reversal"] != 0 {
		t.Errorf("movements %v, want no reversal", got)
	}
}

// TestReturnWatchEnds: past the watch, a confirmed settlement is no longer
// asked.
func TestReturnWatchEnds(t *testing.T) {
	t.Parallel()
	b, _ := confirmedBundle(t, "ret-late", 300)
	b.r.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if out, err := b.r.Resolve(context.Background(), "ret-late", nil); err != nil || out.Action != ActionNone {
		t.Errorf("after the watch: %+v, %v; want nothing done", out, err)
	}
}

// TestReturnAfterTheKeyIsForgotten: the return watch outlives the bank's
// memory of the key (a day against a week at settle's own bank): a return
// after that is found by searching the bank's list for the reference (by
// key the bank answered 404 and the watch saw nothing; the model of issue
// 30 showed it).
func TestReturnAfterTheKeyIsForgotten(t *testing.T) {
	t.Parallel()
	clock := settletest.NewManualClock(time.Now())
	b := setupResolverOpts(t, fakebank.Options{Now: clock.Now, Faults: fakebank.Faults{KeyTTLMS: 1000}})
	b.r.Now, b.r.KeyTTL, b.r.ReturnWatch = clock.Now, time.Second, time.Hour
	ctx := context.Background()
	resolvertest.InsertSettlement(t, b.db, "ret-late", 2500)
	out, err := b.r.Send(ctx, "ret-late", nil)
	if err != nil || out.State != settlement.Confirmed {
		t.Fatalf("send: %+v, %v; want confirmed at once", out, err)
	}
	payID := resolvertest.ReadRow(t, b.db, "ret-late").PaymentID
	if payID == nil {
		t.Fatal("confirmed without a payment id")
	}
	clock.Advance(2 * time.Second) // the bank forgets the key
	if _, err := b.r.Bank.StatusByKey(ctx, bankclient.KeyFor("ret-late")); !bankclient.IsNotFound(err) {
		t.Fatalf("the bank still knows the key: %v", err)
	}
	if err := b.bank.Return(*payID, "AC04"); err != nil {
		t.Fatal(err)
	}
	out, err = b.r.Resolve(ctx, "ret-late", nil)
	if err != nil || out.State != settlement.Returned {
		t.Fatalf("watch check after the key was forgotten and the payment returned: %+v, %v; want returned", out, err)
	}
	if got := bookedMovements(t, b, "ret-late"); got["payout"] != 1 || got["reversal"] != 1 {
		t.Errorf("movements %v, want one payout and one reversal", got)
	}
	resolvertest.CheckAgainst(t, b.db, b.r.Bank)
}
