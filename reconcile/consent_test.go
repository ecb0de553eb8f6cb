package reconcile

import (
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/settlement"
)

func consentAnswer(st bankclient.ConsentStatus) Answer {
	return Answer{Kind: AnswerConsent, Consent: bankclient.Consent{ID: "c1", Status: st, BankStatus: string(st)}}
}

// TestDecideConsent is the consent step's table: only an authorised consent
// lets the payment go; nothing at this step ever makes a settlement
// uncertain (no payment was sent) or writes a movement.
func TestDecideConsent(t *testing.T) {
	t.Parallel()
	p := policy
	p.ConsentWait = time.Hour
	requested := t0
	now := t0.Add(10 * time.Minute)
	f := facts0(settlement.Pending, time.Time{})
	f.ConsentID, f.ConsentRequestedAt, f.CheckAttempts = "c1", requested, 2
	later := now.Add(4 * time.Second) // checkDelay(2) with a 1 s interval

	expiring := consentAnswer(bankclient.ConsentAwaiting)
	expiring.Consent.ExpiresAt = now

	tests := []struct {
		name string
		f    Facts
		now  time.Time
		a    Answer
		want Decision
	}{
		{"authorised pays now", f, now, consentAnswer(bankclient.ConsentAuthorised), Decision{To: settlement.Pending, Pay: true, Definitive: true}},
		{"awaiting keeps it pending, asked later", f, now, consentAnswer(bankclient.ConsentAwaiting), Decision{To: settlement.Pending, NextCheckAt: later}},
		{"awaiting past the consent wait is flagged", f, requested.Add(time.Hour), consentAnswer(bankclient.ConsentAwaiting), Decision{To: settlement.Pending, Flag: ReasonConsentExpired}},
		{"awaiting past the bank's expiry is flagged", f, now, expiring, Decision{To: settlement.Pending, Flag: ReasonConsentExpired}},
		{"rejected fails it", f, now, consentAnswer(bankclient.ConsentRejected), Decision{To: settlement.Failed, Definitive: true}},
		{"consumed without our payment is flagged", f, now, consentAnswer(bankclient.ConsentConsumed), Decision{To: settlement.Pending, Flag: ReasonConsentConsumed}},
		{"unknown status is not definitive", f, now, consentAnswer(bankclient.ConsentUnknown), Decision{To: settlement.Pending, NextCheckAt: later}},
		{"refused consent request fails it", f, now, Answer{Kind: AnswerRejected, HTTPStatus: 400}, Decision{To: settlement.Failed, Definitive: true}},
		{"another body under the consent key is flagged", f, now, Answer{Kind: AnswerKeyReuse}, Decision{To: settlement.Pending, Flag: ReasonKeyReuse}},
		{"a lost consent is flagged", f, now, Answer{Kind: AnswerNotFound}, Decision{To: settlement.Pending, Flag: ReasonConsentLost}},
		{"ambiguous keeps it pending", f, now, Answer{Kind: AnswerAmbiguous, HTTPStatus: 502}, Decision{To: settlement.Pending, NextCheckAt: later}},
		{"unauthorized is never a failure", f, now, Answer{Kind: AnswerUnauthorized, HTTPStatus: 401}, Decision{To: settlement.Pending, NextCheckAt: later}},
		{"429 waits as long as asked", f, now, Answer{Kind: AnswerAmbiguous, HTTPStatus: http.StatusTooManyRequests, RetryAfter: time.Minute}, Decision{To: settlement.Pending, NextCheckAt: now.Add(time.Minute)}},
	}
	// At a bank whose payments are made with the account holder's token,
	// authorised at the bank is not enough: the token must have come.
	pa := p
	pa.Bank.Consent, pa.Bank.Authorisation = true, true
	granted := f
	granted.Granted = true
	authTests := []struct {
		name string
		f    Facts
		now  time.Time
		want Decision
	}{
		{"authorised without the token waits", f, now, Decision{To: settlement.Pending, NextCheckAt: later}},
		{"authorised without the token past the consent wait is flagged", f, requested.Add(time.Hour), Decision{To: settlement.Pending, Flag: ReasonConsentExpired}},
		{"authorised with the token pays now", granted, now, Decision{To: settlement.Pending, Pay: true, Definitive: true}},
	}
	for _, tt := range authTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := DecideConsent(tt.f, pa, tt.now, consentAnswer(bankclient.ConsentAuthorised))
			if got.Reason == "" {
				t.Error("decision without a reason")
			}
			got.Reason = ""
			if got != tt.want {
				t.Errorf("DecideConsent(%s) = %+v, want %+v", tt.name, got, tt.want)
			}
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := DecideConsent(tt.f, p, tt.now, tt.a)
			if got.Reason == "" {
				t.Error("decision without a reason")
			}
			got.Reason = ""
			if got != tt.want {
				t.Errorf("DecideConsent(%s) = %+v, want %+v", tt.name, got, tt.want)
			}
		})
	}
}

// TestConsentPending: only a pending settlement never attempted, at a bank
// that needs consents, whose consent is not yet authorised, is at the
// consent step.
func TestConsentPending(t *testing.T) {
	t.Parallel()
	p := policy
	p.Bank.Consent = true
	f := facts0(settlement.Pending, time.Time{})
	if !f.consentPending(p) {
		t.Error("a pending settlement never attempted is not at the consent step")
	}
	pa := p
	pa.Bank.Authorisation = true
	fa := f
	fa.ConsentStatus = bankclient.ConsentAuthorised
	if fa.consentPending(p) || !fa.consentPending(pa) {
		t.Error("an authorised consent is at the consent step only while the account holder's token is not kept")
	}
	if fa.Granted = true; fa.consentPending(pa) {
		t.Error("an authorised consent with the token kept is still at the consent step")
	}
	authorised := f
	authorised.ConsentStatus = bankclient.ConsentAuthorised
	attempted := facts0(settlement.Pending, t0)
	sent := facts0(settlement.Sent, t0)
	noConsent := policy
	for name, c := range map[string]struct {
		f Facts
		p Policy
	}{"authorised": {authorised, p}, "attempted": {attempted, p}, "sent": {sent, p}, "bank without consents": {f, noConsent}} {
		if c.f.consentPending(c.p) {
			t.Errorf("%s: at the consent step, want not", name)
		}
	}
}
