package reconcile

import (
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/settlement"
)

// The capability sets the engine must stay exactly-once against
// (DESIGN.md section 13).
var (
	capsByKey        = settle.Connector.Capabilities
	capsByRef        = bankclient.Capabilities{LookupByReference: true, Replay: bankclient.ReplayStored}
	capsIDOriginal   = bankclient.Capabilities{LookupByID: true, Search: true, Replay: bankclient.ReplayOriginal, KeyWindow: 24 * time.Hour}
	capsIDCurrent    = bankclient.Capabilities{LookupByID: true, Replay: bankclient.ReplayCurrent, KeyWindow: 24 * time.Hour}
	capsSearchOnly   = bankclient.Capabilities{Search: true, Replay: bankclient.ReplayStored}
	capsNothingAtAll = bankclient.Capabilities{Replay: bankclient.ReplayStored}
)

func TestChooseQuestion(t *testing.T) {
	t.Parallel()
	young, old := t0.Add(time.Hour), t0.Add(25*time.Hour) // KeyTTL is 24 h
	withID := facts0(settlement.Uncertain, t0)
	withID.BankPaymentID = "pay_1"
	noID := facts0(settlement.Uncertain, t0)
	neverSent := facts0(settlement.Uncertain, time.Time{})
	confirmed := facts0(settlement.Confirmed, t0)
	confirmedID := confirmed
	confirmedID.BankPaymentID = "pay_1"
	for _, tc := range []struct {
		name string
		caps bankclient.Capabilities
		f    Facts
		now  time.Time
		want Question
	}{
		{"by key, young", capsByKey, noID, young, AskByKey},
		{"by key, old: 404 then decides", capsByKey, noID, old, AskByKey},
		{"by reference", capsByRef, noID, old, AskByReference},
		{"id known: by id", capsIDOriginal, withID, young, AskByID},
		{"id known, old: by id", capsIDCurrent, withID, old, AskByID},
		{"no id, key young: replay", capsIDOriginal, noID, young, AskReplay},
		{"no id, key young, current replay", capsIDCurrent, noID, young, AskReplay},
		{"no id, key old: search", capsIDOriginal, noID, old, AskSearch},
		{"no id, key old, no list: nothing", capsIDCurrent, noID, old, AskNothing},
		{"key age unknown: never replay", capsIDOriginal, neverSent, young, AskSearch},
		{"key age unknown, no list: nothing", capsIDCurrent, neverSent, young, AskNothing},
		{"search only, young: replay first", capsSearchOnly, noID, young, AskReplay},
		{"search only, old", capsSearchOnly, noID, old, AskSearch},
		{"nothing at all, young: replay", capsNothingAtAll, noID, young, AskReplay},
		{"nothing at all, old", capsNothingAtAll, noID, old, AskNothing},
		{"at the window's edge: no replay", capsIDCurrent, noID, t0.Add(24 * time.Hour), AskNothing},
		{"a request could arrive after the window: no replay", capsIDCurrent, noID, t0.Add(24*time.Hour - time.Minute), AskNothing},
		{"arrives just within the window: replay", capsIDCurrent, noID, t0.Add(24*time.Hour - 3*time.Minute), AskReplay},
		// The return watch outlives the key: once the bank may have
		// forgotten it, a confirmed settlement is asked about without it.
		{"watch, key young: by key", capsByKey, confirmed, young, AskByKey},
		{"watch, key old: search", capsByKey, confirmed, old, AskSearch},
		{"watch, key at the TTL: search", capsByKey, confirmed, t0.Add(24 * time.Hour), AskSearch},
		{"watch, key old, by reference", capsByRef, confirmed, old, AskByReference},
		{"watch, key old, id known: by id", capsIDCurrent, confirmedID, old, AskByID},
		{"watch, key old, nothing else: by key", bankclient.Capabilities{LookupByKey: true}, confirmed, old, AskByKey},
		{"watch, key old, no id, no list: nothing", capsIDCurrent, confirmed, old, AskNothing},
	} {
		p := policy
		p.Bank, p.RequestBound = tc.caps, 2*time.Minute
		if got := ChooseQuestion(tc.f, p, tc.now); got != tc.want {
			t.Errorf("%s: ChooseQuestion = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestDecideReplay(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		caps    bankclient.Capabilities
		from    settlement.State
		a       Answer
		to      settlement.State
		move    bool
		flag    string
		recheck bool
	}{
		{"original replay, settled: status not trusted", capsIDOriginal, settlement.Uncertain, payment(bankclient.StatusSettled), settlement.Sent, false, "", true},
		{"current replay, settled: confirmed", capsIDCurrent, settlement.Uncertain, payment(bankclient.StatusSettled), settlement.Confirmed, true, "", false},
		{"current replay, failed", capsIDCurrent, settlement.Uncertain, payment(bankclient.StatusFailed), settlement.Failed, false, "", false},
		{"original replay, accepted", capsIDOriginal, settlement.Pending, payment(bankclient.StatusAccepted), settlement.Sent, false, "", true},
		{"original rejection replayed", capsIDOriginal, settlement.Uncertain, Answer{Kind: AnswerRejected}, settlement.Failed, false, "", false},
		{"key reuse", capsIDOriginal, settlement.Uncertain, Answer{Kind: AnswerKeyReuse}, settlement.Uncertain, false, ReasonKeyReuse, false},
		{"ambiguous, pending", capsIDOriginal, settlement.Pending, Answer{Kind: AnswerAmbiguous}, settlement.Uncertain, false, "", true},
		{"ambiguous, sent", capsIDOriginal, settlement.Sent, Answer{Kind: AnswerAmbiguous}, settlement.Sent, false, "", true},
		{"another payment under our key", capsIDCurrent, settlement.Uncertain,
			Answer{Kind: AnswerPayment, Payment: bankclient.Payment{ID: "pay_9", Reference: "other", AmountCents: 1000, Currency: "EUR", Status: bankclient.StatusSettled}},
			settlement.Uncertain, false, ReasonPaymentMismatch, false},
	} {
		p := policy
		p.Bank = tc.caps
		d := DecideReplay(facts0(tc.from, t0), p, now, tc.a)
		if d.To != tc.to || d.WriteMovement != tc.move || d.Flag != tc.flag || d.Resend || (!d.NextCheckAt.IsZero()) != tc.recheck {
			t.Errorf("%s: %+v; want to %s, movement %v, flag %q, recheck %v", tc.name, d, tc.to, tc.move, tc.flag, tc.recheck)
		}
	}
}

// TestDecideStatusByQuestion: what "not found" means depends on the
// question, and a rate limit burns nothing.
func TestDecideStatusByQuestion(t *testing.T) {
	t.Parallel()
	young, old := t0.Add(time.Hour), t0.Add(25*time.Hour)
	nf := func(q Question) Answer { return Answer{Kind: AnswerNotFound, Question: q} }
	for _, tc := range []struct {
		name   string
		from   settlement.State
		now    time.Time
		a      Answer
		to     settlement.State
		resend bool
		flag   string
	}{
		{"by key, young: resend", settlement.Uncertain, young, nf(AskByKey), settlement.Pending, true, ""},
		{"by key, old: flag", settlement.Uncertain, old, nf(AskByKey), settlement.Uncertain, false, ReasonKeyForgotten},
		{"by reference, young: resend", settlement.Uncertain, young, nf(AskByReference), settlement.Pending, true, ""},
		{"by id: the bank lost what it named", settlement.Sent, young, nf(AskByID), settlement.Uncertain, false, ReasonAcceptedThenUnknown},
		{"not in the list: flag, never resend", settlement.Uncertain, old, nf(AskSearch), settlement.Uncertain, false, ReasonNotInList},
		{"twice in the list", settlement.Uncertain, old, Answer{Kind: AnswerDuplicate, Question: AskSearch}, settlement.Uncertain, false, ReasonDuplicateAtBank},
		{"found in the list, settled", settlement.Uncertain, old, payment(bankclient.StatusSettled), settlement.Confirmed, false, ""},
	} {
		d := DecideStatus(facts0(tc.from, t0), policy, tc.now, tc.a)
		if d.To != tc.to || d.Resend != tc.resend || d.Flag != tc.flag {
			t.Errorf("%s: %+v; want to %s, resend %v, flag %q", tc.name, d, tc.to, tc.resend, tc.flag)
		}
	}
	f := facts0(settlement.Uncertain, t0)
	f.CheckAttempts = 3
	rl := Answer{Kind: AnswerAmbiguous, HTTPStatus: http.StatusTooManyRequests, RetryAfter: 90 * time.Second, Question: AskByKey}
	d := DecideStatus(f, policy, young, rl)
	if d.To != settlement.Uncertain || d.Flag != "" || d.NextCheckAt != young.Add(90*time.Second) {
		t.Errorf("rate limited: %+v; want uncertain, unflagged, asked again after the 90 s the bank asked for", d)
	}
	rl.RetryAfter = time.Second
	if d := DecideStatus(f, policy, young, rl); d.NextCheckAt != young.Add(policy.checkDelay(3)) {
		t.Errorf("rate limited with a short Retry-After: next %s, want the unchanged backoff %s", d.NextCheckAt.Sub(young), policy.checkDelay(3))
	}
}

func TestAfterConfirmation(t *testing.T) {
	t.Parallel()
	f := facts0(settlement.Confirmed, t0)
	f.ConfirmedAt = t0
	ret := func(amount int64) Answer {
		a := payment(bankclient.StatusReturned)
		a.Payment.AmountCents = amount
		return a
	}
	for _, tc := range []struct {
		name     string
		a        Answer
		to       settlement.State
		reversal bool
		flag     string
	}{
		{"still settled", payment(bankclient.StatusSettled), settlement.Confirmed, false, ""},
		{"returned in full", ret(1000), settlement.Returned, true, ""},
		{"returned, amount not given", ret(0), settlement.Returned, true, ""},
		{"partial return", ret(400), settlement.Confirmed, false, ReasonPartialReturn},
		{"failed after settled", payment(bankclient.StatusFailed), settlement.Confirmed, false, ReasonFailedAfterSettled},
		{"no answer", Answer{Kind: AnswerAmbiguous}, settlement.Confirmed, false, ""},
		{"forgotten key", Answer{Kind: AnswerNotFound, Question: AskByKey}, settlement.Confirmed, false, ""},
	} {
		d := DecideStatus(f, policy, t0.Add(time.Hour), tc.a)
		if d.To != tc.to || d.WriteReversal != tc.reversal || d.WriteMovement || d.Resend || d.Flag != tc.flag {
			t.Errorf("%s: %+v; want to %s, reversal %v, flag %q", tc.name, d, tc.to, tc.reversal, tc.flag)
		}
	}
	// At a bank that reports a payment come back as failed (Stripe), a
	// failure after confirmation is the return; before, a failure.
	stripeLike := policy
	stripeLike.Bank.FailedAfterSettledIsReturn = true
	if d := DecideStatus(f, stripeLike, t0.Add(time.Hour), payment(bankclient.StatusFailed)); d.To != settlement.Returned || !d.WriteReversal || d.Flag != "" {
		t.Errorf("failed after settled where that is a return: %+v, want returned with its reversal", d)
	}
	if d := DecideStatus(facts0(settlement.Sent, t0), stripeLike, t0.Add(time.Hour), payment(bankclient.StatusFailed)); d.To != settlement.Failed || d.WriteReversal {
		t.Errorf("failed before it settled there: %+v, want failed", d)
	}
	for _, st := range []settlement.State{settlement.Sent, settlement.Uncertain, settlement.Pending} {
		if d := DecideReturn(facts0(st, t0), line(minor(1000), "EUR", "AC04")); d.Moves(st) || d.WriteReversal {
			t.Errorf("a statement's return of a %s settlement: %+v, want it left as it is, no movement", st, d)
		}
	}
	if d := DecideReturn(facts0(settlement.Returned, t0), line(minor(1000), "EUR", "AC04")); d.Moves(settlement.Returned) || d.WriteReversal {
		t.Errorf("a second return: %+v, want nothing", d)
	}
	p := policy
	p.ReturnWatch = 7 * 24 * time.Hour
	for _, tc := range []struct {
		since, want time.Duration // since confirmation; next check after now (0: none)
	}{
		{time.Second, 8 * time.Second}, {time.Minute, time.Minute}, {time.Hour, time.Hour}, {3 * 24 * time.Hour, 3 * 24 * time.Hour}, {5 * 24 * time.Hour, 0},
	} {
		now := t0.Add(tc.since)
		got := p.watchDelay(f, now)
		if (tc.want == 0) != got.IsZero() || (tc.want != 0 && got.Sub(now) != tc.want) {
			t.Errorf("%s after confirmation: next watch check %v, want +%s", tc.since, got, tc.want)
		}
	}
}
