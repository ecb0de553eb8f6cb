package fakebank

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ConsentStatus is where a consent stands at the bank, in Open Banking's
// codes (OBExternalConsentStatus1Code).
type ConsentStatus string

// The consent statuses of Open Banking's payment initiation profile.
const (
	ConsentAwaitingAuthorisation ConsentStatus = "AwaitingAuthorisation"
	ConsentAuthorised            ConsentStatus = "Authorised"
	ConsentConsumed              ConsentStatus = "Consumed"
	ConsentRejected              ConsentStatus = "Rejected"
)

// consent is a consent to one payment in the books (Open Banking's
// domestic-payment-consents). Like a payment, its status is not stored: it
// follows from the clock, DecideAt, the Rejected decision drawn at creation
// and the payment made under it.
type consent struct {
	Seq            int64     `json:"seq"`
	ID             string    `json:"id"`
	IdempotencyKey string    `json:"idempotency_key"`
	CreatedAt      time.Time `json:"created_at"`
	// DecideAt is when the customer decides: from then on the consent is
	// Authorised, or Rejected when Rejected is set.
	DecideAt time.Time `json:"decide_at"`
	Rejected bool      `json:"rejected,omitempty"`
	// Manual is set when the account holder decides on the authorisation
	// page only (Options.ManualAuthorisation): DecideAt and Rejected are
	// then not used.
	Manual bool `json:"manual,omitempty"`
	// AuthorisedAt and RejectedAt are when the account holder approved
	// the consent on the authorisation page, or rejected it there or by
	// POST /admin/consents/{id}/reject; zero while they did not.
	AuthorisedAt time.Time `json:"authorised_at,omitzero"`
	RejectedAt   time.Time `json:"rejected_at,omitzero"`
	// Body is the canonical JSON of the consent request (Data and Risk):
	// a replay must carry the same, and a payment under the consent the
	// same Initiation and Risk.
	Body string `json:"body"`
	// PaymentSeq is the payment made under the consent (it is Consumed
	// since); 0 while none.
	PaymentSeq int64 `json:"payment_seq,omitempty"`
}

// statusAt returns the consent's status at now and when it last changed,
// given the books it lives in (for the time of its payment): Consumed once
// a payment was made under it; the account holder's decision on the
// authorisation page; else, unless the consent is Manual, the decision
// drawn at its creation from DecideAt on (the automatic account holder
// decided in their banking app: the page then hands out the code at once).
func (c *consent) statusAt(bk *books, now time.Time) (ConsentStatus, time.Time) {
	if c.PaymentSeq > 0 && c.PaymentSeq <= int64(len(bk.payments)) {
		return ConsentConsumed, bk.payments[c.PaymentSeq-1].CreatedAt
	}
	if !c.RejectedAt.IsZero() {
		return ConsentRejected, c.RejectedAt
	}
	if !c.AuthorisedAt.IsZero() {
		return ConsentAuthorised, c.AuthorisedAt
	}
	if c.Manual || now.Before(c.DecideAt) {
		return ConsentAwaitingAuthorisation, c.CreatedAt
	}
	if c.Rejected {
		return ConsentRejected, c.DecideAt
	}
	return ConsentAuthorised, c.DecideAt
}

// consentKey is what the bank remembers about a consent's idempotency key.
type consentKey struct {
	Key        string    `json:"key"`
	Body       string    `json:"body"`
	FirstSeen  time.Time `json:"first_seen"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	ConsentSeq int64     `json:"consent_seq"`
}

// consentID is the identifier of the consent with sequence number seq.
func consentID(seq int64) string { return fmt.Sprintf("cns_%012d", seq) }

// consentByID returns the consent with identifier id, or nil.
func (bk *books) consentByID(id string) *consent {
	s, ok := strings.CutPrefix(id, "cns_")
	if !ok {
		return nil
	}
	seq, err := strconv.ParseInt(s, 10, 64)
	if err != nil || seq < 1 || seq > int64(len(bk.consents)) || bk.consents[seq-1].ID != id {
		return nil
	}
	return bk.consents[seq-1]
}

// ConsentStats are the consent counters of GET /admin/stats (zero in the
// profiles without consents).
type ConsentStats struct {
	Consents                 int64 `json:"consents"`
	ConsentReplays           int64 `json:"consent_replays"`
	ConsentKeyReuseConflicts int64 `json:"consent_key_reuse_conflicts"`
}

// ConsentStats returns the consent counters.
func (b *Bank) ConsentStats() ConsentStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return ConsentStats{
		Consents:                 int64(len(b.books.consents)),
		ConsentReplays:           b.books.consentReplays,
		ConsentKeyReuseConflicts: b.books.consentKeyReuseConflicts,
	}
}

// keyExpiry is when a key first seen at now is forgotten: key_ttl_ms
// after, or def after when key_ttl_ms is 0 (zero def: never).
func keyExpiry(f int64, def time.Duration, now time.Time) time.Time {
	switch {
	case f > 0:
		return now.Add(time.Duration(f) * time.Millisecond)
	case def > 0:
		return now.Add(def)
	}
	return time.Time{}
}

// consentOutcome is the decision about one consent request.
type consentOutcome struct {
	seq      int64
	replayed bool
	keyReuse bool
	version  uint64
}

// createConsent decides a consent request under key whose canonical body
// is body. Within the key's window the same body is a replay of the
// consent created first and another body a conflict; past it, or for a
// new key, a consent is created, to be decided consent_delay_ms later
// (Rejected at consent_reject_rate, drawn now from the seeded source).
func (b *Bank) createConsent(key, body string, keyTTL time.Duration) consentOutcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now().UTC()
	bk := b.books
	if e := bk.consentKeys[key]; e != nil && (e.ExpiresAt.IsZero() || now.Before(e.ExpiresAt)) {
		b.version++
		if e.Body != body {
			bk.consentKeyReuseConflicts++
			return consentOutcome{keyReuse: true, version: b.version}
		}
		bk.consentReplays++
		return consentOutcome{seq: e.ConsentSeq, replayed: true, version: b.version}
	}
	seq := int64(len(bk.consents)) + 1
	c := &consent{
		Seq:            seq,
		ID:             consentID(seq),
		IdempotencyKey: key,
		CreatedAt:      now,
		DecideAt:       now.Add(time.Duration(b.faults.ConsentDelayMS) * time.Millisecond),
		Rejected:       b.chance(b.faults.ConsentRejectRate),
		Manual:         b.manualAuth,
		Body:           body,
	}
	bk.consents = append(bk.consents, c)
	bk.consentKeys[key] = &consentKey{Key: key, Body: body, FirstSeen: now, ExpiresAt: keyExpiry(b.faults.KeyTTLMS, keyTTL, now), ConsentSeq: seq}
	b.version++
	return consentOutcome{seq: seq, version: b.version}
}

// Errors of Bank.DecideConsent.
var (
	ErrNoSuchConsent  = errors.New("no such consent")
	ErrConsentDecided = errors.New("the consent is no longer awaiting authorisation")
)

// DecideConsent makes the customer decide the consent id now, as a bank's
// customer does when they authorise or reject it in their banking app:
// authorise or not. It is also POST /admin/consents/{id}/authorise and
// .../reject. An authorised consent still needs the authorisation page to
// be visited for the TPP to get its token (the page then hands out the
// code at once). A consent that was decided already is ErrConsentDecided.
func (b *Bank) DecideConsent(id string, authorise bool) error {
	b.mu.Lock()
	now := b.now().UTC()
	c := b.books.consentByID(id)
	if c == nil {
		b.mu.Unlock()
		return fmt.Errorf("consent %q: %w", id, ErrNoSuchConsent)
	}
	if st, _ := c.statusAt(b.books, now); st != ConsentAwaitingAuthorisation {
		b.mu.Unlock()
		return fmt.Errorf("consent %q is %s: %w", id, st, ErrConsentDecided)
	}
	c.DecideAt, c.Rejected = now, !authorise
	if authorise && c.Manual {
		c.AuthorisedAt = now
	}
	if !authorise {
		c.RejectedAt = now
	}
	b.version++
	v := b.version
	b.mu.Unlock()
	b.log.Info("fakebank: consent decided", "id", id, "authorised", authorise)
	return b.persist(v)
}

func (b *Bank) handleDecideConsent(authorise bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		err := b.DecideConsent(id, authorise)
		switch {
		case errors.Is(err, ErrNoSuchConsent):
			writeError(w, http.StatusNotFound, errorCodeNotFound, err.Error())
		case errors.Is(err, ErrConsentDecided):
			writeError(w, http.StatusConflict, "consent_decided", err.Error())
		case err != nil:
			b.log.Error("fakebank: error writing state", "error", err)
			writeError(w, http.StatusInternalServerError, errorCodeInternal, "could not record the decision")
		default:
			b.mu.Lock()
			st, at := b.books.consentByID(id).statusAt(b.books, b.now().UTC())
			b.mu.Unlock()
			writeJSON(w, http.StatusOK, map[string]string{"consent_id": id, "status": string(st), "status_update": at.Format(time.RFC3339)})
		}
	}
}
