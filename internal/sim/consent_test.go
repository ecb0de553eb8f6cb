package sim

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestConsentStep runs one settlement through the consent step of a bank
// whose payments need a consent (the fifth capability set), with each fate
// of its consent, the engine as shipped and with a bug planted:
//
//  1. s00 is delivered; Send asks for its consent, and the process dies
//     as the bank's answer comes back (crash after the bank call): the
//     consent exists, the engine knows no id.
//  2. Send again: the consent key replays the same consent, whose id is
//     stored; it awaits the customer.
//  3. The clock moves on; the recovery resolves until nothing is open.
//
// As shipped: a consent authorised (a minute later) is paid once and
// confirmed; one rejected fails with no payment; one never decided ends
// flagged consent_expired once the consent wait is over. The plants must be
// caught: "consent-misread" POSTs the payment while the consent still
// awaits authorisation (the bank answers InvalidConsentStatus, ambiguous);
// "consent-wait-forever" leaves the settlement pending for ever.
func TestConsentStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, plant string
		reject      float64
		abandon     float64
		ends        string // confirmed, failed, flagged, or caught: want, a violation naming it
		want        string
	}{
		{"authorised", "", 0, 0, "confirmed", ""},
		{"rejected", "", 1, 0, "failed", ""},
		{"never decided", "", 0, 1, "flagged", ""},
		// A consent misread as authorised is harmless at a bank whose
		// payments need the account holder's token: only their
		// authorisation brings it.
		{"authorised/consent-misread", "consent-misread", 0, 0, "confirmed", ""},
		{"authorised/grant-dropped", "grant-dropped", 0, 0, "caught", "without the account holder's token"},
		{"never decided/consent-wait-forever", "consent-wait-forever", 0, 1, "caught", "no consent of it was ever authorised, but it is pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			cfg := Config{Bank: "consent/by-id/current-replay", Plant: tc.plant}
			_, caps, err := cfg.capabilities()
			if err != nil {
				t.Fatal(err)
			}
			r := newRun(db.Pool, cfg, rand.New(rand.NewPCG(1, 1)), EngineKeyTTL, caps)
			r.bank.cfg.ConsentDecideMax, r.bank.cfg.ConsentReject, r.bank.cfg.ConsentAbandon = 0, tc.reject, tc.abandon
			r.genEvents(1)
			r.script(ctx, t, "deliver s00", func(a *actor, out *string) (func(context.Context), string) {
				return r.deliverFn(a, delivery{idx: 0}, out)
			}, nil)
			r.script(ctx, t, "send s00, crash after the bank created the consent", func(a *actor, out *string) (func(context.Context), string) {
				return r.resolverFn(a, 0, true, out)
			}, func(a *actor) { a.crashAfterBank = 0 })
			if len(r.bank.consents) != 1 {
				t.Fatalf("the bank holds %d consents, want 1", len(r.bank.consents))
			}
			// The customer decides a minute after the consent was created.
			r.bank.consents[0].decideAt = r.clock.Now().Add(time.Minute)
			r.script(ctx, t, "send s00 (the consent replayed, awaiting)", func(a *actor, out *string) (func(context.Context), string) {
				return r.resolverFn(a, 0, true, out)
			}, nil)
			res, err := r.finish(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(r.bank.consents); n != 1 {
				t.Errorf("the bank holds %d consents, want 1 (the consent key replays):\n%s", n, res.Report())
			}
			if tc.ends == "caught" {
				for _, v := range res.Violations {
					if strings.Contains(v, tc.want) {
						return
					}
				}
				t.Fatalf("checker missed the plant (want %q):\n%s", tc.want, res.Report())
			}
			if len(res.Violations) > 0 {
				t.Fatalf("violations:\n%s", res.Report())
			}
			got := map[bool]string{res.Stats.Confirmed == 1: "confirmed", res.Stats.Failed == 1: "failed", res.Stats.Flagged == 1: "flagged"}[true]
			if got != tc.ends {
				t.Errorf("ended %q, want %q:\n%s", got, tc.ends, res.Report())
			}
			wantPayments := map[string]int{"confirmed": 1}[tc.ends]
			if res.Stats.BankPayments != wantPayments {
				t.Errorf("the bank made %d payment(s), want %d:\n%s", res.Stats.BankPayments, wantPayments, res.Report())
			}
		})
	}
}
