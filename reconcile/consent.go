package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/settlement"
)

// The consent step (DESIGN.md section 13): at a bank whose payments need a
// consent first (Capabilities.Consent, UK Open Banking), a pending
// settlement never attempted asks for its consent under its own stable key
// (bankclient.ConsentKeyFor), stores the consent's id the moment an answer
// names it, and asks after it by that id, ever less often, until the
// customer authorises it; only then is the payment claimed and POSTed under
// the settlement's key, carrying that consent. A consent moves no money, so
// asking for it again under the same key is always safe; the rules of the
// payment (the first-attempt commit before its POST, never a new key) are
// untouched.

// AnswerConsent: the bank holds the settlement's consent (Answer.Consent).
const AnswerConsent AnswerKind = "consent"

// Investigation reasons of the consent step.
const (
	// ReasonConsentExpired: the customer never authorised the consent
	// within the consent wait (or before the bank's expiry): the payment
	// was never sent; a human decides whether to ask again.
	ReasonConsentExpired = "consent_expired"
	// ReasonConsentConsumed: the bank says a payment was made under the
	// consent, but settle never sent one.
	ReasonConsentConsumed = "consent_consumed_elsewhere"
	// ReasonConsentLost: the bank no longer knows the consent it created.
	ReasonConsentLost = "consent_lost"
)

// DefaultConsentWait is how long a consent may wait for the customer's
// authorisation before the settlement is flagged.
const DefaultConsentWait = 24 * time.Hour

// ClassifyConsent turns the result of Consenter.CreateConsent or
// ConsentByID into an Answer; ok as for ClassifySend.
func ClassifyConsent(c bankclient.Consent, err error) (Answer, bool) {
	if err == nil {
		return Answer{Kind: AnswerConsent, Consent: c}, true
	}
	return classifyErr(err)
}

// consentPending reports whether a settlement is at the consent step: a
// bank that needs consents, pending, never attempted, its consent not yet
// known to be authorised.
func (f Facts) consentPending(p Policy) bool {
	return p.Bank.Consent && f.State == settlement.Pending && f.FirstAttemptAt.IsZero() &&
		(f.ConsentStatus != bankclient.ConsentAuthorised || f.needsGrant(p))
}

// consentExpired reports whether a consent still awaiting authorisation
// has waited too long: past the bank's own expiry, or past the consent
// wait since it was first asked for.
func (f Facts) consentExpired(p Policy, now time.Time, c bankclient.Consent) bool {
	if !c.ExpiresAt.IsZero() && !now.Before(c.ExpiresAt) {
		return true
	}
	if !f.ConsentExpiresAt.IsZero() && !now.Before(f.ConsentExpiresAt) {
		return true
	}
	requested := f.ConsentRequestedAt
	if requested.IsZero() {
		requested = now
	}
	return p.ConsentWait > 0 && now.Sub(requested) >= p.ConsentWait
}

// DecideConsent decides what the bank's answer about a settlement's consent
// means for a settlement at the consent step (pending, never attempted):
// authorised sends the payment now (Pay); awaiting authorisation keeps it
// pending, asked again later, each time a little later (the bank's fair
// usage), until the consent wait is over, then flags it; rejected fails it
// (no payment was ever sent); a consent consumed without our payment, or one
// the bank lost, or another body under the consent key, waits for a human;
// no definitive answer keeps it pending, asked again later.
func DecideConsent(f Facts, p Policy, now time.Time, a Answer) Decision {
	next := now.Add(max(p.checkDelay(f.CheckAttempts), a.RetryAfter))
	stay := func(reason string) Decision {
		return Decision{To: settlement.Pending, Reason: reason, NextCheckAt: next}
	}
	hold := func(flagReason, detail string) Decision {
		// Pending, not uncertain: no payment was ever sent.
		return Decision{To: settlement.Pending, Reason: detail, Flag: flagReason}
	}
	switch a.Kind {
	case AnswerConsent:
		c := a.Consent
		switch c.Status {
		case bankclient.ConsentAuthorised:
			if f.needsGrant(p) {
				// The payment is made with the account holder's token,
				// which their redirect brings (authorisation.go).
				if f.consentExpired(p, now, bankclient.Consent{}) {
					return hold(ReasonConsentExpired, fmt.Sprintf("consent %s is authorised at the bank, but the account holder's authorisation never brought settle their token (asked %s ago, consent wait %s): the payment was never sent", c.ID, now.Sub(f.ConsentRequestedAt).Round(time.Second), p.ConsentWait))
				}
				return stay("consent " + c.ID + " authorised at the bank: waiting for the account holder's redirect to bring their token")
			}
			return Decision{To: settlement.Pending, Reason: "consent " + c.ID + " authorised: sending the payment", Pay: true, Definitive: true}
		case bankclient.ConsentAwaiting:
			if f.consentExpired(p, now, c) {
				return hold(ReasonConsentExpired, fmt.Sprintf("consent %s still awaits the customer's authorisation (asked %s ago, consent wait %s): the payment was never sent", c.ID, now.Sub(f.ConsentRequestedAt).Round(time.Second), p.ConsentWait))
			}
			return stay("consent " + c.ID + " awaits the customer's authorisation")
		case bankclient.ConsentRejected:
			return Decision{To: settlement.Failed, Reason: fmt.Sprintf("bank rejected consent %s (%s): no payment was sent", c.ID, c.BankStatus), Definitive: true}
		case bankclient.ConsentConsumed:
			return hold(ReasonConsentConsumed, "bank says consent "+c.ID+" was consumed, but settle never sent a payment under it")
		default:
			return stay(fmt.Sprintf("consent %s in a status settle does not know (%q): asked again later", c.ID, c.BankStatus))
		}
	case AnswerRejected:
		return Decision{To: settlement.Failed, Reason: "bank refused the consent: " + a.Detail + ": no payment was sent", Definitive: true}
	case AnswerKeyReuse:
		return hold(ReasonKeyReuse, "bank holds another consent body under our consent key")
	case AnswerNotFound:
		return hold(ReasonConsentLost, "bank no longer knows consent "+f.ConsentID+", whose id it gave us")
	default: // ambiguous, unauthorized, rate limited
		d := stay("no definitive answer about the consent: " + string(a.Kind))
		if a.RateLimited() {
			d.Reason = "bank rate limit: consent asked again later"
		}
		return d
	}
}

// consent carries out the consent step of a settlement f at it (see
// Facts.consentPending): it asks the bank for the consent (under the consent
// key when no answer has named one yet, by its id after that) and records
// the answer. pay is true when the consent is authorised and the payment may
// be claimed now; the outcome then carries no decision of its own and hook
// was not run. Otherwise hook ran in the transaction that recorded the
// answer.
func (r *Resolver) consent(ctx context.Context, f facts, hook TxHook) (out Outcome, pay bool, err error) {
	if f.Flagged {
		// A human owns it: nothing is asked on our own.
		return Outcome{SettlementID: f.SettlementID, Action: ActionNone, State: f.State, FlagReason: f.FlagReason, Done: true}, false, nil
	}
	c, ok := r.Bank.(bankclient.Consenter)
	if !ok {
		return Outcome{}, false, fmt.Errorf("error sending settlement %s: %w: the bank needs a consent but its client cannot ask for one", f.SettlementID, bankclient.ErrUnsupported)
	}
	now := r.now()
	att := attempt{op: bankclient.OpConsent}
	if f.ConsentID != "" {
		att.op = bankclient.OpConsentStatus
	}
	// Recorded only while the settlement is still at the consent step.
	err = r.DB.QueryRow(ctx, `
		INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at)
		SELECT settlement_id, $2, $3, $4 FROM settlements
		WHERE settlement_id = $1 AND state = 'pending' AND first_attempt_at IS NULL
		RETURNING id`,
		f.SettlementID, att.op, bankclient.ConsentKeyFor(f.SettlementID), now).Scan(&att.id)
	if errors.Is(err, pgx.ErrNoRows) {
		r.log().LogAttrs(ctx, slog.LevelInfo, "consent: settlement no longer at the consent step",
			slog.String("settlement_id", f.SettlementID))
		return Outcome{SettlementID: f.SettlementID, Action: ActionNone, State: f.State, Done: true, LostRace: true}, false, nil
	}
	if err != nil {
		return Outcome{}, false, fmt.Errorf("error recording the consent request of settlement %s: %w", f.SettlementID, err)
	}

	var cons bankclient.Consent
	if att.op == bankclient.OpConsent {
		crash.Point(crash.ConsentBeforeBank)
		cons, err = c.CreateConsent(ctx, bankclient.ConsentKeyFor(f.SettlementID), f.request())
		crash.Point(crash.ConsentAfterBank)
	} else {
		cons, err = c.ConsentByID(ctx, f.ConsentID)
	}

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	ans, ok := ClassifyConsent(cons, err)
	att.answer, att.sent = ans, ok
	if !ok {
		r.finishAttempt(rctx, att)
		return Outcome{}, false, fmt.Errorf("error asking for the consent of settlement %s: %w", f.SettlementID, err)
	}
	d := DecideConsent(f.Facts, r.policy(), r.now(), ans)
	if d.Pay {
		hook = nil // the payment's answer completes the caller's work
	}
	out, err = r.apply(rctx, f, d, att, hook)
	if err != nil {
		return Outcome{}, false, err
	}
	if att.op == bankclient.OpConsent && !out.LostRace {
		crash.Point(crash.ConsentAfterCommit)
	}
	if r.policy().Bank.Authorisation && !out.LostRace && ans.Kind == AnswerConsent &&
		(ans.Consent.Status == bankclient.ConsentAwaiting || ans.Consent.Status == bankclient.ConsentAuthorised) {
		// The account holder's link, listed by the console.
		if err := r.ensureAuthorisation(rctx, f.SettlementID); err != nil {
			return Outcome{}, false, err
		}
	}
	out.Action = ActionSend
	return out, d.Pay && !out.LostRace, nil
}

// consentColumns are the values apply stores for an answer about a
// consent: its id (kept once known: the payment must carry the same one on
// every replay), its status, and when it was first asked for and expires.
func consentColumns(att attempt, now time.Time) (id, status *string, requested, expires *time.Time) {
	if att.op == bankclient.OpConsent {
		// The consent wait runs from the first request that had an answer,
		// whatever it was.
		requested = &now
	}
	if att.answer.Kind != AnswerConsent {
		return nil, nil, requested, nil
	}
	c := att.answer.Consent
	s := string(c.Status)
	if s == "" {
		s = string(bankclient.ConsentUnknown)
	}
	status = &s
	if c.ID != "" {
		id = &c.ID
	}
	if !c.ExpiresAt.IsZero() {
		expires = &c.ExpiresAt
	}
	return id, status, requested, expires
}
