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
	// AnswerDuplicate: a search found several payments with our reference.
	AnswerDuplicate AnswerKind = "duplicate"
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
	// RetryAfter is the wait the bank asked for (429, 503), else 0.
	RetryAfter time.Duration
	// Question is what was asked (AskByKey for a status check by key, the
	// zero value for a send).
	Question Question
	// Consent is set when Kind is AnswerConsent.
	Consent bankclient.Consent
}

// RateLimited reports whether the bank asked us to slow down: nothing was
// learned, and the next question waits at least RetryAfter.
func (a Answer) RateLimited() bool { return a.HTTPStatus == http.StatusTooManyRequests }

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
		a.Kind, a.HTTPStatus, a.RetryAfter = AnswerAmbiguous, ae.StatusCode, ae.RetryAfter
		if bankclient.IsUnauthorized(err) {
			a.Kind = AnswerUnauthorized
		}
	case bankclient.IsKeyReuse(err):
		a.Kind, a.HTTPStatus = AnswerKeyReuse, http.StatusUnprocessableEntity
	case errors.As(err, &re):
		a.Kind, a.HTTPStatus = AnswerRejected, re.StatusCode
	case bankclient.IsNotFound(err), errors.Is(err, bankclient.ErrPaymentNotFound):
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
	// Bank is what the bank can do: which questions the decisions may
	// ask it (the zero value asks nothing but a POST; the settle
	// connector's looks up by key).
	Bank bankclient.Capabilities
	// RequestBound is the longest a request may take from the decision to
	// send it until it reaches the bank (the job timeout plus one bank
	// call): a replay is decided only while the key will still be
	// remembered when it arrives.
	RequestBound time.Duration
	// ReturnWatch is how long after confirmation the bank is still asked
	// whether the payment came back (--return-watch); 0 never asks.
	ReturnWatch time.Duration
	// ConsentWait is how long a consent may await the customer's
	// authorisation before the settlement is flagged (banks with
	// Capabilities.Consent); 0 waits for ever.
	ConsentWait time.Duration
}

// watchDelay is when a confirmed settlement is next asked whether its
// payment came back: as long after now as it has been confirmed (so the
// checks thin out: 10 minutes, 20, 40, … a dozen over a week), never
// sooner than MaxCheckInterval; zero once the watch is over.
func (p Policy) watchDelay(f Facts, now time.Time) time.Time {
	if p.ReturnWatch <= 0 || f.ConfirmedAt.IsZero() {
		return time.Time{}
	}
	next := now.Add(max(now.Sub(f.ConfirmedAt), p.MaxCheckInterval, p.CheckInterval))
	if next.After(f.ConfirmedAt.Add(p.ReturnWatch)) {
		return time.Time{}
	}
	return next
}

// replayable reports whether the identical request may be repeated under
// the key: the first attempt's time is known, and the bank will still
// remember the key when a request decided now arrives.
func (f Facts) replayable(p Policy, now time.Time) bool {
	return !f.FirstAttemptAt.IsZero() && now.Add(p.RequestBound).Before(f.FirstAttemptAt.Add(p.KeyTTL))
}

// keyRemembered reports whether the bank still remembers the key for sure
// now: the first attempt is known and younger than the key TTL.
func (f Facts) keyRemembered(p Policy, now time.Time) bool {
	return !f.FirstAttemptAt.IsZero() && now.Before(f.FirstAttemptAt.Add(p.KeyTTL))
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
	// BankReference is the reference the settlement was sent under.
	BankReference string
	// BankPaymentID is the bank's id of the payment, once any answer
	// carried it.
	BankPaymentID string
	// ConfirmedAt is when the settlement was confirmed; zero when it was
	// not.
	ConfirmedAt time.Time
	// Watched is true for a confirmed settlement still inside its return
	// watch: the bank is still asked whether the payment came back.
	Watched bool
	// ConsentID is the bank's id of the settlement's consent, once any
	// answer named it (banks with Capabilities.Consent); ConsentStatus its
	// last known status; ConsentRequestedAt when it was first asked for;
	// ConsentExpiresAt when the bank said it expires (zero: unknown).
	ConsentID          string
	ConsentStatus      bankclient.ConsentStatus
	ConsentRequestedAt time.Time
	ConsentExpiresAt   time.Time
	// Granted is true when settle keeps the account holder's token for
	// the consent (banks with Capabilities.Authorisation).
	Granted bool
}

// reference is the reference the settlement travels under (its id for a
// settlement received before references were stored).
func (f Facts) reference() string {
	if f.BankReference != "" {
		return f.BankReference
	}
	return f.SettlementID
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
	case f.State == settlement.Confirmed && f.Watched:
		return ActionCheck
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
	// ReasonNoSafeQuestion: the bank can only be asked by its own payment
	// id, which no answer gave us, the key may be forgotten, so a replay
	// could pay twice, and the bank's list cannot be searched.
	ReasonNoSafeQuestion = "no_safe_question"
	// ReasonNotInList: after the key window, the bank's list holds no
	// payment with our reference; only a human can tell whether the lost
	// request ever arrived.
	ReasonNotInList = "not_in_bank_list"
	// ReasonDuplicateAtBank: the bank holds more than one payment with our
	// reference.
	ReasonDuplicateAtBank = "duplicate_at_bank"
	// ReasonPartialReturn: the bank returned another amount than the
	// settlement's; only a human can book that.
	ReasonPartialReturn = "partial_return"
	// ReasonFailedAfterSettled: the bank reports as failed a payment it had
	// settled (not as a return).
	ReasonFailedAfterSettled = "failed_after_settled"
	// ReasonReturnNeverSent: a return is reported for a settlement settle
	// never sent to the bank; only a human can tell what came back.
	ReasonReturnNeverSent = "return_never_sent"
)

// Question is how the engine asks the bank about a settlement whose
// outcome it does not know.
type Question string

// The questions, strongest first (DESIGN.md section 13).
const (
	// AskByKey: the status by our idempotency key.
	AskByKey Question = "by_key"
	// AskByReference: the status by the reference we sent.
	AskByReference Question = "by_reference"
	// AskByID: the status by the bank's payment id.
	AskByID Question = "by_id"
	// AskReplay: the identical POST under the same key, while the bank
	// certainly remembers the key: it answers with the payment (and its
	// id) without paying twice.
	AskReplay Question = "replay"
	// AskSearch: look for our reference in the bank's list.
	AskSearch Question = "search"
	// AskNothing: no safe question is left; flag it for a human.
	AskNothing Question = "none"
)

// ChooseQuestion picks the strongest safe question the bank allows about a
// settlement whose outcome is unknown: a lookup by our key or reference;
// else by the bank's id once an answer gave it; else, while the key is
// certainly remembered, the identical request again under the same key
// (never a new key); else a search of the bank's list; else nothing.
func ChooseQuestion(f Facts, p Policy, now time.Time) Question {
	c := p.Bank
	if f.State == settlement.Confirmed && !f.keyRemembered(p, now) {
		// The return watch outlives the key: a bank that has forgotten it
		// answers 404 by key, and a return after that would go unseen.
		// Ask in a way that does not need the key.
		switch {
		case c.LookupByReference:
			return AskByReference
		case c.LookupByID && f.BankPaymentID != "":
			return AskByID
		case c.Search:
			return AskSearch
		}
	}
	switch {
	case c.LookupByKey:
		return AskByKey
	case c.LookupByReference:
		return AskByReference
	case c.LookupByID && f.BankPaymentID != "":
		return AskByID
	case f.State != settlement.Confirmed && f.replayable(p, now):
		// Never for a confirmed settlement: its payment is known, and a
		// POST could only ever pay it again.
		return AskReplay
	case c.Search:
		return AskSearch
	default:
		return AskNothing
	}
}

// Decision is what to do with a settlement after one answer of the bank.
type Decision struct {
	// To is the target state; equal to the current state when it stays.
	To settlement.State
	// Reason is recorded with the transition and logged.
	Reason string
	// WriteMovement is true exactly when To is confirmed: the ledger
	// movement is written in the transaction of that transition.
	WriteMovement bool
	// WriteReversal is true exactly when To is returned: the reversal
	// movement is written in the transaction of that transition.
	WriteReversal bool
	// Source names what reported a return ("status" when empty).
	Source string
	// Pay is true when the settlement's consent is authorised: claim and
	// POST the payment now (the consent step).
	Pay bool
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
	if f.State == settlement.Confirmed {
		return afterConfirmation(f, pay), true
	}
	switch pay.Status {
	case bankclient.StatusSettled:
		return Decision{To: settlement.Confirmed, Reason: "bank settled payment " + pay.ID, WriteMovement: true, Definitive: true}, true
	case bankclient.StatusFailed, bankclient.StatusReturned:
		// Never confirmed here: a return of a payment we did not see settle
		// fails the settlement, with no movement to reverse.
		r := fmt.Sprintf("bank %s payment %s", pay.Status, pay.ID)
		if pay.FailureReason != "" {
			r += ": " + pay.FailureReason
		}
		return Decision{To: settlement.Failed, Reason: r, Definitive: true}, true
	}
	return Decision{}, false
}

// afterConfirmation decides what the bank's word on a confirmed
// settlement's payment means (DESIGN.md section 15): still settled, it
// stays confirmed; returned for the settlement's amount, it is returned
// with its reversal; any other amount, or failed without being a return,
// contradicts the ledger and waits for a human.
func afterConfirmation(f Facts, pay bankclient.Payment) Decision {
	switch {
	case pay.Status == bankclient.StatusReturned && pay.AmountCents != 0 && pay.AmountCents != f.AmountCents:
		return Decision{To: settlement.Confirmed, Reason: fmt.Sprintf("bank returned %d of payment %s, the settlement is %d", pay.AmountCents, pay.ID, f.AmountCents), Flag: ReasonPartialReturn}
	case pay.Status == bankclient.StatusReturned:
		r := fmt.Sprintf("bank returned payment %s", pay.ID)
		if pay.FailureReason != "" {
			r += ": " + pay.FailureReason
		}
		return Decision{To: settlement.Returned, Reason: r, WriteReversal: true, Definitive: true}
	case pay.Status == bankclient.StatusFailed:
		return Decision{To: settlement.Confirmed, Reason: "bank reports payment " + pay.ID + " failed after it settled", Flag: ReasonFailedAfterSettled}
	default:
		return Decision{To: settlement.Confirmed, Reason: fmt.Sprintf("bank holds payment %s (%s)", pay.ID, pay.Status), Definitive: true}
	}
}

// DecideReturn decides what a credit line of a statement under a
// settlement's reference means for it. It is a return only when it
// carries return information (LineFacts.Marked) and is for the
// settlement's amount in its currency: a confirmed settlement then is
// returned with its reversal, as when the bank's status API reports the
// payment returned. An unknown or zero amount, or another currency, is
// flagged statement_amount_mismatch, another amount partial_return,
// whatever the state (a settlement never confirmed is not failed on
// them). A statement never fails a settlement: a return of one settle has
// not seen settle (pending after an attempt, sent, uncertain) leaves it as
// it is, for the bank's own status (or an operator) to decide; a return
// of one never sent is flagged return_never_sent.
func DecideReturn(f Facts, l LineFacts) Decision {
	switch {
	case f.State == settlement.Returned || f.State == settlement.Failed:
		return Decision{To: f.State, Reason: "return already booked"}
	case !l.Marked():
		return Decision{To: f.State, Reason: "statement line " + l.Line + " is a credit without return information: not a return"}
	case f.State == settlement.Pending && f.FirstAttemptAt.IsZero():
		// Nothing was ever sent under our key: the return is not of our
		// payment, or our records are wrong.
		return flag(f, ReasonReturnNeverSent, fmt.Sprintf("statement line %s returns a payment of a settlement never sent", l.Line))
	}
	if problem := l.amountProblem(f); problem != "" {
		if l.AmountMinor != nil && *l.AmountMinor != 0 && l.Currency == f.Currency {
			// Part of the payment came back: only a human can book that.
			return flag(f, ReasonPartialReturn, fmt.Sprintf("bank returned %d of payment %s, the settlement is %d (%s)", *l.AmountMinor, f.BankPaymentID, f.AmountCents, problem))
		}
		return flag(f, ReasonStatementMismatch, problem)
	}
	if f.State != settlement.Confirmed {
		return Decision{To: f.State, Reason: fmt.Sprintf("statement line %s returns a payment settle has not seen settle: the bank's status or an operator decides", l.Line)}
	}
	pay := bankclient.Payment{ID: f.BankPaymentID, Status: bankclient.StatusReturned, AmountCents: f.AmountCents, FailureReason: l.ReturnReason}
	return afterConfirmation(f, pay)
}

// mismatch reports whether the bank's payment is not this settlement's:
// another amount, currency or reference. Fields the bank left empty are not
// compared.
func mismatch(f Facts, pay bankclient.Payment) bool {
	return (pay.AmountCents != 0 && pay.AmountCents != f.AmountCents) ||
		(pay.Currency != "" && pay.Currency != f.Currency) ||
		(pay.Reference != "" && pay.Reference != f.reference())
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
		return Decision{To: settlement.Uncertain, Reason: "no definitive answer to send: " + string(a.Kind), NextCheckAt: now.Add(max(p.checkDelay(0), a.RetryAfter))}
	}
}

// DecideReplay decides what the answer to the identical POST, repeated
// under the same key while the bank remembers it (AskReplay), means for a
// settlement whose first answer was lost (pending with an attempt, sent or
// uncertain). The payment it carries is the one the key paid, never a
// second: its id is learned and stored; its status counts only when the
// bank replays the current resource (a bank that replays the original
// response reports the status of the day it was created), so such a
// payment is asked again by id. A rejection is the original rejection; no
// definitive answer keeps it waiting.
func DecideReplay(f Facts, p Policy, now time.Time, a Answer) Decision {
	next := now.Add(p.checkDelay(f.CheckAttempts + 1))
	switch a.Kind {
	case AnswerPayment:
		if mismatch(f, a.Payment) {
			return flag(f, ReasonPaymentMismatch, "bank payment "+a.Payment.ID+" under our key differs from the settlement")
		}
		if p.Bank.Replay != bankclient.ReplayOriginal {
			if d, ok := finalStatus(f, a.Payment); ok {
				return d
			}
		}
		return Decision{To: settlement.Sent, Reason: fmt.Sprintf("the replay under our key names payment %s", a.Payment.ID), NextCheckAt: next, Definitive: true}
	case AnswerRejected:
		return Decision{To: settlement.Failed, Reason: "bank rejected the payment: " + a.Detail, Definitive: true}
	case AnswerKeyReuse:
		return flag(f, ReasonKeyReuse, "bank holds another body under our key")
	default:
		to := f.State
		if to == settlement.Pending {
			to = settlement.Uncertain
		}
		return Decision{To: to, Reason: "no definitive answer to the replay: " + string(a.Kind), NextCheckAt: now.Add(max(p.checkDelay(f.CheckAttempts+1), a.RetryAfter))}
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
	if f.State == settlement.Confirmed {
		// The return watch: only the payment's word counts; anything else
		// leaves the settlement confirmed, asked again later.
		if a.Kind == AnswerPayment {
			got := a.Payment
			if got.Status == bankclient.StatusFailed && p.Bank.FailedAfterSettledIsReturn {
				got.Status = bankclient.StatusReturned
			}
			pay := got
			if pay.Status == bankclient.StatusReturned {
				pay.AmountCents = 0 // a return of another amount is judged below, not a stranger's payment
			}
			if !mismatch(f, pay) {
				return afterConfirmation(f, got)
			}
		}
		return Decision{To: settlement.Confirmed, Reason: "return watch: " + string(a.Kind)}
	}
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
	case AnswerDuplicate:
		return flag(f, ReasonDuplicateAtBank, a.Detail)
	case AnswerNotFound:
		switch {
		case a.Question == AskByID:
			return flag(f, ReasonAcceptedThenUnknown, "bank no longer knows payment "+f.BankPaymentID+", whose id it gave us")
		case a.Question == AskSearch:
			return flag(f, ReasonNotInList, fmt.Sprintf("the bank's list holds no payment with reference %s, first attempted %s ago (key TTL %s): never resend", f.reference(), now.Sub(f.FirstAttemptAt).Round(time.Second), p.KeyTTL))
		case f.State == settlement.Sent:
			// The bank accepted it once; a 404 now contradicts that. Sending
			// again could pay twice.
			return flag(f, ReasonAcceptedThenUnknown, "bank no longer knows a payment it accepted")
		case f.FirstAttemptAt.IsZero() && f.State != settlement.Pending:
			// No record of when the key was first used: we cannot prove it
			// is young.
			return flag(f, ReasonKeyForgotten, "bank does not know the key and the first attempt is unknown")
		case f.FirstAttemptAt.IsZero() || f.replayable(p, now):
			// Never attempted, or the resend decided now arrives while the
			// bank still remembers the key (a key merely alive now could be
			// forgotten by the time the request lands, and a request the
			// bank no longer recognises pays a second time).
			return Decision{To: settlement.Pending, Reason: "bank never saw the key: resend with the same key", Resend: true}
		default:
			return flag(f, ReasonKeyForgotten, fmt.Sprintf("bank does not know the key, first used %s ago (key TTL %s, requests take up to %s): never resend", now.Sub(f.FirstAttemptAt).Round(time.Second), p.KeyTTL, p.RequestBound))
		}
	default: // ambiguous, unauthorized; rejected and key reuse are not status answers
		to := f.State
		if to == settlement.Pending {
			to = settlement.Uncertain
		}
		d := Decision{To: to, Reason: "no definitive answer to status check: " + string(a.Kind), NextCheckAt: next}
		if a.RateLimited() {
			// Asked to slow down: nothing learned, no check burned; the
			// next one waits at least as long as the bank asked.
			d.Reason = "bank rate limit: asked again later"
			d.NextCheckAt = now.Add(max(p.checkDelay(f.CheckAttempts), a.RetryAfter))
		}
		if f.Flagged {
			d.NextCheckAt = time.Time{} // a human owns it; only they ask again
		}
		return d
	}
}
