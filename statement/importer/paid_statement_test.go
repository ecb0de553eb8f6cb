package importer

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/reconcile"
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
	b := setupResolver(t, fakebank.Faults{DropResponseRate: 1})
	ctx := context.Background()
	for _, id := range []string{"paid-uncertain", "paid-flagged"} {
		resolvertest.InsertSettlement(t, b.db, id, 1234)
		if out, err := b.r.Send(ctx, id, nil); err != nil || out.State != settlement.Uncertain {
			t.Fatalf("send %s: %+v, %v; want uncertain (answer dropped)", id, out, err)
		}
	}
	if _, err := b.db.Pool.Exec(ctx, `UPDATE settlements SET (needs_investigation, investigation_reason, next_check_at) = (true, $2, NULL)
		WHERE settlement_id = $1`, "paid-flagged", reconcile.ReasonNoSafeQuestion); err != nil {
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
		r := resolvertest.ReadRow(t, b.db, id)
		if r.State != settlement.Confirmed || r.Movements != 1 || r.MoveAmount != 1234 || r.Flag != nil {
			t.Errorf("%s after the statement: %+v, want confirmed, one movement of 1234, not flagged", id, r)
		}
	}
	if _, err := im.Import(ctx, "today-again.xml", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	resolvertest.CheckAgainst(t, b.db, b.r.Bank)
}

// TestStatementPaysAnotherAmount: a statement line under the settlement's
// reference for another amount is flagged, never booked.
func TestStatementPaysAnotherAmount(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{DropResponseRate: 1})
	ctx := context.Background()
	resolvertest.InsertSettlement(t, b.db, "paid-other", 500)
	if _, err := b.r.Send(ctx, "paid-other", nil); err != nil {
		t.Fatal(err)
	}
	out, err := b.r.ApplyPaid(ctx, "paid-other", "statement", reconcile.LineFacts{Line: "1.1 E1", AmountMinor: minor(499), Currency: "EUR"})
	if err != nil || out.FlagReason != reconcile.ReasonStatementMismatch {
		t.Fatalf("ApplyPaid of another amount: %+v, %v; want flagged %s", out, err, reconcile.ReasonStatementMismatch)
	}
	if r := resolvertest.ReadRow(t, b.db, "paid-other"); r.State != settlement.Uncertain || r.Movements != 0 {
		t.Errorf("after a mismatching line: %+v, want uncertain without a movement", r)
	}
}

func minor(v int64) *int64 { return &v }
