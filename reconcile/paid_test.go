package reconcile

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/settlement"
)

// TestStatementResolvesLostAnswers: the bank executed two payments whose
// answers were lost (one uncertain, one flagged because no safe question
// was left, as at a bank that can be asked nothing past its key window);
// importing the bank's statement confirms each with one payout movement,
// also when the status API and the import race, and importing it again
// changes nothing.
func TestStatementResolvesLostAnswers(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, bankclient.Faults{DropResponseRate: 1})
	ctx := context.Background()
	for _, id := range []string{"paid-uncertain", "paid-flagged"} {
		insertSettlement(t, b.db, id, 1234)
		if out, err := b.r.Send(ctx, id, nil); err != nil || out.State != settlement.Uncertain {
			t.Fatalf("send %s: %+v, %v; want uncertain (answer dropped)", id, out, err)
		}
	}
	if _, err := b.db.Pool.Exec(ctx, `UPDATE settlements SET (needs_investigation, investigation_reason, next_check_at) = (true, $2, NULL)
		WHERE settlement_id = $1`, "paid-flagged", ReasonNoSafeQuestion); err != nil {
		t.Fatal(err)
	}

	data, err := b.bank.RenderStatement(time.Now().UTC(), fakebank.FormatCamt053, 0)
	if err != nil {
		t.Fatal(err)
	}
	im := &StatementImporter{DB: b.db.Pool, Returns: b.r, Accounts: []string{"acc-1"}}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	wg.Go(func() {
		_, err := im.Import(ctx, "today.xml", bytes.NewReader(data))
		errs <- err
	})
	for range 3 {
		wg.Go(func() {
			_, err := b.r.Resolve(ctx, "paid-uncertain", nil)
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
	for _, id := range []string{"paid-uncertain", "paid-flagged"} {
		r := readRow(t, b.db, id)
		if r.state != settlement.Confirmed || r.movements != 1 || r.moveAmount != 1234 || r.flag != nil {
			t.Errorf("%s after the statement: %+v, want confirmed, one movement of 1234, not flagged", id, r)
		}
	}
	if _, err := im.Import(ctx, "today-again.xml", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	checkAgainst(t, b.db, b.r.Bank)
}

// TestStatementPaysAnotherAmount: a statement line under the settlement's
// reference for another amount is flagged, never booked.
func TestStatementPaysAnotherAmount(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, bankclient.Faults{DropResponseRate: 1})
	ctx := context.Background()
	insertSettlement(t, b.db, "paid-other", 500)
	if _, err := b.r.Send(ctx, "paid-other", nil); err != nil {
		t.Fatal(err)
	}
	out, err := b.r.ApplyPaid(ctx, "paid-other", "statement", LineFacts{Line: "1.1 E1", AmountMinor: minor(499), Currency: "EUR"})
	if err != nil || out.FlagReason != ReasonStatementMismatch {
		t.Fatalf("ApplyPaid of another amount: %+v, %v; want flagged %s", out, err, ReasonStatementMismatch)
	}
	if r := readRow(t, b.db, "paid-other"); r.state != settlement.Uncertain || r.movements != 0 {
		t.Errorf("after a mismatching line: %+v, want uncertain without a movement", r)
	}
}

// TestDecidePaid is DecidePaid's table.
func TestDecidePaid(t *testing.T) {
	t.Parallel()
	confirm := Decision{To: settlement.Confirmed, WriteMovement: true, Definitive: true}
	mismatch := Decision{To: settlement.Uncertain, Flag: ReasonStatementMismatch}
	for _, tt := range []struct {
		name string
		f    Facts
		line LineFacts
		want Decision
	}{
		{"sent", facts0(settlement.Sent, t0), line(minor(1000), "EUR", ""), confirm},
		{"uncertain", facts0(settlement.Uncertain, t0), line(minor(1000), "EUR", ""), confirm},
		{"pending after an attempt", facts0(settlement.Pending, t0), line(minor(1000), "EUR", ""), confirm},
		{"another amount", facts0(settlement.Sent, t0), line(minor(999), "EUR", ""), mismatch},
		{"another currency", facts0(settlement.Uncertain, t0), line(minor(1000), "JPY", ""), mismatch},
		{"no amount", facts0(settlement.Sent, t0), line(nil, "EUR", ""), mismatch},
		{"zero", facts0(settlement.Uncertain, t0), line(minor(0), "EUR", ""), mismatch},
		{"a debit marked as a return", facts0(settlement.Uncertain, t0), line(minor(1000), "EUR", "AC04"), Decision{To: settlement.Uncertain}},
		{"a reversal", facts0(settlement.Sent, t0), LineFacts{AmountMinor: minor(1000), Currency: "EUR", Reversal: true}, Decision{To: settlement.Sent}},
		{"never attempted", facts0(settlement.Pending, time.Time{}), line(minor(1000), "EUR", ""), Decision{To: settlement.Pending}},
		{"already confirmed", facts0(settlement.Confirmed, t0), line(minor(1000), "EUR", ""), Decision{To: settlement.Confirmed}},
		{"failed stays failed", facts0(settlement.Failed, t0), line(minor(1000), "EUR", ""), Decision{To: settlement.Failed}},
		{"returned stays returned", facts0(settlement.Returned, t0), line(minor(1000), "EUR", ""), Decision{To: settlement.Returned}},
	} {
		got := DecidePaid(tt.f, tt.line)
		got.Reason = ""
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
