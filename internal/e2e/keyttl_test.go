package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/dbtest"
	"github.com/settle/settle/internal/settletest"
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
	b := startBank(t, 3, bankclient.Faults{DropResponseRate: 1, SettleDelayMS: 60_000, KeyTTLMS: 1500})
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
	client, err := bankclient.New(b.url, bankclient.Options{Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
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
