package sim

import (
	"fmt"
	"time"

	"github.com/settle/settle/bankclient"
)

// Returns is the simulated bank's return profile (DESIGN.md section 15):
// a settled payment may come back later, as ACH and SEPA returns do.
type Returns struct {
	// Rate is the probability that a payment the bank settles comes back.
	Rate float64
	// Partial is the probability that a return brings back only a part of
	// the amount (a partial return, reported on statements only).
	Partial float64
	// AfterMax bounds the simulated time from settlement to the return;
	// each return draws in [0, AfterMax]. A return at once may come back
	// before the engine ever saw the payment settle.
	AfterMax time.Duration
}

// returnReasons are ISO 20022 return reason codes.
var returnReasons = []string{"AC04", "AC01", "MD06", "AM04", "MS03"}

// SetReturns replaces the return profile; it applies to payments executed
// from now on.
func (b *Bank) SetReturns(r Returns) {
	b.mu.Lock()
	b.returns = r
	b.mu.Unlock()
}

// setReturn makes p come back at at, amount of it, for reason.
func (b *Bank) setReturn(p *simPayment, at time.Time, amount int64, reason string) {
	p.returnAt, p.returnAmount, p.returnReason = at, amount, reason
	kind := "in full"
	if amount != p.req.AmountCents {
		kind = fmt.Sprintf("in part (%d of %d)", amount, p.req.AmountCents)
	}
	b.logf("%s (%s) will come back %s at +%s: %s", p.id, p.req.Reference, kind, at.Sub(Epoch), reason)
}

// ReturnNow makes the settled payment id come back now, amount of it (0:
// all of it). It fails when the bank holds no such settled payment.
func (b *Bank) ReturnNow(id string, amount int64, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	for _, p := range b.payments {
		if p.id != id {
			continue
		}
		if p.outcome != bankclient.StatusSettled || now.Before(p.dueAt) || p.returnedAt(now) {
			return fmt.Errorf("payment %s has not settled or came back already", id)
		}
		if amount == 0 {
			amount = p.req.AmountCents
		}
		b.setReturn(p, now, amount, reason)
		return nil
	}
	return fmt.Errorf("no payment %s", id)
}

// returnedAt reports whether p has come back (in full or in part) at now.
func (p *simPayment) returnedAt(now time.Time) bool {
	return !p.returnAt.IsZero() && !now.Before(p.returnAt) && !now.Before(p.dueAt)
}

// report returns the payment as the bank's API reports it at now, the way
// that kind of bank reports a return in full: returned (settle), failed
// after it was paid (Stripe), or not at all (UK Open Banking: statements
// only). A partial return never shows in the API.
func (b *Bank) report(p *simPayment, now time.Time) bankclient.Payment {
	v := p.view(now)
	if v.Status != bankclient.StatusReturned {
		return v
	}
	switch {
	case b.cfg.Caps.ReturnsOnStatementsOnly:
		v.Status, v.UpdatedAt, v.FailureReason = bankclient.StatusSettled, p.dueAt, ""
	case b.cfg.Caps.FailedAfterSettledIsReturn:
		v.Status = bankclient.StatusFailed
	}
	return v
}

// ReturnEntry is a return as a statement books it: money coming back for
// a payment.
type ReturnEntry struct {
	PaymentID, Reference, Currency, Reason string
	// Amount is what came back: the payment's amount, or less.
	Amount int64
	// Full is true when all of the payment came back.
	Full bool
	At   time.Time
}

// ReturnsBooked returns every return that has happened by now, in the
// order of the payments.
func (b *Bank) ReturnsBooked() []ReturnEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	var out []ReturnEntry
	for _, p := range b.payments {
		if !p.returnedAt(now) {
			continue
		}
		out = append(out, ReturnEntry{PaymentID: p.id, Reference: p.req.Reference, Currency: p.req.Currency,
			Reason: p.returnReason, Amount: p.returnAmount, Full: p.returnAmount == p.req.AmountCents, At: p.returnAt})
	}
	return out
}

// PaymentsBooked returns every payment that has settled by now (returned
// ones included: the payout was booked before the money came back) as the
// statement books it, in order.
func (b *Bank) PaymentsBooked() []ReturnEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	var out []ReturnEntry
	for _, p := range b.payments {
		if p.outcome != bankclient.StatusSettled || now.Before(p.dueAt) {
			continue
		}
		out = append(out, ReturnEntry{PaymentID: p.id, Reference: p.req.Reference, Currency: p.req.Currency,
			Amount: p.req.AmountCents, Full: true, At: p.dueAt})
	}
	return out
}

// LastReturnAt returns when the last return the bank has planned happens
// (zero when none is).
func (b *Bank) LastReturnAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var last time.Time
	for _, p := range b.payments {
		if p.returnAt.After(last) {
			last = p.returnAt
		}
	}
	return last
}
