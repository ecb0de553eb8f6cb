package reconcile

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/stripe"
	"github.com/settle/settle/bankclient/stripe/stripetest"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

// setupStripe is a Resolver paying through the Stripe connector at the
// fakebank's stripe profile, every request and response checked against
// Stripe's OpenAPI document, on a manual clock.
func setupStripe(t *testing.T, faults fakebank.Faults) (*resolverBundle, *settletest.ManualClock) {
	t.Helper()
	b := setupResolverOpts(t, fakebank.Options{Seed: 11, Faults: faults, Profile: "stripe"})
	client, err := stripe.New(b.url, bankclient.Options{
		Token: "sk_test_reconcile", Timeout: 2 * time.Second, Retry: bankclient.RetryPolicy{MaxAttempts: 1},
		HTTPClient: &http.Client{Transport: stripetest.NewValidator(t)},
	})
	if err != nil {
		t.Fatal(err)
	}
	caps := stripe.Capabilities
	b.r.Bank, b.r.Capabilities = client, &caps
	clock := settletest.NewManualClock(time.Now())
	b.r.Now = clock.Now
	return b, clock
}

// insertStripeSettlement is insertSettlement with a beneficiary Stripe
// pays out to.
func insertStripeSettlement(t *testing.T, b *resolverBundle, id string, amount int64) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, next_check_at)
			VALUES ($1, 'acc-1', 'ba_1StripeTest', $2, 'EUR', 'pending', $3, 'sha256:00', now() + interval '1 minute')`,
			id, amount, bankclient.KeyFor(id)); err != nil {
			return err
		}
		return statemachine.Created(ctx, tx, "test", time.Now(), id)
	})
	if err != nil {
		t.Fatalf("insert settlement: %v", err)
	}
}

// posts counts the payout requests sent for a settlement.
func posts(t *testing.T, b *resolverBundle, id string) int {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM bank_attempts WHERE settlement_id = $1 AND op IN ('replay', 'send')`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStripeLostAnswerReplayedThenPolledByID: the payout is created and
// the answer lost; within Stripe's key window the identical request under
// the same key replays the original response (status as it was then),
// which gives the payout's id; the current status is then read by id.
func TestStripeLostAnswerReplayedThenPolledByID(t *testing.T) {
	t.Parallel()
	b, clock := setupStripe(t, fakebank.Faults{DropResponseRate: 1, SettleDelayMS: 1})
	ctx := context.Background()
	insertStripeSettlement(t, b, "stripe-lost-1", 4200)
	if out, err := b.r.Send(ctx, "stripe-lost-1", nil); err != nil || out.State != settlement.Uncertain {
		t.Fatalf("send with the answer lost: %+v, %v", out, err)
	}
	if err := b.bank.SetFaults(fakebank.Faults{SettleDelayMS: 1}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	out, err := b.r.Resolve(ctx, "stripe-lost-1", nil)
	if err != nil || out.State != settlement.Sent || resolvertest.ReadRow(t, b.db, "stripe-lost-1").PaymentID == nil {
		t.Fatalf("replay: %+v, %v; want sent with the payout id learned", out, err)
	}
	settletest.Wait(t, "confirmation by payout id", func() (bool, string) {
		clock.Advance(time.Minute)
		out, err = b.r.Resolve(ctx, "stripe-lost-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		return out.State == settlement.Confirmed, string(out.State)
	})
	if r := resolvertest.ReadRow(t, b.db, "stripe-lost-1"); r.Movements != 1 || r.MoveAmount != 4200 {
		t.Errorf("movements %d of %d, want one of 4200", r.Movements, r.MoveAmount)
	}
	if st := b.bank.Stats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 || st.Replays != 1 {
		t.Errorf("bank %+v, want one payout and one replay", st)
	}
}

// TestStripeLostAnswerAfterTheKeyWindow: past the key window a replay
// could pay twice, so none is sent: the payout list is searched for our
// reference (metadata[reference]) and the settlement confirmed from it;
// a payout that never reached Stripe is not in the list, and the
// settlement is flagged, never resent.
func TestStripeLostAnswerAfterTheKeyWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		faults fakebank.Faults
		want   settlement.State
		flag   string
	}{
		{"found in the list", fakebank.Faults{DropResponseRate: 1}, settlement.Confirmed, ""},
		{"not in the list", fakebank.Faults{FailBeforeRate: 1}, settlement.Uncertain, ReasonNotInList},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, clock := setupStripe(t, tc.faults)
			ctx := context.Background()
			// Other payouts around it, so the search pages.
			for _, id := range []string{"stripe-other-1", "stripe-other-2"} {
				insertStripeSettlement(t, b, id, 100)
			}
			insertStripeSettlement(t, b, "stripe-late-1", 990)
			if out, err := b.r.Send(ctx, "stripe-late-1", nil); err != nil || out.State != settlement.Uncertain {
				t.Fatalf("send without an answer: %+v, %v", out, err)
			}
			if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"stripe-other-1", "stripe-other-2"} {
				if out, err := b.r.Send(ctx, id, nil); err != nil || out.State != settlement.Confirmed {
					t.Fatalf("send %s: %+v, %v", id, out, err)
				}
			}
			clock.Advance(2 * time.Hour) // past KeyTTL (1 h)
			out, err := b.r.Resolve(ctx, "stripe-late-1", nil)
			if err != nil {
				t.Fatal(err)
			}
			r := resolvertest.ReadRow(t, b.db, "stripe-late-1")
			flag := ""
			if r.Flag != nil {
				flag = *r.Flag
			}
			if out.State != tc.want || flag != tc.flag {
				t.Errorf("after the window: %s flagged %q, want %s flagged %q", out.State, flag, tc.want, tc.flag)
			}
			if tc.want == settlement.Confirmed && r.Movements != 1 {
				t.Errorf("%d movements, want 1", r.Movements)
			}
			if n := posts(t, b, "stripe-late-1"); n != 1 {
				t.Errorf("%d payout requests, want only the first", n)
			}
			if st := b.bank.Stats(); st.MaxPaymentsPerReference != 1 {
				t.Errorf("bank %+v: a reference paid twice", st)
			}
		})
	}
}

// TestStripePaidThenFailedIsAReturn: a paid payout that fails later reads
// failed at Stripe; the return watch books it as the return it is
// (returned, one reversal), not a failure.
func TestStripePaidThenFailedIsAReturn(t *testing.T) {
	t.Parallel()
	b, _ := setupStripe(t, fakebank.Faults{})
	b.r.ReturnWatch = time.Hour
	ctx := context.Background()
	insertStripeSettlement(t, b, "stripe-ret-1", 2500)
	out, err := b.r.Send(ctx, "stripe-ret-1", nil)
	if err != nil || out.State != settlement.Confirmed {
		t.Fatalf("send: %+v, %v; want confirmed at once (paid)", out, err)
	}
	payID := resolvertest.ReadRow(t, b.db, "stripe-ret-1").PaymentID
	if payID == nil {
		t.Fatal("confirmed without the payout id")
	}
	if err := b.bank.Return(*payID, ""); err != nil {
		t.Fatal(err)
	}
	if p, err := b.r.Bank.(bankclient.IDLookup).StatusByID(ctx, *payID); err != nil || p.Status != bankclient.StatusFailed {
		t.Fatalf("Stripe's word on the payout: %+v, %v; want failed", p, err)
	}
	out, err = b.r.Resolve(ctx, "stripe-ret-1", nil)
	if err != nil || out.State != settlement.Returned || out.FlagReason != "" {
		t.Fatalf("watch check after paid → failed: %+v, %v; want returned", out, err)
	}
	if got := bookedMovements(t, b, "stripe-ret-1"); got["payout"] != 1 || got["reversal"] != 1 {
		t.Errorf("movements %v, want one payout and one reversal", got)
	}
}

// TestStripeBankReportRechecksByID: a payout paid, then returned at Stripe
// before the return watch saw it, is a recheck candidate of the
// ledger-vs-bank report; Stripe cannot be asked by idempotency key, so the
// report asks by the payout id (it failed the whole report before, seen
// in the two-bank demo) and shows the settlement as a discrepancy.
func TestStripeBankReportRechecksByID(t *testing.T) {
	t.Parallel()
	b, _ := setupStripe(t, fakebank.Faults{})
	ctx := context.Background()
	insertStripeSettlement(t, b, "stripe-rep-1", 2500)
	out, err := b.r.Send(ctx, "stripe-rep-1", nil)
	if err != nil || out.State != settlement.Confirmed {
		t.Fatalf("send: %+v, %v; want confirmed at once (paid)", out, err)
	}
	payID := resolvertest.ReadRow(t, b.db, "stripe-rep-1").PaymentID
	if payID == nil {
		t.Fatal("confirmed without the payout id")
	}
	if err := b.bank.Return(*payID, ""); err != nil {
		t.Fatal(err)
	}
	rep := &audit.BankReport{}
	counts, err := (&audit.BankReporter{DB: b.db.Pool, Bank: b.r.Bank}).Run(ctx, rep)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if counts.Rechecked != 1 || counts.Discrepancies() != 1 || counts.ByClass[audit.ClassMatched] != 0 {
		t.Errorf("report %+v, want the confirmed settlement rechecked by payout id and shown as a discrepancy", counts)
	}
}
