package fakebank

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/settle/settle/bankclient"
)

// payment is a payment in the books. Its status is not stored: it follows
// from the clock, CreatedAt, DueAt and the Outcome drawn at creation, so the
// payment progresses whether or not anyone asks about it.
type payment struct {
	Seq            int64                     `json:"seq"`
	ID             string                    `json:"id"`
	IdempotencyKey string                    `json:"idempotency_key"`
	Request        bankclient.PaymentRequest `json:"request"`
	CreatedAt      time.Time                 `json:"created_at"`
	// DueAt is when the payment reaches its Outcome; halfway there it is
	// processing.
	DueAt         time.Time         `json:"due_at"`
	Outcome       bankclient.Status `json:"outcome"`
	FailureReason string            `json:"failure_reason,omitempty"`
	// ReturnAt, when set, is when a settled payment came back (ACH and
	// SEPA returns): from then on it is returned, for ReturnReason (an ISO
	// 20022 return reason code such as AC04).
	ReturnAt     time.Time `json:"return_at,omitzero"`
	ReturnReason string    `json:"return_reason,omitempty"`
	// Params are the request's parameters beyond Request that an API face
	// carries (Stripe's description and metadata, URL-encoded; the obie
	// profile's request body, canonical JSON); empty in the settle profile.
	Params string `json:"params,omitempty"`
	// ConsentSeq is the consent the payment was made under (obie
	// profile); 0 without one.
	ConsentSeq int64 `json:"consent_seq,omitempty"`
}

// settledAt reports whether the payment had settled by now (returned
// since or not).
func (p *payment) settledAt(now time.Time) bool {
	return p.Outcome == bankclient.StatusSettled && !now.Before(p.DueAt)
}

// returnedAt reports whether the payment had come back by now.
func (p *payment) returnedAt(now time.Time) bool {
	return p.settledAt(now) && !p.ReturnAt.IsZero() && !now.Before(p.ReturnAt)
}

// history returns the payment as the bank reported it at each change of
// its status up to now, oldest first: its creation, halfway to its due
// time (processing), its due time (its outcome), its return. The last is
// its view at now.
func (p *payment) history(now time.Time) []bankclient.Payment {
	mid := p.CreatedAt.Add(p.DueAt.Sub(p.CreatedAt) / 2)
	at := []time.Time{p.CreatedAt, mid, p.DueAt, p.ReturnAt}
	slices.SortFunc(at, time.Time.Compare)
	var steps []bankclient.Payment
	for _, t := range at {
		if t.IsZero() || t.After(now) {
			continue
		}
		if v := p.view(t); len(steps) == 0 || steps[len(steps)-1].Status != v.Status {
			steps = append(steps, v)
		}
	}
	if v := p.view(now); len(steps) == 0 || steps[len(steps)-1].Status != v.Status {
		steps = append(steps, v)
	}
	return steps
}

// view returns the payment as the bank reports it at now.
func (p *payment) view(now time.Time) bankclient.Payment {
	status, updated := bankclient.StatusAccepted, p.CreatedAt
	mid := p.CreatedAt.Add(p.DueAt.Sub(p.CreatedAt) / 2)
	reason := ""
	switch {
	case p.returnedAt(now):
		status, updated, reason = bankclient.StatusReturned, p.ReturnAt, "returned: "+p.ReturnReason
	case !now.Before(p.DueAt):
		status, updated, reason = p.Outcome, p.DueAt, p.FailureReason
	case !now.Before(mid) && mid.After(p.CreatedAt):
		status, updated = bankclient.StatusProcessing, mid
	}
	return bankclient.Payment{
		ID:              p.ID,
		IdempotencyKey:  p.IdempotencyKey,
		Reference:       p.Request.Reference,
		Status:          status,
		AmountCents:     p.Request.AmountCents,
		Currency:        p.Request.Currency,
		DebtorAccount:   p.Request.DebtorAccount,
		CreditorAccount: p.Request.CreditorAccount,
		CreatedAt:       p.CreatedAt,
		UpdatedAt:       updated,
		FailureReason:   reason,
	}
}

// keyEntry is what the bank remembers about an idempotency key: the request
// first made with it and its definitive outcome, either a payment or a
// rejection.
type keyEntry struct {
	Key     string                    `json:"key"`
	Request bankclient.PaymentRequest `json:"request"`
	// Params are the payment's Params: a replay must carry the same.
	Params    string    `json:"params,omitempty"`
	FirstSeen time.Time `json:"first_seen"`
	// ExpiresAt is when the bank forgets the key; zero means never. It is
	// fixed when the key is first seen, from the key_ttl_ms of that moment.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// PaymentSeq is the payment created under the key; 0 when rejected.
	PaymentSeq   int64  `json:"payment_seq,omitempty"`
	RejectReason string `json:"reject_reason,omitempty"`
}

// forgotten reports whether the bank no longer remembers the key at now.
func (e *keyEntry) forgotten(now time.Time) bool {
	return !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt)
}

// books is the bank's state. It is not safe for concurrent use; Bank.mu
// guards it.
type books struct {
	payments []*payment // in creation order; payments[i].Seq == i+1
	keys     map[string]*keyEntry

	replays           int64
	keyReuseConflicts int64

	// Open Banking consents (the obie profile), in creation order
	// (consents[i].Seq == i+1), and their idempotency keys.
	consents                 []*consent
	consentKeys              map[string]*consentKey
	consentReplays           int64
	consentKeyReuseConflicts int64
	// The authorisation server's codes and tokens (obie), by hash.
	codes  map[string]*authCode
	tokens map[string]*issuedToken

	// Derived from payments; rebuilt on load.
	perKey       map[string]int64
	perReference map[string]int64
	maxPerKey    int64
	maxPerRef    int64
}

func newBooks() *books {
	return &books{
		keys:         map[string]*keyEntry{},
		consentKeys:  map[string]*consentKey{},
		codes:        map[string]*authCode{},
		tokens:       map[string]*issuedToken{},
		perKey:       map[string]int64{},
		perReference: map[string]int64{},
	}
}

// stats returns the counters of /admin/stats.
func (bk *books) stats() Stats {
	return Stats{
		Payments:                int64(len(bk.payments)),
		Replays:                 bk.replays,
		KeyReuseConflicts:       bk.keyReuseConflicts,
		MaxExecutionsPerKey:     bk.maxPerKey,
		MaxPaymentsPerReference: bk.maxPerRef,
	}
}

// lookup returns the entry the bank remembers for key at now, or nil.
// A forgotten entry is dropped.
func (bk *books) lookup(key string, now time.Time) *keyEntry {
	e := bk.keys[key]
	if e == nil {
		return nil
	}
	if e.forgotten(now) {
		delete(bk.keys, key)
		return nil
	}
	return e
}

// paymentOf returns the payment an entry points at, or nil for a rejection.
func (bk *books) paymentOf(e *keyEntry) *payment {
	if e.PaymentSeq <= 0 || e.PaymentSeq > int64(len(bk.payments)) {
		return nil
	}
	return bk.payments[e.PaymentSeq-1]
}

// addPayment appends a payment and remembers its key.
func (bk *books) addPayment(p *payment, e *keyEntry) {
	bk.payments = append(bk.payments, p)
	e.PaymentSeq = p.Seq
	bk.keys[e.Key] = e
	bk.count(p)
}

// count updates the derived per-key and per-reference counters.
func (bk *books) count(p *payment) {
	bk.perKey[p.IdempotencyKey]++
	bk.maxPerKey = max(bk.maxPerKey, bk.perKey[p.IdempotencyKey])
	bk.perReference[p.Request.Reference]++
	bk.maxPerRef = max(bk.maxPerRef, bk.perReference[p.Request.Reference])
}

// paymentID is the identifier of the payment with sequence number seq.
func paymentID(seq int64) string {
	return fmt.Sprintf("pay_%012d", seq)
}

// page returns up to limit payments created after the cursor, and the
// cursor of the next page ("" when no payment follows).
// cursor is the position in the books a page's cursor names (0 for the
// empty cursor).
func (bk *books) cursor(after string) (int64, error) {
	if after == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(after, 10, 64)
	if err != nil || n < 0 || n > int64(len(bk.payments)) {
		return 0, fmt.Errorf("unknown cursor %q", after)
	}
	return n, nil
}

// returnedPage is one page of the payments created at or after since
// that are returned at now, after the cursor (a position in the books, as
// page's): the next cursor is where the scan stopped.
func (bk *books) returnedPage(since time.Time, after string, limit int, now time.Time) (bankclient.StatementPage, error) {
	start, err := bk.cursor(after)
	if err != nil {
		return bankclient.StatementPage{}, err
	}
	pg := bankclient.StatementPage{Payments: []bankclient.Payment{}}
	for i := start; i < int64(len(bk.payments)); i++ {
		p := bk.payments[i]
		if p.CreatedAt.Before(since) || !p.returnedAt(now) {
			continue
		}
		if len(pg.Payments) == limit {
			pg.Next = strconv.FormatInt(i, 10)
			break
		}
		pg.Payments = append(pg.Payments, p.view(now))
	}
	return pg, nil
}

func (bk *books) page(after string, limit int, now time.Time) (bankclient.StatementPage, error) {
	start, err := bk.cursor(after)
	if err != nil {
		return bankclient.StatementPage{}, err
	}
	end := min(start+int64(limit), int64(len(bk.payments)))
	pg := bankclient.StatementPage{Payments: make([]bankclient.Payment, 0, end-start)}
	for _, p := range bk.payments[start:end] {
		pg.Payments = append(pg.Payments, p.view(now))
	}
	if end < int64(len(bk.payments)) {
		pg.Next = strconv.FormatInt(end, 10)
	}
	return pg, nil
}
