package sim

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/reconcile"
)

// The customer of a bank whose payments need a consent first
// (Capabilities.Consent, UK Open Banking): each consent is decided a random
// while after it was created, up to consentDecideMax; consentRejectRate of
// them are rejected and consentAbandonRate never decided at all, so they
// outlast the engine's consent wait (consentWait) and the settlement ends
// flagged consent_expired. consentDecideMax exceeds consentWait, so some
// are authorised only after the engine gave up on them.
const (
	consentDecideMax   = 50 * time.Minute
	consentWait        = 40 * time.Minute
	consentRejectRate  = 0.1
	consentAbandonRate = 0.1
)

// simConsent is one consent in the bank's books. Like a payment, its status
// follows from the clock: AwaitingAuthorisation until decideAt (for ever
// when abandoned), then Authorised or Rejected; Consumed once a payment was
// made under it.
type simConsent struct {
	id        string
	key       string
	req       bankclient.PaymentRequest
	createdAt time.Time
	decideAt  time.Time
	rejected  bool
	abandoned bool
	payment   *simPayment
	// flow: the customer decides by opening the engine's link (Visit),
	// at authorisedAt or rejectedAt (Caps.Authorisation); otherwise at
	// decideAt on their own.
	flow                     bool
	authorisedAt, rejectedAt time.Time
}

// status returns the consent's status at now.
func (c *simConsent) status(now time.Time) bankclient.ConsentStatus {
	switch {
	case c.payment != nil:
		return bankclient.ConsentConsumed
	case c.flow && !c.rejectedAt.IsZero():
		return bankclient.ConsentRejected
	case c.flow && !c.authorisedAt.IsZero():
		return bankclient.ConsentAuthorised
	case c.flow:
		return bankclient.ConsentAwaiting
	case c.abandoned || now.Before(c.decideAt):
		return bankclient.ConsentAwaiting
	case c.rejected:
		return bankclient.ConsentRejected
	}
	return bankclient.ConsentAuthorised
}

// obieConsentCodes are the bank's own codes of the statuses (Open
// Banking's OBExternalConsentStatus1Code).
var obieConsentCodes = map[bankclient.ConsentStatus]string{
	bankclient.ConsentAwaiting:   "AwaitingAuthorisation",
	bankclient.ConsentAuthorised: "Authorised",
	bankclient.ConsentConsumed:   "Consumed",
	bankclient.ConsentRejected:   "Rejected",
}

func (c *simConsent) view(now time.Time, replayed bool) bankclient.Consent {
	st := c.status(now)
	return bankclient.Consent{ID: c.id, Status: st, BankStatus: obieConsentCodes[st], Replayed: replayed}
}

// consentKeyEntry is what the bank remembers of a consent key.
type consentKeyEntry struct {
	req       bankclient.PaymentRequest
	expiresAt time.Time // zero: never
	consent   *simConsent
}

// paymentPost is a payment POST that reached the bank at a consent bank,
// with the consent it named as the bank found it: the checker's evidence
// that a payment was asked for only under its settlement's authorised
// consent.
type paymentPost struct {
	key, reference, consentID string
	at                        time.Time
	// consentKey is the key of the consent named (empty: no such consent);
	// status its status when the POST arrived. (A replay, answered from the
	// payment key without looking at the consent, is not recorded.)
	consentKey string
	status     bankclient.ConsentStatus
	// noToken: the POST did not carry the account holder's live token of
	// the consent (the bank answered 401).
	noToken bool
}

var _ bankclient.Consenter = (*Bank)(nil)

// consentBody is the part of a request a consent is about: the payment,
// not the consent that carries it.
func consentBody(req bankclient.PaymentRequest) bankclient.PaymentRequest {
	req.ConsentID, req.Grant = "", ""
	return req
}

// CreateConsent implements bankclient.Consenter: idempotent under key
// within the bank's key TTL (a replay answers the same consent as it
// stands now), with the faults of a send.
func (b *Bank) CreateConsent(ctx context.Context, key string, req bankclient.PaymentRequest) (bankclient.Consent, error) {
	if !b.cfg.Caps.Consent {
		return bankclient.Consent{}, fmt.Errorf("error creating consent %s: %w", key, bankclient.ErrUnsupported)
	}
	return call(ctx, b, apiCall{
		op: bankclient.OpConsent, doing: "creating consent", what: "consent", subject: key,
		fail: func(f Faults) float64 { return f.FailBefore }, failed: "503 before processing",
		lost: func(f Faults) (int, bool) { return http.StatusGatewayTimeout, b.chance(f.DropResponse) },
	}, func(time.Time) (bankclient.Consent, error) { return b.createConsent(key, consentBody(req)) })
}

// createConsent decides one consent request that reached the bank.
func (b *Bank) createConsent(key string, req bankclient.PaymentRequest) (bankclient.Consent, error) {
	now := b.clock.Now()
	if e := b.consentKeys[key]; e != nil && (e.expiresAt.IsZero() || now.Before(e.expiresAt)) {
		if e.req != req {
			b.logf("consent %s: key reuse", key)
			return bankclient.Consent{}, bankclient.ErrKeyReuse
		}
		b.logf("consent %s: replayed %s (%s)", key, e.consent.id, e.consent.status(now))
		return e.consent.view(now, true), nil
	}
	c := &simConsent{
		id:        "cns_" + strconv.Itoa(len(b.consents)+1),
		key:       key,
		req:       req,
		createdAt: now,
		decideAt:  now.Add(b.draw(b.cfg.ConsentDecideMax)),
		rejected:  b.chance(b.cfg.ConsentReject),
		abandoned: b.chance(b.cfg.ConsentAbandon),
		flow:      b.cfg.Caps.Authorisation,
	}
	e := &consentKeyEntry{req: req, consent: c}
	if b.cfg.KeyTTL > 0 {
		e.expiresAt = now.Add(b.cfg.KeyTTL)
	}
	b.consents = append(b.consents, c)
	b.consentKeys[key] = e
	fate := map[bool]string{false: "authorised", true: "rejected"}[c.rejected]
	if c.abandoned {
		fate = "never decided"
	}
	b.logf("consent %s: created %s for %s, %s at +%s", key, c.id, req.Reference, fate, c.decideAt.Sub(Epoch))
	return c.view(now, false), nil
}

// ConsentByID implements bankclient.Consenter, with the faults of a status
// call. Consents are never forgotten.
func (b *Bank) ConsentByID(ctx context.Context, id string) (bankclient.Consent, error) {
	if !b.cfg.Caps.Consent {
		return bankclient.Consent{}, fmt.Errorf("error getting consent %s: %w", id, bankclient.ErrUnsupported)
	}
	return call(ctx, b, apiCall{
		op: bankclient.OpConsentStatus, doing: "getting consent", what: "consent by id", subject: id,
		fail: func(f Faults) float64 { return f.StatusError }, failed: "503",
	}, func(now time.Time) (bankclient.Consent, error) {
		c := b.consentByID(id)
		if c == nil {
			b.logf("consent by id %s: not found", id)
			return bankclient.Consent{}, bankclient.ErrPaymentNotFound
		}
		con := c.view(now, false)
		b.logf("consent by id %s: %s", id, con.Status)
		return con, nil
	})
}

// consentCount returns how many consents the bank created.
func (b *Bank) consentCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.consents)
}

func (b *Bank) consentByID(id string) *simConsent {
	for _, c := range b.consents {
		if c.id == id {
			return c
		}
	}
	return nil
}

// underConsent decides a new payment (its key unknown to the bank) at a
// consent bank, as the Open Banking bank does: the consent it names must
// exist (else a definitive refusal, UK.OBIE.Resource.NotFound), be
// Authorised (else 400 UK.OBIE.Resource.InvalidConsentStatus, which the
// connector reports as ambiguous: the consent may be consumed by our own
// payment under a forgotten key) and be for the same payment (else a
// definitive refusal, UK.OBIE.Resource.ConsentMismatch). It returns the
// consent the payment consumes.
func (b *Bank) underConsent(key string, req bankclient.PaymentRequest, now time.Time) (*simConsent, error) {
	c := b.consentByID(req.ConsentID)
	post := paymentPost{key: key, reference: req.Reference, consentID: req.ConsentID, at: now}
	if c != nil {
		post.consentKey, post.status = c.key, c.status(now)
	}
	b.posts = append(b.posts, post)
	switch {
	case c == nil:
		b.logf("send %s: no consent %q: refused", key, req.ConsentID)
		return nil, &bankclient.RejectedError{StatusCode: http.StatusBadRequest, Code: "UK.OBIE.Resource.NotFound", Reason: "no such consent"}
	case post.status != bankclient.ConsentAuthorised:
		b.logf("send %s: consent %s is %s, not Authorised", key, c.id, post.status)
		return nil, &bankclient.AmbiguousError{Op: bankclient.OpSend, StatusCode: http.StatusBadRequest, Attempts: 1,
			Err: fmt.Errorf("UK.OBIE.Resource.InvalidConsentStatus: %w", &bankclient.StatusError{StatusCode: http.StatusBadRequest})}
	case c.req != consentBody(req):
		b.logf("send %s: not the payment of consent %s: refused", key, c.id)
		return nil, &bankclient.RejectedError{StatusCode: http.StatusBadRequest, Code: "UK.OBIE.Resource.ConsentMismatch", Reason: "the Initiation is not the consent's"}
	}
	return c, nil
}

// consentChecks are the checks of the consent step (DESIGN.md section 13)
// at a bank whose payments need a consent, beside audit.CheckInvariants
// (which holds the money invariants for every caller). Each line is a
// violation:
//
//   - every payment POST that was not a replay named its settlement's
//     consent (the one whose id the engine stored), Authorised when the POST
//     arrived;
//   - every payment was made under its settlement's stored consent, and at
//     most one consent of a settlement was consumed;
//   - a settlement whose consent the engine saw rejected is failed, with no
//     payment;
//   - a settlement none of whose consents was ever authorised has no
//     payment and ends failed (rejected) or flagged consent_expired;
//   - no settlement left pending for the uncertain or sent states without a
//     payment POST of it recorded.
func (r *run) consentChecks(ctx context.Context) ([]string, error) {
	var v []string
	bad := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }
	type row struct {
		id, ref, state, consentID, consentStatus, flag string
		flagged, sendAttempt, leftPending              bool
	}
	rows, err := r.pool.Query(ctx, `
		SELECT s.settlement_id, coalesce(s.bank_reference, s.settlement_id), s.state,
		       coalesce(s.bank_consent_id, ''), coalesce(s.consent_status, ''),
		       coalesce(s.investigation_reason, ''), s.needs_investigation,
		       EXISTS (SELECT 1 FROM bank_attempts a WHERE a.settlement_id = s.settlement_id AND a.op = 'send'),
		       EXISTS (SELECT 1 FROM settlement_transitions t WHERE t.settlement_id = s.settlement_id AND t.to_state IN ('sent', 'uncertain'))
		FROM settlements s ORDER BY s.settlement_id`)
	if err != nil {
		return nil, fmt.Errorf("error reading settlements: %w", err)
	}
	settlements, err := pgx.CollectRows(rows, func(rw pgx.CollectableRow) (row, error) {
		var s row
		err := rw.Scan(&s.id, &s.ref, &s.state, &s.consentID, &s.consentStatus, &s.flag, &s.flagged, &s.sendAttempt, &s.leftPending)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("error reading settlements: %w", err)
	}

	b := r.bank
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	byKey := map[string][]*simConsent{}
	for _, c := range b.consents {
		byKey[c.key] = append(byKey[c.key], c)
	}
	stored := map[string]string{} // settlement id → its stored consent id
	for _, s := range settlements {
		stored[s.id] = s.consentID
	}
	idOfRef := map[string]string{}
	for _, s := range settlements {
		idOfRef[s.ref] = s.id
	}
	for _, p := range b.posts {
		id := idOfRef[p.reference]
		switch {
		case p.noToken:
			bad("%s: payment POST under key %s at +%s without the account holder's token of consent %s", id, p.key, p.at.Sub(Epoch), p.consentID)
		case p.consentID == "":
			bad("%s: payment POST under key %s at +%s named no consent", id, p.key, p.at.Sub(Epoch))
		case p.consentID != stored[id]:
			bad("%s: payment POST under key %s at +%s named consent %s, not the settlement's stored consent %q", id, p.key, p.at.Sub(Epoch), p.consentID, stored[id])
		case p.consentKey != bankclient.ConsentKeyFor(id):
			bad("%s: payment POST named consent %s, created under key %s, not the settlement's consent key", id, p.consentID, p.consentKey)
		case p.status != bankclient.ConsentAuthorised:
			bad("%s: payment POST under key %s at +%s under consent %s while it was %s, not Authorised", id, p.key, p.at.Sub(Epoch), p.consentID, p.status)
		}
	}
	for _, s := range settlements {
		cs := byKey[bankclient.ConsentKeyFor(s.id)]
		var pays []*simPayment
		consumed, authorised := 0, false
		for _, c := range cs {
			if c.payment != nil {
				consumed++
				pays = append(pays, c.payment)
				if c.id != s.consentID {
					bad("%s: payment %s made under consent %s, not the stored consent %q", s.id, c.payment.id, c.id, s.consentID)
				}
			}
			if st := c.status(now); st == bankclient.ConsentAuthorised || st == bankclient.ConsentConsumed {
				authorised = true
			}
		}
		for _, p := range b.payments {
			if p.req.Reference == s.ref && p.consent == nil {
				bad("%s: payment %s made under no consent", s.id, p.id)
			}
		}
		if consumed > 1 {
			bad("%s: %d consents consumed", s.id, consumed)
		}
		if s.consentStatus == string(bankclient.ConsentRejected) && (s.state != "failed" || len(pays) > 0) {
			bad("%s: the engine saw consent %s rejected, but it is %s with %d payment(s)", s.id, s.consentID, s.state, len(pays))
		}
		if len(cs) > 0 && !authorised {
			ok := s.state == "failed" || (s.state == "pending" && s.flagged && s.flag == reconcile.ReasonConsentExpired)
			if !ok {
				bad("%s: no consent of it was ever authorised, but it is %s (flag %q), not failed or flagged %s", s.id, s.state, s.flag, reconcile.ReasonConsentExpired)
			}
		}
		if s.leftPending && !s.sendAttempt {
			bad("%s: went to sent or uncertain without a payment POST claimed", s.id)
		}
	}
	return v, nil
}

// CreateConsent is Bank.CreateConsent through the actor's plan: a crash
// after the bank answered, or the context ending at the call.
func (b actorBank) CreateConsent(ctx context.Context, key string, req bankclient.PaymentRequest) (bankclient.Consent, error) {
	return b.consentCall(ctx, "bank consent", key, bankclient.OpConsent, func(ctx context.Context) (bankclient.Consent, error) {
		return b.bank.CreateConsent(ctx, key, req)
	})
}

// ConsentByID is Bank.ConsentByID through the actor's plan.
func (b actorBank) ConsentByID(ctx context.Context, id string) (bankclient.Consent, error) {
	return b.consentCall(ctx, "bank consent by id", id, bankclient.OpConsentStatus, func(ctx context.Context) (bankclient.Consent, error) {
		return b.bank.ConsentByID(ctx, id)
	})
}

// consentCall runs one consent call (about subject) as the actor's plan
// says; with the "consent-misread" plant, a consent awaiting authorisation
// is reported authorised, as a connector that mapped the bank's codes
// wrongly would.
func (b actorBank) consentCall(ctx context.Context, what, subject, op string, call func(context.Context) (bankclient.Consent, error)) (bankclient.Consent, error) {
	if err := b.a.op(what); err != nil {
		return bankclient.Consent{}, fmt.Errorf("error asking for consent %s: %w", subject, err)
	}
	n := b.a.bankCalls
	b.a.bankCalls++
	if n == b.a.crashAfterBank {
		_, _ = call(ctx)
		b.a.crashed = true
		b.a.note("crashed after %s %d returned", what, n)
		return bankclient.Consent{}, fmt.Errorf("error asking for consent %s: %w", subject, errCrashed)
	}
	if n == b.a.cancelAt {
		b.a.note("context ended at %s (mode %d)", what, b.a.cancelMode)
		switch b.a.cancelMode {
		case cancelBefore:
			b.a.cancel()
			return call(b.a.ctx)
		case cancelAfterExecuted:
			_, _ = call(ctx)
		}
		b.a.cancel()
		return bankclient.Consent{}, fmt.Errorf("error asking for consent %s: %w", subject,
			&bankclient.AmbiguousError{Op: op, Attempts: 1, Err: fmt.Errorf("%w (request in flight)", context.Canceled)})
	}
	c, err := call(ctx)
	if err == nil && b.a.plant == "consent-misread" && c.Status == bankclient.ConsentAwaiting {
		c.Status = bankclient.ConsentAuthorised
		b.a.note("planted: consent %s awaiting authorisation read as authorised", c.ID)
	}
	return c, err
}
