package reconcile

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

var (
	t0     = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	policy = Policy{KeyTTL: 24 * time.Hour, RequestBound: 2 * time.Minute, CheckInterval: time.Second, MaxCheckInterval: 8 * time.Second}
)

func payment(st bankclient.Status) Answer {
	return Answer{Kind: AnswerPayment, Payment: bankclient.Payment{ID: "pay_1", Reference: "s1", AmountCents: 1000, Currency: "EUR", Status: st}}
}

func facts0(st settlement.State, first time.Time) Facts {
	return Facts{SettlementID: "s1", State: st, AmountCents: 1000, Currency: "EUR", FirstAttemptAt: first}
}

func TestDecideSend(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	f := facts0(settlement.Pending, t0)
	tests := []struct {
		name string
		a    Answer
		want Decision
	}{
		{"accepted", payment(bankclient.StatusAccepted), Decision{To: settlement.Sent, NextCheckAt: now.Add(time.Second), Definitive: true}},
		{"processing", payment(bankclient.StatusProcessing), Decision{To: settlement.Sent, NextCheckAt: now.Add(time.Second), Definitive: true}},
		{"settled at once", payment(bankclient.StatusSettled), Decision{To: settlement.Confirmed, WriteMovement: true, Definitive: true}},
		{"failed at once", payment(bankclient.StatusFailed), Decision{To: settlement.Failed, Definitive: true}},
		{"returned", payment(bankclient.StatusReturned), Decision{To: settlement.Failed, Definitive: true}},
		{"rejected", Answer{Kind: AnswerRejected}, Decision{To: settlement.Failed, Definitive: true}},
		{"key reuse", Answer{Kind: AnswerKeyReuse}, Decision{To: settlement.Uncertain, Flag: ReasonKeyReuse}},
		{"ambiguous", Answer{Kind: AnswerAmbiguous}, Decision{To: settlement.Uncertain, NextCheckAt: now.Add(time.Second)}},
		{"unauthorized is never a failure", Answer{Kind: AnswerUnauthorized}, Decision{To: settlement.Uncertain, NextCheckAt: now.Add(time.Second)}},
		{"other payment under our key", Answer{Kind: AnswerPayment, Payment: bankclient.Payment{ID: "p", AmountCents: 999, Status: bankclient.StatusSettled}},
			Decision{To: settlement.Uncertain, Flag: ReasonPaymentMismatch}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := DecideSend(f, policy, now, tt.a)
			got.Reason = ""
			if got != tt.want {
				t.Errorf("DecideSend(%s) = %+v, want %+v", tt.name, got, tt.want)
			}
		})
	}
}

func TestDecideStatus(t *testing.T) {
	t.Parallel()
	young := t0.Add(-time.Hour)      // first attempt one hour before now
	old := t0.Add(-24*time.Hour - 1) // just past the key TTL
	edge := t0.Add(-24 * time.Hour)  // exactly the key TTL: no longer young
	now := t0
	type tc struct {
		name string
		f    Facts
		a    Answer
		want Decision
	}
	var tests []tc
	for _, st := range []settlement.State{settlement.Pending, settlement.Sent, settlement.Uncertain} {
		f := facts0(st, young)
		f.CheckAttempts = 2
		tests = append(tests,
			tc{"settled/" + string(st), f, payment(bankclient.StatusSettled), Decision{To: settlement.Confirmed, WriteMovement: true, Definitive: true}},
			tc{"failed/" + string(st), f, payment(bankclient.StatusFailed), Decision{To: settlement.Failed, Definitive: true}},
			tc{"returned/" + string(st), f, payment(bankclient.StatusReturned), Decision{To: settlement.Failed, Definitive: true}},
			// Growing intervals: the third check waits 1s·2³ = 8s (the cap).
			tc{"accepted/" + string(st), f, payment(bankclient.StatusAccepted), Decision{To: settlement.Sent, NextCheckAt: now.Add(8 * time.Second), Definitive: true}},
			tc{"processing/" + string(st), f, payment(bankclient.StatusProcessing), Decision{To: settlement.Sent, NextCheckAt: now.Add(8 * time.Second), Definitive: true}},
		)
	}
	tests = append(tests,
		// Ambiguous status answers never fail a settlement.
		tc{"ambiguous/pending becomes uncertain", facts0(settlement.Pending, young), Answer{Kind: AnswerAmbiguous}, Decision{To: settlement.Uncertain, NextCheckAt: now.Add(2 * time.Second)}},
		tc{"ambiguous/sent stays", facts0(settlement.Sent, young), Answer{Kind: AnswerAmbiguous}, Decision{To: settlement.Sent, NextCheckAt: now.Add(2 * time.Second)}},
		tc{"ambiguous/uncertain stays", facts0(settlement.Uncertain, young), Answer{Kind: AnswerAmbiguous}, Decision{To: settlement.Uncertain, NextCheckAt: now.Add(2 * time.Second)}},
		tc{"unauthorized/uncertain stays", facts0(settlement.Uncertain, young), Answer{Kind: AnswerUnauthorized}, Decision{To: settlement.Uncertain, NextCheckAt: now.Add(2 * time.Second)}},
		tc{"ambiguous/flagged waits for a human", Facts{SettlementID: "s1", State: settlement.Uncertain, FirstAttemptAt: old, Flagged: true}, Answer{Kind: AnswerAmbiguous}, Decision{To: settlement.Uncertain}},
		// 404: resend while young, never after.
		tc{"not found/uncertain young resends", facts0(settlement.Uncertain, young), Answer{Kind: AnswerNotFound}, Decision{To: settlement.Pending, Resend: true}},
		tc{"not found/pending young resends", facts0(settlement.Pending, young), Answer{Kind: AnswerNotFound}, Decision{To: settlement.Pending, Resend: true}},
		tc{"not found/pending never attempted resends", facts0(settlement.Pending, time.Time{}), Answer{Kind: AnswerNotFound}, Decision{To: settlement.Pending, Resend: true}},
		tc{"not found/uncertain old is flagged", facts0(settlement.Uncertain, old), Answer{Kind: AnswerNotFound}, Decision{To: settlement.Uncertain, Flag: ReasonKeyForgotten}},
		tc{"not found/uncertain at the TTL is flagged", facts0(settlement.Uncertain, edge), Answer{Kind: AnswerNotFound}, Decision{To: settlement.Uncertain, Flag: ReasonKeyForgotten}},
		tc{"not found/pending old is flagged", facts0(settlement.Pending, old), Answer{Kind: AnswerNotFound}, Decision{To: settlement.Uncertain, Flag: ReasonKeyForgotten}},
		// A resend decided now must reach the bank while it still
		// remembers the key: one decided inside the request bound of the
		// TTL could arrive after the bank forgot it and pay a second time.
		tc{"not found/uncertain within the request bound of the TTL is flagged", facts0(settlement.Uncertain, t0.Add(-24*time.Hour+time.Minute)),
			Answer{Kind: AnswerNotFound}, Decision{To: settlement.Uncertain, Flag: ReasonKeyForgotten}},
		tc{"not found/pending within the request bound of the TTL is flagged", facts0(settlement.Pending, t0.Add(-24*time.Hour+time.Minute)),
			Answer{Kind: AnswerNotFound}, Decision{To: settlement.Uncertain, Flag: ReasonKeyForgotten}},
		tc{"not found/uncertain just outside the request bound resends", facts0(settlement.Uncertain, t0.Add(-24*time.Hour+2*time.Minute+time.Second)),
			Answer{Kind: AnswerNotFound}, Decision{To: settlement.Pending, Resend: true}},
		tc{"not found/uncertain without first attempt is flagged", facts0(settlement.Uncertain, time.Time{}), Answer{Kind: AnswerNotFound}, Decision{To: settlement.Uncertain, Flag: ReasonKeyForgotten}},
		tc{"not found/sent young is flagged", facts0(settlement.Sent, young), Answer{Kind: AnswerNotFound}, Decision{To: settlement.Uncertain, Flag: ReasonAcceptedThenUnknown}},
		tc{"mismatch/sent is flagged", facts0(settlement.Sent, young), Answer{Kind: AnswerPayment, Payment: bankclient.Payment{ID: "p", Reference: "other", Status: bankclient.StatusSettled}}, Decision{To: settlement.Uncertain, Flag: ReasonPaymentMismatch}},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := DecideStatus(tt.f, policy, now, tt.a)
			got.Reason = ""
			if got != tt.want {
				t.Errorf("DecideStatus = %+v, want %+v", got, tt.want)
			}
			if got.WriteMovement != (got.To == settlement.Confirmed) {
				t.Errorf("movement %v with target %s", got.WriteMovement, got.To)
			}
			if got.Moves(tt.f.State) && !statemachine.Allowed(tt.f.State, got.To) {
				t.Errorf("decision %s → %s is not an allowed transition", tt.f.State, got.To)
			}
		})
	}
}

// TestDecisionsNeverFailWithoutDefinitiveAnswer runs every state and every
// answer kind that is not definitive and checks none leads to failed.
func TestDecisionsNeverFailWithoutDefinitiveAnswer(t *testing.T) {
	t.Parallel()
	for _, st := range []settlement.State{settlement.Pending, settlement.Sent, settlement.Uncertain} {
		for _, k := range []AnswerKind{AnswerAmbiguous, AnswerUnauthorized, AnswerNotFound} {
			for _, first := range []time.Time{{}, t0.Add(-time.Minute), t0.Add(-48 * time.Hour)} {
				f := facts0(st, first)
				if d := DecideStatus(f, policy, t0, Answer{Kind: k}); d.To == settlement.Failed || d.WriteMovement {
					t.Errorf("DecideStatus(%s, %s, first %v) = %+v", st, k, first, d)
				}
				if st == settlement.Pending {
					if d := DecideSend(f, policy, t0, Answer{Kind: k}); d.To == settlement.Failed || d.WriteMovement {
						t.Errorf("DecideSend(%s, %s) = %+v", st, k, d)
					}
				}
			}
		}
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	now := t0
	tests := []struct {
		f                 Facts
		wantSend, wantRes Action
	}{
		{facts0(settlement.Pending, time.Time{}), ActionSend, ActionSend},
		// Attempted before: the answer may have been lost after the bank
		// executed it; ask first, even with the key young (a POST claimed
		// a second before the TTL could reach the bank after it).
		{facts0(settlement.Pending, now.Add(-time.Hour)), ActionCheck, ActionCheck},
		{facts0(settlement.Pending, now.Add(-policy.KeyTTL+time.Second)), ActionCheck, ActionCheck},
		{facts0(settlement.Pending, now.Add(-25*time.Hour)), ActionCheck, ActionCheck},
		{facts0(settlement.Sent, now.Add(-time.Hour)), ActionNone, ActionCheck},
		{facts0(settlement.Uncertain, now.Add(-time.Hour)), ActionNone, ActionCheck},
		{facts0(settlement.Confirmed, now.Add(-time.Hour)), ActionNone, ActionNone},
		{facts0(settlement.Failed, now.Add(-time.Hour)), ActionNone, ActionNone},
	}
	for _, tt := range tests {
		if got := StartSend(tt.f); got != tt.wantSend {
			t.Errorf("StartSend(%s, first %v) = %s, want %s", tt.f.State, tt.f.FirstAttemptAt, got, tt.wantSend)
		}
		if got := StartResolve(tt.f); got != tt.wantRes {
			t.Errorf("StartResolve(%s, first %v) = %s, want %s", tt.f.State, tt.f.FirstAttemptAt, got, tt.wantRes)
		}
	}
}

func TestCheckDelayGrowsAndCaps(t *testing.T) {
	t.Parallel()
	p := Policy{CheckInterval: time.Second, MaxCheckInterval: 10 * time.Second}
	want := []time.Duration{1, 2, 4, 8, 10, 10, 10}
	for i, w := range want {
		if got := p.checkDelay(i); got != w*time.Second {
			t.Errorf("checkDelay(%d) = %s, want %s", i, got, w*time.Second)
		}
	}
	if got := p.checkDelay(1000); got != 10*time.Second {
		t.Errorf("checkDelay(1000) = %s", got)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		kind AnswerKind
		ok   bool
	}{
		{&bankclient.AmbiguousError{StatusCode: 503, Err: &bankclient.StatusError{StatusCode: 503}}, AnswerAmbiguous, true},
		{&bankclient.AmbiguousError{StatusCode: 401, Err: &bankclient.StatusError{StatusCode: 401}}, AnswerUnauthorized, true},
		{fmt.Errorf("wrapped: %w", bankclient.ErrKeyReuse), AnswerKeyReuse, true},
		{&bankclient.RejectedError{StatusCode: 422, Code: "rejected"}, AnswerRejected, true},
		{fmt.Errorf("x: %w", bankclient.ErrNotFound), AnswerNotFound, true},
		{errors.New("error before contacting bank: context canceled"), "", false},
	}
	for _, tt := range tests {
		a, ok := ClassifyStatus(bankclient.Payment{}, tt.err)
		if a.Kind != tt.kind || ok != tt.ok {
			t.Errorf("classify(%v) = %s, %v; want %s, %v", tt.err, a.Kind, ok, tt.kind, tt.ok)
		}
	}
}

// line is a statement line of amount (nil: none) in ccy with return
// reason rtr.
func line(amount *int64, ccy, rtr string) LineFacts {
	return LineFacts{Line: "1.1 E1", AmountMinor: amount, Currency: ccy, ReturnReason: rtr}
}

func minor(v int64) *int64 { return &v }

// TestDecideReturn: a credit reported by a statement, by state, amount,
// currency and return information. A return of the whole amount in the
// settlement's currency reverses a confirmed settlement and leaves one
// not seen to settle as it is (a statement never fails a settlement); an
// unknown or zero amount or another currency is flagged
// statement_amount_mismatch, another amount partial_return, whatever the
// state, never guessed; a credit without return information is no return.
func TestDecideReturn(t *testing.T) {
	t.Parallel()
	mismatch := func(st settlement.State) Decision { return Decision{To: st, Flag: ReasonStatementMismatch} }
	tests := []struct {
		name  string
		state settlement.State
		line  LineFacts
		want  Decision
	}{
		{"full", settlement.Confirmed, line(minor(1000), "EUR", "AC04"), Decision{To: settlement.Returned, WriteReversal: true, Definitive: true}},
		{"reversal mark only", settlement.Confirmed, LineFacts{AmountMinor: minor(1000), Currency: "EUR", Reversal: true}, Decision{To: settlement.Returned, WriteReversal: true, Definitive: true}},
		{"partial", settlement.Confirmed, line(minor(400), "EUR", "AC04"), Decision{To: settlement.Confirmed, Flag: ReasonPartialReturn}},
		{"zero", settlement.Confirmed, line(minor(0), "EUR", "AC04"), mismatch(settlement.Confirmed)},
		{"no amount", settlement.Confirmed, line(nil, "EUR", "AC04"), mismatch(settlement.Confirmed)},
		{"other currency", settlement.Confirmed, line(minor(1000), "USD", "AC04"), mismatch(settlement.Confirmed)},
		{"no return information", settlement.Confirmed, line(minor(1000), "EUR", ""), Decision{To: settlement.Confirmed}},
		{"zero without return information", settlement.Uncertain, line(minor(0), "EUR", ""), Decision{To: settlement.Uncertain}},
		{"full, sent", settlement.Sent, line(minor(1000), "EUR", "AC04"), Decision{To: settlement.Sent}},
		{"full, uncertain", settlement.Uncertain, line(minor(1000), "EUR", "AC04"), Decision{To: settlement.Uncertain}},
		{"full, pending after an attempt", settlement.Pending, line(minor(1000), "EUR", "AC04"), Decision{To: settlement.Pending}},
		{"zero, uncertain", settlement.Uncertain, line(minor(0), "EUR", "AC04"), mismatch(settlement.Uncertain)},
		{"zero, sent", settlement.Sent, line(minor(0), "EUR", "AC04"), mismatch(settlement.Uncertain)},
		{"other currency, sent", settlement.Sent, line(minor(1000), "JPY", "AC04"), mismatch(settlement.Uncertain)},
		{"partial, sent", settlement.Sent, line(minor(400), "EUR", "AC04"), Decision{To: settlement.Uncertain, Flag: ReasonPartialReturn}},
		{"partial, uncertain", settlement.Uncertain, line(minor(400), "EUR", "AC04"), Decision{To: settlement.Uncertain, Flag: ReasonPartialReturn}},
		{"partial, pending", settlement.Pending, line(minor(400), "EUR", "AC04"), Decision{To: settlement.Uncertain, Flag: ReasonPartialReturn}},
		{"returned", settlement.Returned, line(minor(1000), "EUR", "AC04"), Decision{To: settlement.Returned}},
		{"failed", settlement.Failed, line(minor(0), "EUR", "AC04"), Decision{To: settlement.Failed}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideReturn(facts0(tc.state, t0), tc.line)
			got.Reason = ""
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if got.To == settlement.Failed && tc.state != settlement.Failed {
				t.Errorf("a statement failed a %s settlement", tc.state)
			}
		})
	}
	// A return of a settlement never sent contradicts our records.
	got := DecideReturn(facts0(settlement.Pending, time.Time{}), line(minor(1000), "EUR", "AC04"))
	if got.To != settlement.Uncertain || got.Flag != ReasonReturnNeverSent || got.WriteReversal || got.WriteMovement {
		t.Errorf("a return of a settlement never sent: %+v, want uncertain flagged %s", got, ReasonReturnNeverSent)
	}
}
