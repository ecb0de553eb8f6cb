package fakebank

import (
	"fmt"
	"time"

	"github.com/settle/settle/bankclient"
)

// outcomeKind is what the bank decided about a payment request.
type outcomeKind int

const (
	outcomeCreated  outcomeKind = iota // a new payment: 201
	outcomeReplayed                    // same key, same body: 200, the stored payment
	outcomeRejected                    // definitive rejection, now or earlier: 422
	outcomeKeyReuse                    // same key, another body: 422
)

// outcome is the decision about one payment request.
type outcome struct {
	kind     outcomeKind
	payment  bankclient.Payment // created or replayed
	seq      int64              // the payment's sequence number, 0 without one
	reason   string             // rejected
	replayed bool               // answered from a stored outcome
	version  uint64             // books version to be durable before answering
}

// Limits of a payment request's text fields, so that memory per payment is
// bounded.
const (
	maxKeyLen   = 255
	maxFieldLen = 255
)

// validKey reports whether key is an acceptable idempotency key: 1 to 255
// printable ASCII characters other than space and '/'.
func validKey(key string) bool {
	if key == "" || len(key) > maxKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c <= ' ' || c > '~' || c == '/' {
			return false
		}
	}
	return true
}

// invalidReason returns why the bank refuses req definitively, or "" when
// it is acceptable. Such a refusal is pinned to the key like any rejection.
func invalidReason(req bankclient.PaymentRequest) string {
	switch {
	case req.AmountCents <= 0:
		return fmt.Sprintf("invalid_amount: amount_cents must be a positive integer, got %d", req.AmountCents)
	case !validCurrency(req.Currency):
		return fmt.Sprintf("invalid_currency: currency must be three upper-case letters (ISO 4217), got %q", req.Currency)
	case req.DebtorAccount == "" || len(req.DebtorAccount) > maxFieldLen:
		return fmt.Sprintf("invalid_debtor_account: debtor_account must have 1 to %d bytes", maxFieldLen)
	case req.CreditorAccount == "" || len(req.CreditorAccount) > maxFieldLen:
		return fmt.Sprintf("invalid_creditor_account: creditor_account must have 1 to %d bytes", maxFieldLen)
	case req.Reference == "" || len(req.Reference) > maxFieldLen:
		return fmt.Sprintf("invalid_reference: reference must have 1 to %d bytes", maxFieldLen)
	}
	return ""
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// Reasons the bank gives for the outcomes it draws at random.
const (
	reasonDeclined          = "declined: simulated by reject_rate"
	reasonSettlementFailure = "settlement_failed: simulated by settlement_failure_rate"
)

// submit decides a payment request under key and records the decision in
// the books. It draws the rejection and the settlement outcome of a new key
// from the seeded source, inside the books lock, so the draws follow the
// order in which requests are decided.
func (b *Bank) submit(key string, req bankclient.PaymentRequest) outcome {
	return b.submitParams(key, req, "")
}

// submitParams is submit for an API face whose requests carry params
// beyond req (see payment.Params): a replay must carry the same.
func (b *Bank) submitParams(key string, req bankclient.PaymentRequest, params string) outcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now().UTC()
	bk := b.books

	if e := bk.lookup(key, now); e != nil {
		if e.Request != req || e.Params != params {
			bk.keyReuseConflicts++
			b.version++
			return outcome{kind: outcomeKeyReuse, version: b.version}
		}
		bk.replays++
		b.version++
		if p := bk.paymentOf(e); p != nil {
			return outcome{kind: outcomeReplayed, payment: p.view(now), seq: p.Seq, replayed: true, version: b.version}
		}
		return outcome{kind: outcomeRejected, reason: e.RejectReason, replayed: true, version: b.version}
	}

	e := &keyEntry{Key: key, Request: req, Params: params, FirstSeen: now}
	if ttl := b.faults.KeyTTLMS; ttl > 0 {
		e.ExpiresAt = now.Add(time.Duration(ttl) * time.Millisecond)
	}
	reason := invalidReason(req)
	if reason == "" && b.chance(b.faults.RejectRate) {
		reason = reasonDeclined
	}
	if reason != "" {
		e.RejectReason = reason
		bk.keys[key] = e
		b.version++
		return outcome{kind: outcomeRejected, reason: reason, version: b.version}
	}

	p := b.newPayment(key, req, params, now)
	bk.addPayment(p, e)
	b.changed(p, now)
	b.version++
	return outcome{kind: outcomeCreated, payment: p.view(now), seq: p.Seq, version: b.version}
}

// newPayment makes the next payment of the books, drawing its settlement
// outcome (settlement_failure_rate, then return_rate) from the seeded
// source. The caller holds b.mu and adds it to the books.
func (b *Bank) newPayment(key string, req bankclient.PaymentRequest, params string, now time.Time) *payment {
	seq := int64(len(b.books.payments)) + 1
	p := &payment{
		Seq:            seq,
		ID:             paymentID(seq),
		IdempotencyKey: key,
		Request:        req,
		CreatedAt:      now,
		DueAt:          now.Add(time.Duration(b.faults.SettleDelayMS) * time.Millisecond),
		Outcome:        bankclient.StatusSettled,
		Params:         params,
	}
	if b.chance(b.faults.SettlementFailureRate) {
		p.Outcome, p.FailureReason = bankclient.StatusFailed, reasonSettlementFailure
	} else if b.chance(b.faults.ReturnRate) {
		// Settled, and back again return_after_ms later (an ACH or SEPA
		// return: the account was closed).
		p.ReturnAt = p.DueAt.Add(time.Duration(b.faults.ReturnAfterMS) * time.Millisecond)
		p.ReturnReason = DefaultReturnReason
	}
	return p
}

// byKey returns the payment the bank remembers under key.
func (b *Bank) byKey(key string) (bankclient.Payment, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now().UTC()
	e := b.books.lookup(key, now)
	if e == nil {
		return bankclient.Payment{}, false
	}
	p := b.books.paymentOf(e)
	if p == nil {
		return bankclient.Payment{}, false
	}
	return p.view(now), true
}

// statement returns one page of the statement.
func (b *Bank) statement(after string, limit int) (bankclient.StatementPage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.books.page(after, limit, b.now().UTC())
}

// returned is one page of the payments created at or after since that are
// returned now (GET /v1/returns).
func (b *Bank) returned(since time.Time, after string, limit int) (bankclient.StatementPage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.books.returnedPage(since, after, limit, b.now().UTC())
}
