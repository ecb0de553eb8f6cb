// Command decisiontable writes the decision table of settle's engine as a
// Promela include file (model/decisions.pml) for the Spin model of
// DESIGN.md section 21. It calls the engine's pure decision functions
// (reconcile.StartSend, StartResolve, ChooseQuestion, DecideSend,
// DecideReplay, DecideStatus, DecideConsent, DecideReturn, DecidePaid) over
// every combination of the model's abstract inputs, for every capability
// set the model checks, and records what each decides: so the model checks
// the code's decisions, and a change to one without the other fails
// TestDecisionTableCurrent. statemachine.Allowed, the transitions the state
// machine accepts, is written beside them.
//
// Time is abstracted to classes of the key's age (never attempted, young:
// a request decided now still arrives while the bank remembers the key,
// edge: the key is younger than the TTL but a request decided now may
// arrive after it, old). Each class is sampled at several ages, its ends
// included, and the generator fails when a function decides differently
// inside one class: the abstraction would no longer fit the code.
//
// Run it with `go generate ./model`.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
	"github.com/settle/settle/internal/sim"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

func main() {
	out := flag.String("o", "decisions.pml", "the file to write")
	flag.Parse()
	b, err := Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "decisiontable:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "decisiontable:", err)
		os.Exit(1)
	}
}

// Bank is one capability set the model is checked against.
type Bank struct {
	// Macro is the value of BANK in the model (-DBANK=…) that selects it.
	Macro string
	// What says where the capabilities come from.
	What string
	Caps bankclient.Capabilities
}

// Banks are the capability sets: the three connectors' and the
// simulation's other kinds of bank.
func Banks() []Bank {
	simCaps := func(name string) bankclient.Capabilities {
		for _, s := range sim.CapabilitySets {
			if s.Name == name {
				return s.Caps
			}
		}
		panic("decisiontable: no simulation capability set " + name)
	}
	return []Bank{
		{"BANK_SETTLE", "settle.Connector (settle's own protocol: lookup by our key)", settle.Connector.Capabilities},
		{"BANK_STRIPE", "bankclient/stripe (by the bank's id, original response replayed, searchable list)", stripe.Capabilities},
		{"BANK_OBIE", "bankclient/obie (consent, by the bank's id, current resource replayed, no list)", obie.Capabilities},
		{"BANK_LISTONLY", "internal/sim list-only (only the bank's list can be searched)", simCaps("list-only")},
		{"BANK_BYID", "internal/sim by-id/current-replay (by the bank's id, no list, no consent)", simCaps("by-id/current-replay")},
	}
}

// value is one symbolic value of an input dimension.
type value struct {
	sym string
	// set applies the value to the inputs; it may return several samples
	// (the class's ends), every one of which must decide alike.
	set func(in *inputs) []func(*inputs)
}

// dim is one input dimension of a table.
type dim struct {
	name   string
	values []value
}

// code is the number of a dimension's value in the model: its state,
// key class, answer or question, or 0 and 1.
func code(sym string) int {
	switch sym {
	case "0":
		return 0
	case "1":
		return 1
	}
	for i, s := range []string{"S_PENDING", "S_SENT", "S_UNCERTAIN", "S_CONFIRMED", "S_FAILED", "S_RETURNED"} {
		if s == sym {
			return i
		}
	}
	for i, s := range []string{"K_NONE", "K_YOUNG", "K_EDGE", "K_OLD"} {
		if s == sym {
			return i
		}
	}
	for i, s := range answerOrder {
		if s == sym {
			return i
		}
	}
	for i, q := range questionOrder {
		if questionSyms[q] == sym {
			return i
		}
	}
	panic("decisiontable: no code for " + sym)
}

// width is the extent of the dimension in the table's index: its values'
// codes need not be consecutive (the answers a call can give are a subset
// of all answers); the entries between them are left undefined (-1).
func (d dim) width() int {
	w := 0
	for _, v := range d.values {
		w = max(w, code(v.sym)+1)
	}
	return w
}

// inputs are the arguments of one call.
type inputs struct {
	f   reconcile.Facts
	p   reconcile.Policy
	now time.Time
	a   reconcile.Answer
	q   reconcile.Question
	l   reconcile.LineFacts
	to  settlement.State
}

// table is one decision function over its dimensions.
type table struct {
	name, doc string
	dims      []dim
	eval      func(in inputs) string
}

var (
	now    = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	amount = int64(1250)
)

func policy(caps bankclient.Capabilities) reconcile.Policy {
	return reconcile.Policy{
		KeyTTL:           reconcile.DefaultKeyTTL,
		CheckInterval:    reconcile.DefaultCheckInterval,
		MaxCheckInterval: reconcile.DefaultMaxCheckInterval,
		Bank:             caps,
		RequestBound:     reconcile.DefaultRequestBound,
		ReturnWatch:      7 * 24 * time.Hour,
		ConsentWait:      reconcile.DefaultConsentWait,
	}
}

func one(f func(*inputs)) func(*inputs) []func(*inputs) {
	return func(*inputs) []func(*inputs) { return []func(*inputs){f} }
}

// The states, in the model's numbering.
var stateSyms = map[settlement.State]string{
	settlement.Pending: "S_PENDING", settlement.Sent: "S_SENT", settlement.Uncertain: "S_UNCERTAIN",
	settlement.Confirmed: "S_CONFIRMED", settlement.Failed: "S_FAILED", settlement.Returned: "S_RETURNED",
}

func stateDim(states ...settlement.State) dim {
	d := dim{name: "state"}
	for _, s := range states {
		d.values = append(d.values, value{sym: stateSyms[s], set: one(func(in *inputs) {
			in.f.State = s
			if s == settlement.Confirmed || s == settlement.Returned {
				in.f.ConfirmedAt = now.Add(-time.Hour)
			}
		})})
	}
	return d
}

var allStates = []settlement.State{settlement.Pending, settlement.Sent, settlement.Uncertain,
	settlement.Confirmed, settlement.Failed, settlement.Returned}

// keyDim is the age of the key: the first attempt's time against now.
func keyDim() dim {
	ages := func(ages ...func(p reconcile.Policy) time.Duration) func(*inputs) []func(*inputs) {
		return func(in *inputs) []func(*inputs) {
			var fs []func(*inputs)
			for _, age := range ages {
				fs = append(fs, func(in *inputs) { in.f.FirstAttemptAt = now.Add(-age(in.p)) })
			}
			return fs
		}
	}
	return dim{name: "key", values: []value{
		{"K_NONE", one(func(in *inputs) { in.f.FirstAttemptAt = time.Time{} })},
		{"K_YOUNG", ages(
			func(reconcile.Policy) time.Duration { return 0 },
			func(reconcile.Policy) time.Duration { return time.Second },
			func(p reconcile.Policy) time.Duration { return p.KeyTTL - p.RequestBound - time.Nanosecond },
		)},
		{"K_EDGE", ages(
			func(p reconcile.Policy) time.Duration { return p.KeyTTL - p.RequestBound },
			func(p reconcile.Policy) time.Duration { return p.KeyTTL - p.RequestBound/2 },
			func(p reconcile.Policy) time.Duration { return p.KeyTTL - time.Nanosecond },
		)},
		{"K_OLD", ages(
			func(p reconcile.Policy) time.Duration { return p.KeyTTL },
			func(p reconcile.Policy) time.Duration { return p.KeyTTL + time.Second },
			func(p reconcile.Policy) time.Duration { return 30 * p.KeyTTL },
		)},
	}}
}

func boolDim(name string, set func(in *inputs, v bool)) dim {
	return dim{name: name, values: []value{
		{"0", one(func(in *inputs) { set(in, false) })},
		{"1", one(func(in *inputs) { set(in, true) })},
	}}
}

func payment(s bankclient.Status) reconcile.Answer {
	return reconcile.Answer{Kind: reconcile.AnswerPayment, HTTPStatus: 200, Payment: bankclient.Payment{
		ID: "p1", IdempotencyKey: "k1", Reference: "s1", Status: s, AmountCents: amount, Currency: "EUR",
	}}
}

// answers are the bank's answers in the model's numbering (A_*).
var answers = map[string]reconcile.Answer{
	"A_ACCEPTED":   payment(bankclient.StatusAccepted),
	"A_PROCESSING": payment(bankclient.StatusProcessing),
	"A_SETTLED":    payment(bankclient.StatusSettled),
	"A_FAILED":     payment(bankclient.StatusFailed),
	"A_RETURNED":   payment(bankclient.StatusReturned),
	"A_NOTFOUND":   {Kind: reconcile.AnswerNotFound, HTTPStatus: 404, Detail: "not found"},
	"A_REJECTED":   {Kind: reconcile.AnswerRejected, HTTPStatus: 422, Detail: "rejected"},
	"A_KEYREUSE":   {Kind: reconcile.AnswerKeyReuse, HTTPStatus: 422, Detail: "idempotency_key_reuse"},
	"A_AMBIGUOUS":  {Kind: reconcile.AnswerAmbiguous, HTTPStatus: 503, Detail: "timeout"},
	"A_429":        {Kind: reconcile.AnswerAmbiguous, HTTPStatus: 429, RetryAfter: time.Second, Detail: "rate limited"},
	"A_UNAUTH":     {Kind: reconcile.AnswerUnauthorized, HTTPStatus: 401, Detail: "unauthorized"},
	"A_DUPLICATE":  {Kind: reconcile.AnswerDuplicate, Detail: "two payments with our reference"},
	"A_C_AUTH":     consent(bankclient.ConsentAuthorised),
	"A_C_AWAIT":    consent(bankclient.ConsentAwaiting),
	"A_C_REJECTED": consent(bankclient.ConsentRejected),
	"A_C_CONSUMED": consent(bankclient.ConsentConsumed),
}

// answerOrder numbers the answers (A_ACCEPTED is 0).
var answerOrder = []string{"A_ACCEPTED", "A_PROCESSING", "A_SETTLED", "A_FAILED", "A_RETURNED",
	"A_NOTFOUND", "A_REJECTED", "A_KEYREUSE", "A_AMBIGUOUS", "A_429", "A_UNAUTH", "A_DUPLICATE",
	"A_C_AUTH", "A_C_AWAIT", "A_C_REJECTED", "A_C_CONSUMED"}

func consent(s bankclient.ConsentStatus) reconcile.Answer {
	return reconcile.Answer{Kind: reconcile.AnswerConsent, HTTPStatus: 200, Consent: bankclient.Consent{ID: "c1", Status: s, BankStatus: string(s)}}
}

func answerDim(syms ...string) dim {
	d := dim{name: "answer"}
	for _, s := range syms {
		a, ok := answers[s]
		if !ok {
			panic("decisiontable: unknown answer " + s)
		}
		d.values = append(d.values, value{sym: s, set: one(func(in *inputs) { in.a = a })})
	}
	return d
}

// What each call can answer (reconcile.ClassifySend, ClassifyStatus and
// search, ClassifyConsent).
var (
	sendAnswers    = []string{"A_ACCEPTED", "A_PROCESSING", "A_SETTLED", "A_FAILED", "A_RETURNED", "A_REJECTED", "A_KEYREUSE", "A_AMBIGUOUS", "A_429", "A_UNAUTH"}
	statusAnswers  = []string{"A_ACCEPTED", "A_PROCESSING", "A_SETTLED", "A_FAILED", "A_RETURNED", "A_NOTFOUND", "A_AMBIGUOUS", "A_429", "A_UNAUTH", "A_DUPLICATE"}
	consentAnswers = []string{"A_C_AUTH", "A_C_AWAIT", "A_C_REJECTED", "A_C_CONSUMED", "A_REJECTED", "A_KEYREUSE", "A_NOTFOUND", "A_AMBIGUOUS", "A_429", "A_UNAUTH"}
)

var questionSyms = map[reconcile.Question]string{
	reconcile.AskByKey: "Q_KEY", reconcile.AskByReference: "Q_REF", reconcile.AskByID: "Q_ID",
	reconcile.AskReplay: "Q_REPLAY", reconcile.AskSearch: "Q_SEARCH", reconcile.AskNothing: "Q_NONE",
}

var questionOrder = []reconcile.Question{reconcile.AskByKey, reconcile.AskByReference, reconcile.AskByID,
	reconcile.AskReplay, reconcile.AskSearch, reconcile.AskNothing}

// statusQuestionDim: the questions DecideStatus answers (every one but the
// replay, which DecideReplay answers, and none).
func statusQuestionDim() dim {
	d := dim{name: "question"}
	for _, q := range []reconcile.Question{reconcile.AskByKey, reconcile.AskByReference, reconcile.AskByID, reconcile.AskSearch} {
		d.values = append(d.values, value{sym: questionSyms[q], set: one(func(in *inputs) { in.q = q })})
	}
	return d
}

var actionSyms = map[reconcile.Action]string{reconcile.ActionNone: "ACT_NONE", reconcile.ActionSend: "ACT_SEND", reconcile.ActionCheck: "ACT_CHECK"}

func action(a reconcile.Action) string {
	s, ok := actionSyms[a]
	if !ok {
		panic(fmt.Sprintf("decisiontable: unknown action %q", a))
	}
	return s
}

// decision is the model's view of a Decision: the target state and the
// effects, as DEC(state, flags).
func decision(d reconcile.Decision) string {
	to, ok := stateSyms[d.To]
	if !ok {
		panic(fmt.Sprintf("decisiontable: decision to unknown state %q", d.To))
	}
	var fl []string
	for _, f := range []struct {
		on  bool
		sym string
	}{
		{d.Flag != "", "D_FLAG"}, {d.WriteMovement, "D_MOVE"}, {d.WriteReversal, "D_REVERSE"},
		{d.Resend, "D_RESEND"}, {d.Pay, "D_PAY"}, {!d.NextCheckAt.IsZero(), "D_CHECK"}, {d.Definitive, "D_DEF"},
	} {
		if f.on {
			fl = append(fl, f.sym)
		}
	}
	if len(fl) == 0 {
		fl = []string{"0"}
	}
	return "DEC(" + to + ", " + strings.Join(fl, "|") + ")"
}

func lineDims() []dim {
	return []dim{
		boolDim("marked", func(in *inputs, v bool) {
			in.l.ReturnReason = ""
			if v {
				in.l.ReturnReason = "AC04"
			}
		}),
		boolDim("amount_ok", func(in *inputs, v bool) {
			a := amount
			if !v {
				a = amount - 1
			}
			in.l.AmountMinor, in.l.Currency = &a, "EUR"
		}),
	}
}

func tables() []table {
	key := keyDim()
	return []table{
		{name: "allowed", doc: "statemachine.Allowed: the transitions the state machine allows (1) and refuses (0)",
			dims: []dim{stateDim(allStates...), {name: "to", values: func() []value {
				var vs []value
				for _, s := range allStates {
					vs = append(vs, value{sym: stateSyms[s], set: one(func(in *inputs) { in.to = s })})
				}
				return vs
			}()}},
			eval: func(in inputs) string {
				return map[bool]string{false: "0", true: "1"}[statemachine.Allowed(in.f.State, in.to)]
			}},
		{name: "start_send", doc: "reconcile.StartSend: what a send_instruction job does (ACT_*)",
			dims: []dim{stateDim(allStates...), key},
			eval: func(in inputs) string { return action(reconcile.StartSend(in.f)) }},
		{name: "start_resolve", doc: "reconcile.StartResolve: what a status check job does (ACT_*); watched: confirmed and inside the return watch",
			dims: []dim{stateDim(allStates...), key, boolDim("watched", func(in *inputs, v bool) { in.f.Watched = v })},
			eval: func(in inputs) string { return action(reconcile.StartResolve(in.f)) }},
		{name: "question", doc: "reconcile.ChooseQuestion: the strongest safe question (Q_*); payid: an answer gave the bank's payment id",
			dims: []dim{stateDim(allStates...), key, boolDim("payid", func(in *inputs, v bool) {
				in.f.BankPaymentID = ""
				if v {
					in.f.BankPaymentID = "p1"
				}
			})},
			eval: func(in inputs) string {
				q := reconcile.ChooseQuestion(in.f, in.p, in.now)
				s, ok := questionSyms[q]
				if !ok {
					panic(fmt.Sprintf("decisiontable: unknown question %q", q))
				}
				return s
			}},
		{name: "send", doc: "reconcile.DecideSend: the answer to the POST of a pending settlement",
			dims: []dim{stateDim(settlement.Pending), key, answerDim(sendAnswers...)},
			eval: func(in inputs) string { return decision(reconcile.DecideSend(in.f, in.p, in.now, in.a)) }},
		{name: "replay", doc: "reconcile.DecideReplay: the answer to the identical POST repeated under the key (Q_REPLAY)",
			dims: []dim{stateDim(settlement.Pending, settlement.Sent, settlement.Uncertain), key, answerDim(sendAnswers...)},
			eval: func(in inputs) string { return decision(reconcile.DecideReplay(in.f, in.p, in.now, in.a)) }},
		{name: "status", doc: "reconcile.DecideStatus: the answer to a status question (by key, reference, id or a search of the list)",
			dims: []dim{stateDim(settlement.Pending, settlement.Sent, settlement.Uncertain, settlement.Confirmed), key, statusQuestionDim(), answerDim(statusAnswers...)},
			eval: func(in inputs) string {
				in.a.Question = in.q
				return decision(reconcile.DecideStatus(in.f, in.p, in.now, in.a))
			}},
		{name: "consent", doc: "reconcile.DecideConsent: the answer about a pending settlement's consent; expired: the consent wait is over",
			dims: []dim{{name: "expired", values: []value{
				{"0", func(in *inputs) []func(*inputs) {
					return []func(*inputs){
						func(in *inputs) { in.f.ConsentRequestedAt = now },
						func(in *inputs) { in.f.ConsentRequestedAt = now.Add(-in.p.ConsentWait + time.Nanosecond) },
					}
				}},
				{"1", func(in *inputs) []func(*inputs) {
					return []func(*inputs){
						func(in *inputs) { in.f.ConsentRequestedAt = now.Add(-in.p.ConsentWait) },
						func(in *inputs) { in.f.ConsentRequestedAt = now.Add(-30 * in.p.ConsentWait) },
					}
				}},
			}}, answerDim(consentAnswers...)},
			eval: func(in inputs) string {
				in.f.State, in.f.FirstAttemptAt, in.f.ConsentID = settlement.Pending, time.Time{}, "c1"
				in.f.ConsentStatus = bankclient.ConsentAwaiting
				// The model's customer authorises at the bank and their
				// token reaches settle in one move: the redirect and the
				// code exchange are tested by reconcile, sim and e2e.
				in.f.Granted = true
				return decision(reconcile.DecideConsent(in.f, in.p, in.now, in.a))
			}},
		{name: "return", doc: "reconcile.DecideReturn: a statement's credit line under the settlement's reference; marked: it carries return information",
			dims: append([]dim{stateDim(allStates...), key}, lineDims()...),
			eval: func(in inputs) string { return decision(reconcile.DecideReturn(in.f, in.l)) }},
		{name: "paid", doc: "reconcile.DecidePaid: a statement's debit line under the settlement's reference",
			dims: append([]dim{stateDim(allStates...), key}, lineDims()...),
			eval: func(in inputs) string { return decision(reconcile.DecidePaid(in.f, in.l)) }},
	}
}

// evaluate returns the table's values in index order (the last dimension
// fastest) for one bank.
func (t table) evaluate(b Bank) ([]string, error) {
	var vals []string
	idx := make([]int, len(t.dims))
	for {
		base := inputs{p: policy(b.Caps), now: now, f: reconcile.Facts{
			SettlementID: "s1", AmountCents: amount, Currency: "EUR", BankReference: "s1",
		}}
		// Every sample of every dimension's class must decide alike.
		samples := []inputs{base}
		for i, d := range t.dims {
			var next []inputs
			for _, in := range samples {
				for _, s := range d.values[idx[i]].set(&in) {
					c := in
					s(&c)
					next = append(next, c)
				}
			}
			samples = next
		}
		got := ""
		for _, in := range samples {
			v := t.eval(in)
			if got != "" && v != got {
				return nil, fmt.Errorf("%s decides %s and %s inside one class of inputs %s (bank %s): the model's abstraction no longer fits the code",
					t.name, got, v, t.describe(idx), b.Macro)
			}
			got = v
		}
		vals = append(vals, got)
		i := len(idx) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(t.dims[i].values) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return vals, nil
		}
	}
}

func (t table) describe(idx []int) string {
	var parts []string
	for i, d := range t.dims {
		parts = append(parts, d.name+"="+d.values[idx[i]].sym)
	}
	return strings.Join(parts, " ")
}

// Generate returns the contents of decisions.pml.
func Generate() ([]byte, error) {
	var w bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("/* Code generated by go generate ./model (model/decisiontable); DO NOT EDIT.\n")
	p(" *\n * The decision table of settle's engine, computed by calling the decision\n")
	p(" * functions of package reconcile over every abstract input, for each\n")
	p(" * capability set (BANK). Key age classes (policy: key TTL %s, request\n", reconcile.DefaultKeyTTL)
	p(" * bound %s): K_NONE never attempted; K_YOUNG a request decided now\n", reconcile.DefaultRequestBound)
	p(" * arrives while the bank remembers the key; K_EDGE younger than the TTL,\n")
	p(" * but a request decided now may arrive after it; K_OLD past the TTL.\n")
	p(" * A decision is DEC(target state, effects): D_FLAG needs_investigation,\n")
	p(" * D_MOVE the payout movement, D_REVERSE the reversal, D_RESEND back to\n")
	p(" * pending and POST again, D_PAY the consent is authorised: POST now,\n")
	p(" * D_CHECK a further check is scheduled, D_DEF the bank said something\n")
	p(" * definite (an earlier flag is cleared).\n */\n\n")

	p("#define S_PENDING 0\n#define S_SENT 1\n#define S_UNCERTAIN 2\n#define S_CONFIRMED 3\n#define S_FAILED 4\n#define S_RETURNED 5\n\n")
	p("#define K_NONE 0\n#define K_YOUNG 1\n#define K_EDGE 2\n#define K_OLD 3\n\n")
	p("#define ACT_NONE 0\n#define ACT_SEND 1\n#define ACT_CHECK 2\n\n")
	for i, q := range questionOrder {
		p("#define %s %d\n", questionSyms[q], i)
	}
	p("\n")
	for i, a := range answerOrder {
		p("#define %s %d\n", a, i)
	}
	p("\n#define D_FLAG 8\n#define D_MOVE 16\n#define D_REVERSE 32\n#define D_RESEND 64\n#define D_PAY 128\n#define D_CHECK 256\n#define D_DEF 512\n")
	p("#define DEC(to, effects) ((to) | (effects))\n#define D_TO(d) ((d) & 7)\n#define D_HAS(d, e) (((d) & (e)) != 0)\n\n")

	banks := Banks()
	p("/* The capability sets. */\n")
	for i, b := range banks {
		p("#define %s %d /* %s */\n", b.Macro, i+1, b.What)
	}
	p("#ifndef BANK\n#define BANK BANK_SETTLE\n#endif\n\n")
	for i, b := range banks {
		kw := "#elif"
		if i == 0 {
			kw = "#if"
		}
		p("%s BANK == %s\n", kw, b.Macro)
		c := b.Caps
		for _, cap := range []struct {
			name string
			on   bool
		}{
			{"CAP_LOOKUP_KEY", c.LookupByKey}, {"CAP_LOOKUP_REF", c.LookupByReference}, {"CAP_LOOKUP_ID", c.LookupByID},
			{"CAP_SEARCH", c.Search}, {"CAP_REPLAY_ORIGINAL", c.Replay == bankclient.ReplayOriginal},
			{"CAP_FAILED_IS_RETURN", c.FailedAfterSettledIsReturn}, {"CAP_CONSENT", c.Consent},
			{"CAP_RETURNS_ON_STATEMENTS_ONLY", c.ReturnsOnStatementsOnly}, {"CAP_NO_LIST", c.NoList},
		} {
			p("#define %s %d\n", cap.name, map[bool]int{false: 0, true: 1}[cap.on])
		}
	}
	p("#else\n#error \"BANK names no capability set\"\n#endif\n\n")

	for _, t := range tables() {
		var ixArgs, ixExpr []string
		for i, d := range t.dims {
			arg := fmt.Sprintf("x%d", i)
			ixArgs = append(ixArgs, arg)
			if i == 0 {
				ixExpr = append(ixExpr, "("+arg+")")
			} else {
				ixExpr = []string{fmt.Sprintf("(%s)*%d + (%s)", strings.Join(ixExpr, ""), d.width(), arg)}
			}
		}
		var names []string
		for _, d := range t.dims {
			var vs []string
			for _, v := range d.values {
				vs = append(vs, v.sym)
			}
			names = append(names, d.name+" {"+strings.Join(vs, " ")+"}")
		}
		p("/* %s\n * index: %s */\n", t.doc, strings.Join(names, ", "))
		p("#define IX_%s(%s) (%s)\n", t.name, strings.Join(ixArgs, ", "), ixExpr[0])
		p("hidden short T_%s[%d];\n", t.name, t.size())
		last := t.dims[len(t.dims)-1]
		var rowArgs, body []string
		rowArgs = append(rowArgs, ixArgs[:len(ixArgs)-1]...)
		for j, v := range last.values {
			rowArgs = append(rowArgs, fmt.Sprintf("v%d", j))
			ix := append(append([]string{}, ixArgs[:len(ixArgs)-1]...), v.sym)
			body = append(body, fmt.Sprintf("T_%s[IX_%s(%s)] = v%d", t.name, t.name, strings.Join(ix, ", "), j))
		}
		p("#define ROW_%s(%s) \\\n\t%s\n\n", t.name, strings.Join(rowArgs, ", "), strings.Join(body, "; \\\n\t"))
	}

	// The values, one row per line (the last dimension's values in order),
	// per bank where a row differs.
	p("/* Decisions fills the tables: run it first and wait for it to end. */\n")
	p("proctype Decisions() {\n\tint i;\n\td_step {\n")
	for _, t := range tables() {
		p("\t\ti = 0; do :: i < %d -> T_%s[i] = -1; i++ :: else -> break od;\n", t.size(), t.name)
	}
	for _, t := range tables() {
		per := make([][]string, len(banks))
		for i, b := range banks {
			v, err := t.evaluate(b)
			if err != nil {
				return nil, err
			}
			per[i] = t.rows(v)
		}
		p("\t\t/* %s */\n", t.name)
		for r := range per[0] {
			same := true
			for i := range per {
				same = same && per[i][r] == per[0][r]
			}
			if same {
				p("\t\t%s\n", per[0][r])
				continue
			}
			for i := range banks {
				if i > 0 && per[i][r] == per[i-1][r] {
					continue
				}
				var on []string
				for j := i; j < len(banks) && per[j][r] == per[i][r]; j++ {
					on = append(on, "BANK == "+banks[j].Macro)
				}
				p("#if %s\n\t\t%s\n#endif\n", strings.Join(on, " || "), per[i][r])
			}
		}
	}
	p("\t}\n}\n")
	return w.Bytes(), nil
}

// size is the number of entries of the table's index.
func (t table) size() int {
	n := 1
	for _, d := range t.dims {
		n *= d.width()
	}
	return n
}

// rows renders the values as calls of the table's row macro: every
// dimension but the last, then the last dimension's values in order.
func (t table) rows(vals []string) []string {
	last := t.dims[len(t.dims)-1]
	n := len(last.values)
	idx := make([]int, len(t.dims)-1)
	var rows []string
	for row := 0; row*n < len(vals); row++ {
		var args []string
		for i := range idx {
			args = append(args, t.dims[i].values[idx[i]].sym)
		}
		args = append(args, vals[row*n:row*n+n]...)
		rows = append(rows, "ROW_"+t.name+"("+strings.Join(args, ", ")+");")
		for i := len(idx) - 1; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(t.dims[i].values) {
				break
			}
			idx[i] = 0
		}
	}
	return rows
}
