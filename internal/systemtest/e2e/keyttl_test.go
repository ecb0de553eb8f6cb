package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/reconcile"
)

// TestKeyTTLNeverResends: the bank's answer to the POST is lost, so the
// settlement is uncertain; the bank forgets the key (after 1.5 s) before the
// first status check (after 3 s). The status API then answers 404 for a key
// first used longer ago than --bank-key-ttl (1 s), so the engine must not
// resend: the settlement waits, uncertain, flagged needs_investigation, and
// the bank holds one payment for it.
func TestKeyTTLNeverResends(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := startBank(t, 3, fakebank.Faults{DropResponseRate: 1, SettleDelayMS: 60_000, KeyTTLMS: 1500})
	flags := append(workerFlags(b.url), "--bank-key-ttl", "1s", "--check-interval", "3s", "--max-check-interval", "3s")
	w := startWorker(t, "w", db.URL, nil, flags...)
	ev := intake.Event{SettlementID: "ttl-1", AccountID: "acc", AmountCents: 777, Currency: "EUR", Beneficiary: "bene"}
	if code, err := post(w.URL(), ev); err != nil || code != http.StatusCreated {
		t.Fatalf("post = %d, %v", code, err)
	}
	ctx := context.Background()
	waitFor(t, "settlement uncertain", func() bool {
		var st string
		_ = db.Pool.QueryRow(ctx, `SELECT state FROM settlements WHERE settlement_id = $1`, ev.SettlementID).Scan(&st)
		return st == "uncertain"
	})
	if got := b.Stats().Payments; got != 1 {
		t.Fatalf("bank holds %d payments, want 1", got)
	}

	waitFor(t, "settlement flagged", func() bool {
		var flagged bool
		_ = db.Pool.QueryRow(ctx, `SELECT needs_investigation FROM settlements WHERE settlement_id = $1`, ev.SettlementID).Scan(&flagged)
		return flagged
	})
	var (
		state, reason string
		sends         int
		next          *time.Time
		movements     int
	)
	if err := db.Pool.QueryRow(ctx, `SELECT state, investigation_reason, send_attempts, next_check_at,
		(SELECT count(*) FROM ledger_movements) FROM settlements WHERE settlement_id = $1`, ev.SettlementID).
		Scan(&state, &reason, &sends, &next, &movements); err != nil {
		t.Fatal(err)
	}
	if state != "uncertain" || reason != "bank_forgot_key" || sends != 1 || next != nil || movements != 0 {
		t.Errorf("settlement: state %s, reason %q, %d sends, next check %v, %d movements", state, reason, sends, next, movements)
	}
	if st := b.Stats(); st.Payments != 1 || st.MaxExecutionsPerKey != 1 {
		t.Errorf("the engine resent after the key TTL: bank %+v", st)
	}
	// The bank did forget the key.
	client, err := settle.New(b.url, bankclient.Options{Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.StatusByKey(ctx, bankclient.KeyFor(ev.SettlementID)); !bankclient.IsNotFound(err) {
		t.Errorf("bank status by key = %v, want not found", err)
	}
	// A redelivery of the event changes nothing.
	if code, err := post(w.URL(), ev); err != nil || code != http.StatusOK {
		t.Fatalf("redelivery = %d, %v", code, err)
	}
	if st := b.Stats(); st.Payments != 1 {
		t.Errorf("bank %+v after redelivery", st)
	}
}

// waitFor waits until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	settletest.Wait(t, what, func() (bool, string) { return cond(), "not yet" })
}

// TestKeyTTLStripeSearchesNeverResends is the key-TTL test through the
// Stripe connector: the answer to the payout is lost and the first check
// comes after --bank-key-ttl, when a replay could pay twice. Stripe cannot
// be asked by key, so the engine searches the payout list, finds the
// payout by its metadata reference, learns its id and follows it by id:
// one POST, one payout. A payout that never reached the bank is not in the
// list: flagged, never resent.
func TestKeyTTLStripeSearchesNeverResends(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		faults fakebank.Faults
		found  bool
	}{
		{"lost answer", fakebank.Faults{DropResponseRate: 1, SettleDelayMS: 60_000, KeyTTLMS: 1500}, true},
		{"never arrived", fakebank.Faults{FailBeforeRate: 1, SettleDelayMS: 60_000, KeyTTLMS: 1500}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			b := startBankAs(t, 3, tc.faults, "stripe")
			flags := append(workerFlags(b.url), "--bank", "stripe", "--bank-attempts", "1",
				"--bank-key-ttl", "1s", "--check-interval", "3s", "--max-check-interval", "3s")
			w := startWorker(t, "w", db.URL, nil, flags...)
			ev := intake.Event{SettlementID: "ttl-stripe-1", AccountID: "acc", AmountCents: 777, Currency: "EUR", Beneficiary: "ba_1TTL"}
			if code, err := post(w.URL(), ev); err != nil || code != http.StatusCreated {
				t.Fatalf("post = %d, %v", code, err)
			}
			ctx := context.Background()
			var state, reason string
			var paymentID *string
			waitFor(t, "the first check after the key TTL", func() bool {
				_ = db.Pool.QueryRow(ctx, `SELECT state, coalesce(investigation_reason, ''), bank_payment_id FROM settlements WHERE settlement_id = $1`,
					ev.SettlementID).Scan(&state, &reason, &paymentID)
				if tc.found {
					return paymentID != nil
				}
				return reason != ""
			})
			if tc.found && state != "sent" {
				t.Errorf("found in the list: state %s, want sent (the payout is in transit)", state)
			}
			if !tc.found && (state != "uncertain" || reason != reconcile.ReasonNotInList) {
				t.Errorf("not in the list: state %s flagged %q, want uncertain flagged %s", state, reason, reconcile.ReasonNotInList)
			}
			var posts int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM bank_attempts WHERE settlement_id = $1 AND op IN ('send', 'replay')`, ev.SettlementID).Scan(&posts); err != nil {
				t.Fatal(err)
			}
			if st := b.Stats(); posts != 1 || st.MaxExecutionsPerKey > 1 || st.MaxPaymentsPerReference > 1 || b.posts.Load() != 1 {
				t.Errorf("%d payout requests recorded, %d received, bank %+v: want one", posts, b.posts.Load(), st)
			}
		})
	}
}
