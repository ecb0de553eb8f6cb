package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// Faults is the simulated bank's fault profile. Rates are probabilities in
// [0, 1], drawn per request attempt.
type Faults struct {
	// FailBefore answers 503 before doing anything.
	FailBefore float64
	// DropResponse executes the request and loses the answer (504 or a
	// closed connection: ambiguous either way).
	DropResponse float64
	// StatusError answers 503 to a status call.
	StatusError float64
	// Reject refuses a new payment definitively.
	Reject float64
	// SettlementFailure settles a new payment as failed.
	SettlementFailure float64
	// Latency is the most simulated time one request spends on the way to
	// the bank, and again on the way back; each leg draws in [0, Latency].
	Latency time.Duration
	// MinLatency is the least time of one leg (at most Latency).
	MinLatency time.Duration
	// Attempts is how many requests one call makes while answers are
	// ambiguous, as the HTTP client's in-call retries do (default 1).
	Attempts int
	// RetryWait is the simulated time between two in-call attempts.
	RetryWait time.Duration
}

// BankConfig configures a Bank.
type BankConfig struct {
	// Seed seeds the bank's own random source.
	Seed uint64
	// Clock is the simulated clock (required).
	Clock *settletest.ManualClock
	// KeyTTL is how long the bank remembers an idempotency key after it
	// first saw it; 0 remembers for ever. A POST with a forgotten key
	// creates a new payment.
	KeyTTL time.Duration
	// SettleDelayMin, SettleDelayMax bound the simulated time a new payment
	// takes to reach its final status (accepted, then processing halfway).
	SettleDelayMin, SettleDelayMax time.Duration
	// Caps is what the bank lets the engine ask (the zero value: nothing
	// but the POST); the calls it does not offer answer ErrUnsupported
	// without a request, and a replay answers as Caps.Replay says.
	Caps bankclient.Capabilities
	// ConsentDecideMax bounds the simulated time the customer takes to
	// decide a consent (Caps.Consent); ConsentReject of the consents are
	// rejected, ConsentAbandon never decided.
	ConsentDecideMax              time.Duration
	ConsentReject, ConsentAbandon float64
}

// CapabilitySets are the kinds of bank the simulation runs the engine
// against (DESIGN.md section 13): by our key (settle), by the bank's id
// only with the original response replayed and a searchable list
// (Stripe, which reports a return as a paid payout failing), by the bank's
// id only with the current resource replayed, no list and returns on
// statements only (UK Open Banking), a bank that offers only its list, and
// the Open Banking bank as bankclient/obie declares it: the by-id bank
// whose every payment needs the customer's consent first (the key window
// scaled to the simulation's key TTL).
var CapabilitySets = []struct {
	Name string
	Caps bankclient.Capabilities
}{
	{"by-key", bankclient.Capabilities{LookupByKey: true, Search: true, Replay: bankclient.ReplayStored}},
	{"by-id/original-replay/list", bankclient.Capabilities{LookupByID: true, Search: true, Replay: bankclient.ReplayOriginal,
		FailedAfterSettledIsReturn: true}},
	{"by-id/current-replay", bankclient.Capabilities{LookupByID: true, Replay: bankclient.ReplayCurrent,
		ReturnsOnStatementsOnly: true}},
	{"list-only", bankclient.Capabilities{Search: true, Replay: bankclient.ReplayStored}},
	{"consent/by-id/current-replay", bankclient.Capabilities{LookupByID: true, Replay: bankclient.ReplayCurrent,
		KeyWindow: EngineKeyTTL, Consent: true, Authorisation: true, ReturnsOnStatementsOnly: true, NoList: true}},
}

// Bank is an in-memory model of the bank protocol (DESIGN.md section 7)
// implementing bankclient.Bank with the error types of the HTTP client:
// idempotent by key, definitive rejections pinned to the key, key reuse,
// payments settling or failing after a delay, keys forgotten after KeyTTL,
// and the faults of its profile. It never sleeps and starts no goroutine:
// latency is simulated time. Every payment it executes stays in its books,
// so the checker can count payments per reference. It is safe for
// concurrent use, but deterministic only when calls are serialised (the
// scheduler does that).
type Bank struct {
	cfg   BankConfig
	clock *settletest.ManualClock

	mu       sync.Mutex
	rng      *rand.Rand
	faults   Faults
	returns  Returns
	payments []*simPayment
	keys     map[string]*keyEntry
	log      []string
	// consents, consentKeys and posts are the consent books (Caps.Consent):
	// every consent created, what each consent key names, and every payment
	// POST that reached the bank under a new key.
	consents    []*simConsent
	consentKeys map[string]*consentKeyEntry
	posts       []paymentPost
	// codes and tokens are the authorisation server's (Caps.Authorisation).
	codes             map[string]*simCode
	tokens            map[string]*simToken
	codeSeq, tokenSeq int
}

// simPayment is one executed payment.
type simPayment struct {
	id        string
	key       string
	req       bankclient.PaymentRequest
	createdAt time.Time
	dueAt     time.Time
	outcome   bankclient.Status
	// returnAt, when not zero, is when the settled payment comes back:
	// returnAmount of it (all of it, or a part: a partial return), for
	// returnReason.
	returnAt     time.Time
	returnAmount int64
	returnReason string
	// consent is the consent the payment consumed (Caps.Consent).
	consent *simConsent
}

// keyEntry is what the bank remembers of a key: its first request and its
// outcome (a payment, or a rejection when payment is nil).
type keyEntry struct {
	req       bankclient.PaymentRequest
	expiresAt time.Time // zero: never
	payment   *simPayment
	rejection string
}

var _ bankclient.Bank = (*Bank)(nil)

// NewBank returns a bank with no faults and empty books.
func NewBank(cfg BankConfig) *Bank {
	return &Bank{
		cfg:   cfg,
		clock: cfg.Clock,
		rng:   rand.New(rand.NewPCG(cfg.Seed, 0xba4c)),
		keys:  map[string]*keyEntry{},

		consentKeys: map[string]*consentKeyEntry{},
		codes:       map[string]*simCode{},
		tokens:      map[string]*simToken{},
	}
}

// SetFaults replaces the fault profile.
func (b *Bank) SetFaults(f Faults) {
	b.mu.Lock()
	b.faults = f
	b.mu.Unlock()
}

// Faults returns the fault profile.
func (b *Bank) Faults() Faults {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.faults
}

func (b *Bank) chance(p float64) bool { return p > 0 && b.rng.Float64() < p }

func (b *Bank) draw(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(b.rng.Int64N(int64(max) + 1))
}

// leg is the simulated time one request or answer spends on the wire.
func (b *Bank) leg(f Faults) time.Duration {
	if f.MinLatency >= f.Latency {
		return f.MinLatency
	}
	return f.MinLatency + b.draw(f.Latency-f.MinLatency)
}

func (b *Bank) logf(format string, args ...any) {
	b.log = append(b.log, b.clock.Now().Sub(Epoch).String()+" "+fmt.Sprintf(format, args...))
}

// ambiguous builds the error the HTTP client returns after attempts
// requests without a definitive answer.
func ambiguous(op string, status, attempts int) *bankclient.AmbiguousError {
	var cause error = &bankclient.StatusError{StatusCode: status}
	if status == 0 {
		cause = fmt.Errorf("simulated connection closed: %w", errConnClosed)
	}
	return &bankclient.AmbiguousError{Op: op, StatusCode: status, Attempts: attempts, Err: cause}
}

var errConnClosed = fmt.Errorf("EOF")

// Send implements bankclient.Bank.
func (b *Bank) Send(ctx context.Context, key string, req bankclient.PaymentRequest) (bankclient.SendResult, error) {
	return call(ctx, b, apiCall{
		op: bankclient.OpSend, doing: "sending payment", what: "send", subject: key,
		fail: func(f Faults) float64 { return f.FailBefore }, failed: "503 before processing",
		lost: func(f Faults) (int, bool) {
			if !b.chance(f.DropResponse) {
				return 0, false
			}
			if b.chance(0.5) {
				return 0, true
			}
			return http.StatusGatewayTimeout, true
		},
	}, func(time.Time) (bankclient.SendResult, error) { return b.execute(key, req) })
}

// apiCall says what one client call of the bank's API is, for call.
type apiCall struct {
	op      string // bankclient.Op… of its ambiguous answers
	doing   string // "sending payment": what its errors say it was doing
	what    string // "send": the call in the bank's log
	subject string // the key or id the call is about
	// fail returns the rate of a 503 before the bank decides a request;
	// failed is how the log says it.
	fail   func(Faults) float64
	failed string
	// lost, when set, says whether the answer to a request the bank
	// decided is lost, and with which status (0: the connection closed).
	lost func(Faults) (status int, lost bool)
}

// call carries out one client call c of up to f.Attempts requests, as
// bankclient's in-call retries do: each request after the first waits
// f.RetryWait and each crosses the wire (a leg of latency) both ways.
// decide decides a request that reached the bank at now. call returns
// the last request's ambiguous answer when every request got one, else
// what decide answered last, its error wrapped in what c was doing.
func call[T any](ctx context.Context, b *Bank, c apiCall, decide func(now time.Time) (T, error)) (T, error) {
	var res T
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("error %s %s: error before contacting bank: %w", c.doing, c.subject, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.faults
	var err error
	var last *bankclient.AmbiguousError
	for n := 1; n <= max(f.Attempts, 1); n++ {
		if n > 1 {
			b.clock.Advance(f.RetryWait)
		}
		b.clock.Advance(b.leg(f))
		if b.chance(c.fail(f)) {
			b.logf("%s %s attempt %d: %s", c.what, c.subject, n, c.failed)
			last = ambiguous(c.op, http.StatusServiceUnavailable, n)
			continue
		}
		res, err = decide(b.clock.Now())
		b.clock.Advance(b.leg(f))
		if c.lost != nil {
			if status, lost := c.lost(f); lost {
				b.logf("%s %s attempt %d: answer lost (%d)", c.what, c.subject, n, status)
				last = ambiguous(c.op, status, n)
				continue
			}
		}
		last = nil
		break
	}
	var zero T
	switch {
	case last != nil:
		return zero, fmt.Errorf("error %s %s: %w", c.doing, c.subject, last)
	case err != nil:
		return zero, fmt.Errorf("error %s %s: %w", c.doing, c.subject, err)
	}
	return res, nil
}

// lookup returns what the bank remembers of key now, forgetting it when
// its TTL has passed.
func (b *Bank) lookup(key string, now time.Time) *keyEntry {
	e := b.keys[key]
	if e != nil && !e.expiresAt.IsZero() && !now.Before(e.expiresAt) {
		delete(b.keys, key)
		b.logf("key %s forgotten", key)
		return nil
	}
	return e
}

// execute decides one request that reached the bank and records it.
func (b *Bank) execute(key string, req bankclient.PaymentRequest) (bankclient.SendResult, error) {
	now := b.clock.Now()
	if b.cfg.Caps.Authorisation {
		// The token first, replays included: a payment is made with the
		// account holder's live token of its consent, or not at all.
		if c := b.consentByID(req.ConsentID); c != nil && !b.tokenOK(req, c, now) {
			b.logf("send %s: 401, not the account holder's live token of consent %s", key, c.id)
			if access, _, _ := strings.Cut(strings.TrimPrefix(req.Grant, sealPrefix), "|"); b.lookup(key, now) == nil &&
				(b.tokens[access] == nil || b.tokens[access].consent != c) {
				// No token of the consent at all (an expired one is only
				// refused: the engine refreshes before it sends, but a
				// request can age on its way).
				b.posts = append(b.posts, paymentPost{key: key, reference: req.Reference, consentID: req.ConsentID, at: now,
					consentKey: c.key, status: c.status(now), noToken: true})
			}
			return bankclient.SendResult{}, unauthorised()
		}
	}
	// The token is not part of the request's identity.
	req.Grant = ""
	if e := b.lookup(key, now); e != nil {
		if e.req != req {
			b.logf("send %s: key reuse", key)
			return bankclient.SendResult{}, bankclient.ErrKeyReuse
		}
		if e.payment == nil {
			b.logf("send %s: rejection replayed", key)
			return bankclient.SendResult{}, &bankclient.RejectedError{StatusCode: http.StatusUnprocessableEntity, Code: settle.ErrorCodeRejected, Reason: e.rejection}
		}
		b.logf("send %s: replayed %s", key, e.payment.id)
		if b.cfg.Caps.Replay == bankclient.ReplayOriginal {
			// The original response, as it was when the payment was made.
			return bankclient.SendResult{Payment: b.report(e.payment, e.payment.createdAt)}, nil
		}
		return bankclient.SendResult{Payment: b.report(e.payment, now), Replayed: b.cfg.Caps.Replay == bankclient.ReplayStored}, nil
	}
	var consent *simConsent
	if b.cfg.Caps.Consent {
		// A refusal here pins nothing to the key, as at the bank.
		c, err := b.underConsent(key, req, now)
		if err != nil {
			return bankclient.SendResult{}, err
		}
		consent = c
	}
	e := &keyEntry{req: req}
	if b.cfg.KeyTTL > 0 {
		e.expiresAt = now.Add(b.cfg.KeyTTL)
	}
	b.keys[key] = e
	if req.AmountCents <= 0 || req.Reference == "" || b.chance(b.faults.Reject) {
		e.rejection = "declined: simulated"
		b.logf("send %s: rejected", key)
		return bankclient.SendResult{}, &bankclient.RejectedError{StatusCode: http.StatusUnprocessableEntity, Code: settle.ErrorCodeRejected, Reason: e.rejection}
	}
	p := &simPayment{
		id:        "pay_" + strconv.Itoa(len(b.payments)+1),
		key:       key,
		req:       req,
		createdAt: now,
		dueAt:     now.Add(b.cfg.SettleDelayMin + b.draw(b.cfg.SettleDelayMax-b.cfg.SettleDelayMin)),
		outcome:   bankclient.StatusSettled,
	}
	if b.chance(b.faults.SettlementFailure) {
		p.outcome = bankclient.StatusFailed
	}
	if consent != nil {
		p.consent, consent.payment = consent, p
	}
	e.payment = p
	b.payments = append(b.payments, p)
	b.logf("send %s: executed %s for %s (%d %s), will be %s", key, p.id, req.Reference, req.AmountCents, req.Currency, p.outcome)
	if p.outcome == bankclient.StatusSettled && b.chance(b.returns.Rate) {
		amount := req.AmountCents
		if amount > 1 && b.chance(b.returns.Partial) {
			amount = 1 + b.rng.Int64N(amount-1)
		}
		b.setReturn(p, p.dueAt.Add(b.draw(b.returns.AfterMax)), amount, returnReasons[b.rng.IntN(len(returnReasons))])
	}
	return bankclient.SendResult{Payment: b.report(p, now)}, nil
}

// view returns the payment as it stands in the bank's books at now: a
// payment returned in full is returned; one returned in part stays settled
// (the part that came back is a booking of its own, on statements).
func (p *simPayment) view(now time.Time) bankclient.Payment {
	status, updated, reason := bankclient.StatusAccepted, p.createdAt, ""
	mid := p.createdAt.Add(p.dueAt.Sub(p.createdAt) / 2)
	switch {
	case !now.Before(p.dueAt):
		status, updated = p.outcome, p.dueAt
		if p.outcome == bankclient.StatusFailed {
			reason = "settlement_failed: simulated"
		}
	case !now.Before(mid) && mid.After(p.createdAt):
		status, updated = bankclient.StatusProcessing, mid
	}
	if p.returnedAt(now) && p.returnAmount == p.req.AmountCents {
		status, updated, reason = bankclient.StatusReturned, p.returnAt, "returned: "+p.returnReason
	}
	return bankclient.Payment{
		ID: p.id, IdempotencyKey: p.key, Reference: p.req.Reference, Status: status,
		AmountCents: p.req.AmountCents, Currency: p.req.Currency,
		DebtorAccount: p.req.DebtorAccount, CreditorAccount: p.req.CreditorAccount,
		CreatedAt: p.createdAt, UpdatedAt: updated, FailureReason: reason,
	}
}

// StatusByKey implements bankclient.Bank.
func (b *Bank) StatusByKey(ctx context.Context, key string) (bankclient.Payment, error) {
	if !b.cfg.Caps.LookupByKey {
		return bankclient.Payment{}, fmt.Errorf("error getting payment status %s: %w", key, bankclient.ErrUnsupported)
	}
	return b.status(ctx, "status", key, bankclient.ErrNotFound, func(now time.Time) *simPayment {
		if e := b.lookup(key, now); e != nil {
			return e.payment
		}
		return nil
	})
}

// StatusByID implements bankclient.IDLookup: the payment by the bank's id,
// with the faults of a status call. Ids are never forgotten.
func (b *Bank) StatusByID(ctx context.Context, id string) (bankclient.Payment, error) {
	if !b.cfg.Caps.LookupByID {
		return bankclient.Payment{}, fmt.Errorf("error getting payment %s: %w", id, bankclient.ErrUnsupported)
	}
	return b.status(ctx, "status by id", id, bankclient.ErrPaymentNotFound, func(time.Time) *simPayment {
		for _, p := range b.payments {
			if p.id == id {
				return p
			}
		}
		return nil
	})
}

// status is one status call about subject, with the faults of its
// profile: find returns the payment the bank holds at now, or nil, which
// answers notFound.
func (b *Bank) status(ctx context.Context, what, subject string, notFound error, find func(now time.Time) *simPayment) (bankclient.Payment, error) {
	return call(ctx, b, apiCall{
		op: bankclient.OpStatus, doing: "getting payment", what: what, subject: subject,
		fail: func(f Faults) float64 { return f.StatusError }, failed: "503",
	}, func(now time.Time) (bankclient.Payment, error) {
		p := find(now)
		if p == nil {
			b.logf("%s %s: 404", what, subject)
			return bankclient.Payment{}, notFound
		}
		pay := b.report(p, now)
		b.logf("%s %s: %s %s", what, subject, pay.ID, pay.Status)
		return pay, nil
	})
}

// Statement implements bankclient.Bank: every payment ever executed, in
// order, the cursor being the index of the next one.
func (b *Bank) Statement(ctx context.Context, after string, limit int) (bankclient.StatementPage, error) {
	if !b.cfg.Caps.Search {
		return bankclient.StatementPage{}, fmt.Errorf("error reading statement: %w", bankclient.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return bankclient.StatementPage{}, fmt.Errorf("error reading statement: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	start := 0
	if after != "" {
		n, err := strconv.Atoi(after)
		if err != nil || n < 0 || n > len(b.payments) {
			return bankclient.StatementPage{}, fmt.Errorf("error reading statement: bad cursor %q", after)
		}
		start = n
	}
	if limit <= 0 {
		limit = 100
	}
	end := min(start+limit, len(b.payments))
	now := b.clock.Now()
	page := bankclient.StatementPage{}
	for _, p := range b.payments[start:end] {
		page.Payments = append(page.Payments, b.report(p, now))
	}
	if end < len(b.payments) {
		page.Next = strconv.Itoa(end)
	}
	return page, nil
}

// Payments returns every payment the bank ever executed, as it reports
// them now, in execution order (forgotten keys included).
func (b *Bank) Payments() []bankclient.Payment {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	out := make([]bankclient.Payment, 0, len(b.payments))
	for _, p := range b.payments {
		out = append(out, p.view(now))
	}
	return out
}

// Log returns the bank's event log (for a failing seed's report).
func (b *Bank) Log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.log...)
}

// plant records a payment the engine never asked for (the checker's own
// tests): status is its final status, reached at once.
func (b *Bank) plant(key string, req bankclient.PaymentRequest, status bankclient.Status) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.payments = append(b.payments, &simPayment{id: "pay_planted_" + strconv.Itoa(len(b.payments)+1), key: key,
		req: req, createdAt: now, dueAt: now, outcome: status})
}
