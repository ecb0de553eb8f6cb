// Package reconcile owns what settle does with the bank's answers: the pure
// decision functions (given a settlement's state, its first attempt, the key
// TTL, the clock and the bank's answer: which transition, whether to write
// the ledger movement, whether to resend, whether to flag it for a human,
// when to look again) and the [Resolver] that carries them out against the
// database and the bank; and the operator's read side: the [Inspector]
// (report.go, inspect.go: summary, list, show, conflicts in read-only
// snapshots) and the streaming ledger-vs-bank [BankReporter] (bankreport.go).
//
// It must never change settlements.state except through statemachine, never
// write a ledger movement outside the transaction that moves the settlement
// to confirmed, never mark a settlement failed because the bank could not be
// reached, never send a payment under any key but the settlement's stable
// bank_key, and never resend once the key TTL has passed since the first
// attempt (DESIGN.md rules 5, 8, 9). It knows nothing about River: the jobs
// package adapts it.
package reconcile

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/settlement"
)

// AnswerKind classifies what the bank said to one call.
type AnswerKind string

// The kinds of answer. Payment carries the payment's status; the others
// carry none.
const (
	// AnswerPayment: the bank holds a payment under our key (send accepted
	// or replayed, or status by key found it).
	AnswerPayment AnswerKind = "payment"
	// AnswerNotFound: status by key answered 404, the bank never saw (or
	// forgot) the key.
	AnswerNotFound AnswerKind = "not_found"
	// AnswerRejected: a definitive refusal of the payment (send only).
	AnswerRejected AnswerKind = "rejected"
	// AnswerKeyReuse: the bank holds another body under our key (send only).
	AnswerKeyReuse AnswerKind = "key_reuse"
	// AnswerAmbiguous: no definitive answer (timeout, reset, 5xx, 429, …).
	AnswerAmbiguous AnswerKind = "ambiguous"
	// AnswerUnauthorized: the bank refused our credentials; says nothing
	// about the payment.
	AnswerUnauthorized AnswerKind = "unauthorized"
)

// Answer is the bank's answer to one call, stripped of transport details.
type Answer struct {
	Kind AnswerKind
	// Payment is set when Kind is AnswerPayment.
	Payment bankclient.Payment
	// Detail is a short description for logs and bank_attempts (never a
	// credential).
	Detail string
	// HTTPStatus is the HTTP status of the answer when known, else 0.
	HTTPStatus int
}

// ClassifySend turns the result of Bank.Send into an Answer. ok is false
// when err says nothing reached the bank (a local error or a context that
// ended before any request left): there is no answer to decide on.
func ClassifySend(res bankclient.SendResult, err error) (a Answer, ok bool) {
	if err == nil {
		return Answer{Kind: AnswerPayment, Payment: res.Payment}, true
	}
	return classifyErr(err)
}

// ClassifyStatus turns the result of Bank.StatusByKey into an Answer; ok as
// for ClassifySend.
func ClassifyStatus(p bankclient.Payment, err error) (a Answer, ok bool) {
	if err == nil {
		return Answer{Kind: AnswerPayment, Payment: p}, true
	}
	return classifyErr(err)
}

func classifyErr(err error) (Answer, bool) {
	a := Answer{Detail: err.Error()}
	var (
		ae *bankclient.AmbiguousError
		re *bankclient.RejectedError
	)
	switch {
	case errors.As(err, &ae):
		a.Kind, a.HTTPStatus = AnswerAmbiguous, ae.StatusCode
		if bankclient.IsUnauthorized(err) {
			a.Kind = AnswerUnauthorized
		}
	case bankclient.IsKeyReuse(err):
		a.Kind, a.HTTPStatus = AnswerKeyReuse, http.StatusUnprocessableEntity
	case errors.As(err, &re):
		a.Kind, a.HTTPStatus = AnswerRejected, re.StatusCode
	case bankclient.IsNotFound(err):
		a.Kind, a.HTTPStatus = AnswerNotFound, http.StatusNotFound
	default:
		return a, false
	}
	return a, true
}

// Policy is the timing the decisions follow.
type Policy struct {
	// KeyTTL is how long the bank remembers an idempotency key: never
	// resend once this much time has passed since the first attempt.
	KeyTTL time.Duration
	// CheckInterval is the delay before the first status check; each
	// further check waits twice as long as the one before.
	CheckInterval time.Duration
	// MaxCheckInterval caps the delay between checks.
	MaxCheckInterval time.Duration
}

// checkDelay is the delay before status check number attempts+1.
func (p Policy) checkDelay(attempts int) time.Duration {
	d := p.CheckInterval
	if d <= 0 {
		d = time.Second
	}
	for i := 0; i < attempts && (p.MaxCheckInterval <= 0 || d < p.MaxCheckInterval); i++ {
		d *= 2
	}
	if p.MaxCheckInterval > 0 && d > p.MaxCheckInterval {
		d = p.MaxCheckInterval
	}
	return d
}

// Facts is what a decision needs to know about a settlement.
type Facts struct {
	SettlementID string
	State        settlement.State
	AmountCents  int64
	Currency     string
	// FirstAttemptAt is when the first POST was about to leave; zero when
	// no POST was ever attempted.
	FirstAttemptAt time.Time
	// CheckAttempts is how many status checks were made before this one.
	CheckAttempts int
	// Flagged is true when the settlement already needs investigation.
	Flagged bool
}

// keyAlive reports whether the bank still remembers the key for sure:
// no attempt yet, or the first one younger than the TTL.
func (f Facts) keyAlive(p Policy, now time.Time) bool {
	return f.FirstAttemptAt.IsZero() || now.Sub(f.FirstAttemptAt) < p.KeyTTL
}

// Action is what to do next with a settlement before calling the bank.
type Action string

// The actions of Start.
const (
	// ActionNone: nothing to do (terminal, or another process owns it).
	ActionNone Action = "none"
	// ActionSend: POST the instruction under the stable key.
	ActionSend Action = "send"
	// ActionCheck: ask the bank's status API by key.
	ActionCheck Action = "check"
)

// StartSend decides what a send_instruction job does: POST only a pending
// settlement that was never attempted. One that was attempted may have been
// executed with its answer lost (a crash at send.after_bank, a database
// failure while recording it), so it is settled by asking the status API
// first (rule 5); it is POSTed again only after the bank answers 404 while
// the key is young (DecideStatus). Re-POSTing straight away would measure
// the key's age when the job starts, not when the request reaches the bank:
// a resend claimed just before the TTL could arrive after the bank forgot
// the key and pay twice. Anything else belongs to reconciliation (or is
// finished).
func StartSend(f Facts) Action {
	switch {
	case f.State != settlement.Pending:
		return ActionNone
	case f.FirstAttemptAt.IsZero():
		return ActionSend
	default:
		return ActionCheck
	}
}

// StartResolve decides what a status check does: nothing for a terminal
// settlement, a first POST for a pending one that was never attempted (the
// bank cannot know it), a status check otherwise.
func StartResolve(f Facts) Action {
	switch {
	case f.State.Terminal():
		return ActionNone
	case f.State == settlement.Pending && f.FirstAttemptAt.IsZero():
		return ActionSend
	default:
		return ActionCheck
	}
}

// Investigation reasons (settlements.investigation_reason).
const (
	// ReasonKeyForgotten: the bank answers 404 for a key first used longer
	// ago than the key TTL; resending could pay twice.
	ReasonKeyForgotten = "bank_forgot_key"
	// ReasonKeyReuse: the bank holds another body under our key.
	ReasonKeyReuse = "idempotency_key_reuse"
	// ReasonPaymentMismatch: the payment the bank holds under our key has
	// another amount, currency or reference than the settlement.
	ReasonPaymentMismatch = "bank_payment_mismatch"
	// ReasonAcceptedThenUnknown: the bank accepted the payment once and now
	// says it never saw the key.
	ReasonAcceptedThenUnknown = "bank_lost_accepted_payment"
)

// Decision is what to do with a settlement after one answer of the bank.
type Decision struct {
	// To is the target state; equal to the current state when it stays.
	To settlement.State
	// Reason is recorded with the transition and logged.
	Reason string
	// WriteMovement is true exactly when To is confirmed: the ledger
	// movement is written in the transaction of that transition.
	WriteMovement bool
	// Resend is true when the bank never saw the key and it is still young:
	// move back to pending (if not there) and POST again under the same key.
	Resend bool
	// Flag, when not empty, flags the settlement needs_investigation with
	// this reason. The engine then stops checking it on its own.
	Flag string
	// NextCheckAt is when the bank should be asked again; zero when no
	// automatic check follows (terminal, flagged, or a resend that will set
	// its own).
	NextCheckAt time.Time
	// Definitive is true when the bank said something definite about the
	// payment (it holds it, or refused it): an earlier flag no longer
	// applies unless Flag sets a new one.
	Definitive bool
}

// Moves reports whether the decision changes the state from from.
func (d Decision) Moves(from settlement.State) bool { return d.To != from }

// finalStatus returns the decision for a bank payment in a final status, or
// ok=false when the status is not final.
func finalStatus(f Facts, pay bankclient.Payment) (Decision, bool) {
	switch pay.Status {
	case bankclient.StatusSettled:
		return Decision{To: settlement.Confirmed, Reason: "bank settled payment " + pay.ID, WriteMovement: true, Definitive: true}, true
	case bankclient.StatusFailed, bankclient.StatusReturned:
		r := fmt.Sprintf("bank %s payment %s", pay.Status, pay.ID)
		if pay.FailureReason != "" {
			r += ": " + pay.FailureReason
		}
		return Decision{To: settlement.Failed, Reason: r, Definitive: true}, true
	}
	return Decision{}, false
}

// mismatch reports whether the bank's payment is not this settlement's:
// another amount, currency or reference. Fields the bank left empty are not
// compared.
func mismatch(f Facts, pay bankclient.Payment) bool {
	return (pay.AmountCents != 0 && pay.AmountCents != f.AmountCents) ||
		(pay.Currency != "" && pay.Currency != f.Currency) ||
		(pay.Reference != "" && pay.Reference != f.SettlementID)
}

// flag keeps a settlement for a human: pending or sent become uncertain,
// and no automatic check follows.
func flag(f Facts, reason, detail string) Decision {
	to := f.State
	if f.State == settlement.Pending || f.State == settlement.Sent {
		to = settlement.Uncertain
	}
	return Decision{To: to, Reason: detail, Flag: reason}
}

// DecideSend decides what the answer to a POST means for a settlement that
// was pending when the POST left. A definitive rejection fails it (pinned to
// the key); acceptance makes it sent (confirmed at once if the bank already
// settled it); no definitive answer makes it uncertain, never failed; key
// reuse is never retried blindly: it waits for a human.
func DecideSend(f Facts, p Policy, now time.Time, a Answer) Decision {
	switch a.Kind {
	case AnswerPayment:
		if mismatch(f, a.Payment) {
			return flag(f, ReasonPaymentMismatch, "bank payment "+a.Payment.ID+" under our key differs from the settlement")
		}
		if d, ok := finalStatus(f, a.Payment); ok {
			return d
		}
		return Decision{To: settlement.Sent, Reason: "bank accepted payment " + a.Payment.ID, NextCheckAt: now.Add(p.checkDelay(0)), Definitive: true}
	case AnswerRejected:
		return Decision{To: settlement.Failed, Reason: "bank rejected the payment: " + a.Detail, Definitive: true}
	case AnswerKeyReuse:
		return flag(f, ReasonKeyReuse, "bank holds another body under our key")
	default: // ambiguous, unauthorized, or a 404 that send never expects
		return Decision{To: settlement.Uncertain, Reason: "no definitive answer to send: " + string(a.Kind), NextCheckAt: now.Add(p.checkDelay(0))}
	}
}

// DecideStatus decides what the answer of the status API means for a
// settlement in f.State (pending with an attempt, sent or uncertain).
// Settled confirms it with its movement; failed or returned fails it;
// accepted or processing makes it sent and checks again later, each time a
// little later; 404 resends under the same key while the key is young and
// never after (flagged instead); no definitive answer keeps it waiting
// (a pending one whose POST may have left becomes uncertain).
func DecideStatus(f Facts, p Policy, now time.Time, a Answer) Decision {
	next := now.Add(p.checkDelay(f.CheckAttempts + 1))
	switch a.Kind {
	case AnswerPayment:
		if mismatch(f, a.Payment) {
			return flag(f, ReasonPaymentMismatch, "bank payment "+a.Payment.ID+" under our key differs from the settlement")
		}
		if d, ok := finalStatus(f, a.Payment); ok {
			return d
		}
		return Decision{To: settlement.Sent, Reason: fmt.Sprintf("bank holds payment %s (%s)", a.Payment.ID, a.Payment.Status), NextCheckAt: next, Definitive: true}
	case AnswerNotFound:
		switch {
		case f.State == settlement.Sent:
			// The bank accepted it once; a 404 now contradicts that. Sending
			// again could pay twice.
			return flag(f, ReasonAcceptedThenUnknown, "bank no longer knows a payment it accepted")
		case f.FirstAttemptAt.IsZero() && f.State != settlement.Pending:
			// No record of when the key was first used: we cannot prove it
			// is young.
			return flag(f, ReasonKeyForgotten, "bank does not know the key and the first attempt is unknown")
		case f.keyAlive(p, now):
			return Decision{To: settlement.Pending, Reason: "bank never saw the key: resend with the same key", Resend: true}
		default:
			return flag(f, ReasonKeyForgotten, fmt.Sprintf("bank does not know the key, first used %s ago (key TTL %s): never resend", now.Sub(f.FirstAttemptAt).Round(time.Second), p.KeyTTL))
		}
	default: // ambiguous, unauthorized; rejected and key reuse are not status answers
		to := f.State
		if to == settlement.Pending {
			to = settlement.Uncertain
		}
		d := Decision{To: to, Reason: "no definitive answer to status check: " + string(a.Kind), NextCheckAt: next}
		if f.Flagged {
			d.NextCheckAt = time.Time{} // a human owns it; only they ask again
		}
		return d
	}
}
