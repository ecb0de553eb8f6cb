package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/events"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/reconcile"
)

// The engine's timing in the simulation. The key TTL is short so that a
// schedule crosses it often.
const (
	EngineKeyTTL     = time.Hour
	checkInterval    = 2 * time.Second
	maxCheckInterval = 10 * time.Minute
	lease            = 2 * time.Minute
	settleDelayMax   = 5 * time.Minute
	// requestBound bounds the simulated time from a decision to its
	// request's arrival at the bank: a call of the worst profile (three
	// attempts, two 15 s legs each, 5 s between) behind two more actors'.
	requestBound   = 10 * time.Minute
	recoveryRounds = 40
	// returnWatch is the engine's --return-watch: the status API is asked
	// whether a confirmed payment came back for this long. Returns come
	// up to returnAfterMax after settlement, so some come after the watch
	// and only a statement tells of them.
	returnWatch    = 3 * time.Hour
	returnAfterMax = 4 * time.Hour
)

// Config configures one simulated run.
type Config struct {
	// Seed determines everything else.
	Seed uint64
	// Settlements is how many settlements the schedule has; 0 draws 5..30.
	Settlements int
	// Steps is how many steps the faulty phase has; 0 draws 4..8 per
	// settlement.
	Steps int
	// KeyTTLMargin configures the engine's key TTL this much below the
	// bank's (EngineKeyTTL): an operator's safety margin. Default 0, the
	// documented setup (--bank-key-ttl equal to the bank's TTL).
	KeyTTLMargin time.Duration
	// Bank names the capability set of CapabilitySets the bank has; empty
	// takes the seed's (seed modulo their number), so a range of seeds
	// runs every kind of bank.
	Bank string
	// Plant configures the engine wrongly on purpose, to prove the
	// checker catches the double payment it allows: "replay-after-window"
	// (replays decided as if requests arrived before they were sent) or
	// "resend-after-window" (the engine believes keys live a hundred times
	// longer than the bank keeps them), "second-reversal" (the UNIQUE
	// (settlement_id, kind) of ledger_movements dropped and every reversal
	// written twice) or "reversal-outside-transition" (the reversal
	// committed on its own, the process dying before the transition's
	// transaction commits); at a consent bank, "consent-misread" (a
	// consent awaiting authorisation read as authorised, so the payment is
	// POSTed before it) or "consent-wait-forever" (the engine never gives up
	// on a consent the customer never decides), at a consent bank whose
	// payments need the account holder's token "grant-dropped" (the
	// payment sent without it); in a run that checks funds,
	// "funds-check-off" (intake does not check them, so payouts spend
	// money the account does not have). Empty: the engine as shipped.
	Plant string
	// Returns gives every schedule's bank a return profile (drawn per
	// seed); otherwise a quarter of the seeds return nothing.
	Returns bool
	// Funds runs intake with --funds-check, every paying account credited
	// first with between a third and all of what its payouts ask (drawn
	// per seed), so that some payouts are refused for insufficient funds;
	// otherwise a third of the seeds do.
	Funds bool
}

// capabilities returns the capability set of cfg.
func (cfg Config) capabilities() (string, bankclient.Capabilities, error) {
	for _, cs := range CapabilitySets {
		if cs.Name == cfg.Bank {
			return cs.Name, cs.Caps, nil
		}
	}
	if cfg.Bank != "" {
		return "", bankclient.Capabilities{}, fmt.Errorf("unknown capability set %q", cfg.Bank)
	}
	cs := CapabilitySets[cfg.Seed%uint64(len(CapabilitySets))]
	return cs.Name, cs.Caps, nil
}

// Result is what a run did and found.
type Result struct {
	Seed uint64
	// Config is the configuration the run had.
	Config Config
	// Trace is the schedule as executed, one line per step (with what the
	// engine answered), then the recovery phase.
	Trace []string
	// BankLog is the bank's event log.
	BankLog []string
	// Violations are the broken invariants; empty when the run is clean.
	Violations []string
	// Stats counts what happened, for the report.
	Stats Stats
}

// Stats counts the outcomes of a run.
type Stats struct {
	Settlements, Steps, Actors, Crashes, Cancels     int
	Confirmed, Failed, Flagged, BankPayments, Rounds int
	// Returns are the payments the bank returned (Partial of them in
	// part), Returned the settlements that ended returned, Webhooks and
	// Statements the hints and statement imports of the schedule.
	Returns, Partial, Returned, Webhooks, Statements int
	// Consents are the consents the bank created (a consent bank only).
	Consents int
	// Events are the outcome events the model receiver checked, and
	// EventDuplicates the deliveries it had already.
	Events, EventDuplicates int
	// FundsRuns counts the schedules whose intake checked funds (1 or 0
	// for one run), Refused the payouts they refused for insufficient
	// funds.
	FundsRuns, Refused int
}

// Report formats the result for a failing test: the seed, how to replay
// it, the violations, the trace and the bank's log.
func (r *Result) Report() string {
	var b strings.Builder
	name := fmt.Sprintf("seed %d", r.Seed)
	if r.Seed == 0 {
		name = "scripted schedule"
	}
	fmt.Fprintf(&b, "%s: %d violation(s)", name, len(r.Violations))
	if r.Seed != 0 {
		test := "TestSimulation"
		if r.Config.Returns {
			test = "TestSimulationReturns"
		}
		fmt.Fprintf(&b, "; replay with: go test ./internal/sim -run '%s$' -sim.seed=%d -v", test, r.Seed)
	}
	b.WriteString("\n")
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	b.WriteString("schedule:\n")
	for _, l := range r.Trace {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString("bank:\n")
	for _, l := range r.BankLog {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// payloads are the events a producer may deliver for one settlement: the
// original and a conflicting variant (another amount, currency or
// beneficiary under the same settlement_id).
type payloads struct {
	orig, conflict intake.Event
}

// delivery names one of a settlement's payloads.
type delivery struct {
	idx      int
	conflict bool
}

// run is the state of one simulated run.
type run struct {
	cfg Config
	// relay delivers the outcome events to rcv (events.go).
	relay *events.Relay
	rcv   *modelReceiver
	rng   *rand.Rand
	clock *settletest.ManualClock
	bank  *Bank
	pool  *pgxpool.Pool
	sched *scheduler
	// engineTTL is the Resolver's KeyTTL.
	engineTTL time.Duration
	// caps is what the bank offers (and the Resolver is told).
	caps bankclient.Capabilities

	events []payloads
	// delivered marks settlements with at least one delivery attempted.
	delivered map[int]bool
	// first is the payload whose intake transaction committed first: the
	// one the settlement must carry.
	first map[string]intake.Event
	// unacked are deliveries with no answer yet; the producer redelivers
	// them (in the recovery phase at the latest).
	unacked map[delivery]bool
	// conflictsAcked counts 409 answers per settlement.
	conflictsAcked map[string]int
	// funds says intake runs with the funds check (Config.Funds);
	// refused marks the settlements whose first committed delivery was
	// refused for insufficient funds: they must never exist.
	funds   bool
	refused map[string]bool
	// statements are the statement files the bank sent so far (each may
	// be imported again).
	statements [][]byte

	res *Result
}

// Run runs the simulation for cfg.Seed against pool, a migrated database
// with no settlements, and checks the invariants. An error means the
// harness itself failed (not the engine).
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Result, error) {
	r, err := simulate(ctx, pool, cfg)
	if err != nil {
		return nil, err
	}
	return r.res, nil
}

// simulate is Run, returning the whole run.
func simulate(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*run, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5e771e))
	bankTTL := EngineKeyTTL
	switch rng.IntN(6) {
	case 0:
		bankTTL = 0 // never forgets
	case 1:
		bankTTL = 3 * EngineKeyTTL
	}
	capsName, caps, err := cfg.capabilities()
	if err != nil {
		return nil, err
	}
	r := newRun(pool, cfg, rng, bankTTL, caps)
	n := cfg.Settlements
	if n <= 0 {
		n = 5 + rng.IntN(26)
	}
	steps := cfg.Steps
	if steps <= 0 {
		steps = n * (4 + rng.IntN(5))
	}
	r.res.Stats.Settlements, r.res.Stats.Steps = n, steps
	r.tracef("seed %d: %d settlements, %d steps, bank %s, bank key TTL %s, engine key TTL %s", cfg.Seed, n, steps, capsName, bankTTL, r.engineTTL)
	if err := r.startEvents(ctx); err != nil {
		return nil, err
	}
	r.genEvents(n)
	if err := r.setFunds(ctx); err != nil {
		return nil, err
	}
	r.setFaults(r.drawFaults())
	if err := r.setReturns(ctx); err != nil {
		return nil, err
	}

	for i := 0; i < steps; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := r.step(ctx, i); err != nil {
			return nil, err
		}
		if i%4 == 3 {
			if err := r.relayPass(ctx); err != nil {
				return nil, err
			}
		}
	}
	if _, err := r.finish(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// newRun sets a run up: the clock at Epoch, a bank forgetting keys after
// bankTTL, the engine's key TTL EngineKeyTTL less cfg.KeyTTLMargin.
func newRun(pool *pgxpool.Pool, cfg Config, rng *rand.Rand, bankTTL time.Duration, caps bankclient.Capabilities) *run {
	clock := settletest.NewManualClock(Epoch)
	return &run{
		cfg:   cfg,
		rng:   rng,
		clock: clock,
		bank: NewBank(BankConfig{Seed: rng.Uint64(), Clock: clock, KeyTTL: bankTTL,
			SettleDelayMin: 0, SettleDelayMax: settleDelayMax, Caps: caps,
			ConsentDecideMax: consentDecideMax, ConsentReject: consentRejectRate, ConsentAbandon: consentAbandonRate}),
		caps:           caps,
		engineTTL:      EngineKeyTTL - cfg.KeyTTLMargin,
		pool:           pool,
		sched:          newScheduler(rand.New(rand.NewPCG(rng.Uint64(), 1))),
		delivered:      map[int]bool{},
		first:          map[string]intake.Event{},
		unacked:        map[delivery]bool{},
		conflictsAcked: map[string]int{},
		refused:        map[string]bool{},
		res:            &Result{Seed: cfg.Seed, Config: cfg},
	}
}

// finish runs the recovery phase and the checker.
func (r *run) finish(ctx context.Context) (*Result, error) {
	if err := r.recover(ctx); err != nil {
		return nil, err
	}
	if err := r.recoverReturns(ctx); err != nil {
		return nil, err
	}
	violations, err := audit.CheckInvariants(ctx, r.pool, r.expect())
	if err != nil {
		return nil, err
	}
	if r.caps.Consent {
		cv, err := r.consentChecks(ctx)
		if err != nil {
			return nil, err
		}
		violations = append(violations, cv...)
	}
	ev, err := r.eventChecks(ctx)
	if err != nil {
		return nil, err
	}
	violations = append(violations, ev...)
	fv, err := r.fundsChecks(ctx)
	if err != nil {
		return nil, err
	}
	violations = append(violations, fv...)
	r.res.Violations = violations
	r.res.BankLog = r.bank.Log()
	if err := r.count(ctx); err != nil {
		return nil, err
	}
	return r.res, nil
}

func (r *run) tracef(format string, args ...any) {
	r.res.Trace = append(r.res.Trace, fmt.Sprintf("[%s] ", r.clock.Now().Sub(Epoch))+fmt.Sprintf(format, args...))
}

var currencies = []string{"EUR", "USD", "GBP", "CHF"}

func (r *run) genEvents(n int) {
	for i := range n {
		ev := intake.Event{
			SettlementID: fmt.Sprintf("s%02d", i),
			AccountID:    fmt.Sprintf("acct-%d", r.rng.IntN(5)),
			AmountCents:  1 + r.rng.Int64N(1_000_000),
			Currency:     currencies[r.rng.IntN(len(currencies))],
			Beneficiary:  fmt.Sprintf("ben-%d", r.rng.IntN(50)),
		}
		c := ev
		switch r.rng.IntN(3) {
		case 0:
			c.AmountCents++
		case 1:
			c.Currency = currencies[(indexOf(currencies, ev.Currency)+1)%len(currencies)]
		default:
			c.Beneficiary += "-x"
		}
		r.events = append(r.events, payloads{orig: ev, conflict: c})
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// drawFaults draws a fault profile: none, flaky, hostile or random.
func (r *run) drawFaults() (string, Faults) {
	switch r.rng.IntN(4) {
	case 0:
		return "none", Faults{}
	case 1:
		return "flaky", Faults{FailBefore: 0.1, DropResponse: 0.1, StatusError: 0.1, Reject: 0.05,
			SettlementFailure: 0.1, Latency: 2 * time.Second, Attempts: 1 + r.rng.IntN(3), RetryWait: time.Second}
	case 2:
		return "hostile", Faults{FailBefore: 0.3, DropResponse: 0.3, StatusError: 0.3, Reject: 0.1,
			SettlementFailure: 0.2, Latency: 10 * time.Second, Attempts: 3, RetryWait: 2 * time.Second}
	default:
		return "random", Faults{FailBefore: r.rng.Float64() / 2, DropResponse: r.rng.Float64() / 2,
			StatusError: r.rng.Float64() / 2, Reject: r.rng.Float64() / 5, SettlementFailure: r.rng.Float64() / 3,
			Latency: time.Duration(r.rng.Int64N(int64(15 * time.Second))), Attempts: 1 + r.rng.IntN(3),
			RetryWait: time.Duration(r.rng.Int64N(int64(5 * time.Second)))}
	}
}

func (r *run) setFaults(name string, f Faults) {
	r.bank.SetFaults(f)
	r.tracef("faults %s %+v", name, f)
}

// step runs one step of the faulty phase.
func (r *run) step(ctx context.Context, i int) error {
	if r.caps.Authorisation && r.rng.IntN(5) == 0 {
		// The customers whose decision is due open their links. (Drawn
		// only at such a bank, so that the other banks' schedules stay
		// as they were.)
		return r.single(ctx, "customers", r.customerFn)
	}
	k := r.rng.IntN(100)
	switch {
	case k < 55:
		return r.actors(ctx, i, 1)
	case k < 70:
		return r.actors(ctx, i, 2+r.rng.IntN(2)) // two or three at once
	case k < 78:
		return r.sweep(ctx, i)
	case k < 90:
		r.advance(ctx)
		return nil
	case k < 93:
		return r.advanceToBoundary(ctx, i)
	default:
		r.setFaults(r.drawFaults())
		return nil
	}
}

// sweep does what the engine's periodic sweep does: it resolves every open
// settlement that is due and that no human owns, one after the other, each
// call with its own random faults.
func (r *run) sweep(ctx context.Context, step int) error {
	// Confirmed ones in their return watch are due too.
	rows, err := r.pool.Query(ctx, `SELECT settlement_id FROM settlements
		WHERE state NOT IN ('failed', 'returned') AND NOT needs_investigation AND next_check_at <= $1
		ORDER BY settlement_id`, r.clock.Now())
	if err != nil {
		return fmt.Errorf("error listing due settlements: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("error listing due settlements: %w", err)
	}
	r.tracef("step %d: sweep of %d due settlement(s)", step, len(ids))
	all := settlementIDs(r.events)
	for _, id := range ids {
		idx := indexOf(all, id)
		a := r.newActor(ctx, "S", true)
		out := new(string)
		fn, desc := r.resolverFn(a, idx, false, out)
		r.sched.run([]*actor{a}, []func(context.Context){fn})
		if err := r.finishActors(step, []*actor{a}, []string{desc + a.plan()}, []*string{out}); err != nil {
			return err
		}
	}
	return nil
}

// advance moves the clock by a small, medium or large random amount.
func (r *run) advance(context.Context) {
	var d time.Duration
	switch k := r.rng.IntN(20); {
	case k < 10:
		d = time.Duration(r.rng.Int64N(int64(10 * time.Second)))
	case k < 18:
		d = time.Duration(r.rng.Int64N(int64(10 * time.Minute)))
	default:
		d = time.Duration(r.rng.Int64N(int64(2 * EngineKeyTTL)))
	}
	r.clock.Advance(d)
	r.tracef("clock +%s", d.Truncate(time.Millisecond))
}

// advanceToBoundary moves the clock close to the moment a settlement's key
// TTL ends, where a resend is most dangerous.
func (r *run) advanceToBoundary(ctx context.Context, step int) error {
	// At a bank that cannot be asked by our key, the dangerous ones are
	// those whose payment id no answer gave: only a replay or the list
	// can tell what became of them.
	rows, err := r.pool.Query(ctx, `SELECT settlement_id, first_attempt_at FROM settlements
		WHERE first_attempt_at IS NOT NULL AND state NOT IN ('confirmed', 'failed', 'returned')
		  AND ($1 OR bank_payment_id IS NULL) ORDER BY settlement_id`, r.caps.LookupByKey)
	if err != nil {
		return fmt.Errorf("error reading first attempts: %w", err)
	}
	type fa struct {
		id string
		at time.Time
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fa, error) {
		var f fa
		err := row.Scan(&f.id, &f.at)
		return f, err
	})
	if err != nil {
		return fmt.Errorf("error reading first attempts: %w", err)
	}
	if len(list) == 0 {
		r.advance(ctx)
		return nil
	}
	f := list[r.rng.IntN(len(list))]
	to := f.at.Add(r.engineTTL - time.Minute + time.Duration(r.rng.Int64N(int64(70*time.Second))))
	if !to.After(r.clock.Now()) {
		r.advance(ctx)
		return nil
	}
	r.clock.Set(to)
	r.tracef("clock to the key TTL of %s %s", f.id, to.Sub(f.at.Add(r.engineTTL)))
	if r.rng.IntN(3) == 0 {
		return nil
	}
	// Most often, look at that settlement right there.
	a := r.newActor(ctx, "T", true)
	out := new(string)
	fn, desc := r.resolverFn(a, indexOf(settlementIDs(r.events), f.id), r.rng.IntN(2) == 0, out)
	r.sched.run([]*actor{a}, []func(context.Context){fn})
	return r.finishActors(step, []*actor{a}, []string{desc + a.plan()}, []*string{out})
}

// kind of actor.
const (
	kindDeliver = iota
	kindSend
	kindResolve
	// kindWebhook: the bank pushes a hint about a payment.
	kindWebhook
	// kindStatement: the bank sends a statement of its returns, which is
	// imported.
	kindStatement
)

// actors runs n engine calls at once, interleaved by the scheduler; with
// two or more they usually concern the same settlement.
func (r *run) actors(ctx context.Context, step, n int) error {
	idx := r.rng.IntN(len(r.events))
	var as []*actor
	var fns []func(context.Context)
	var descs []string
	var results []*string
	for j := range n {
		if j > 0 && r.rng.IntN(4) == 0 {
			idx = r.rng.IntN(len(r.events))
		}
		kind := r.rng.IntN(3)
		if r.bank.Returning() && r.rng.IntN(5) == 0 {
			kind = kindWebhook
			if r.rng.IntN(3) == 0 {
				kind = kindStatement
			}
		}
		if !r.delivered[idx] && r.rng.IntN(4) != 0 {
			kind = kindDeliver
		}
		a := r.newActor(ctx, fmt.Sprintf("%c", 'A'+j), true)
		out := new(string)
		var fn func(context.Context)
		var desc string
		switch kind {
		case kindDeliver:
			d := delivery{idx: idx, conflict: r.rng.IntN(6) == 0}
			fn, desc = r.deliverFn(a, d, out)
		case kindSend:
			fn, desc = r.resolverFn(a, idx, true, out)
		case kindWebhook:
			fn, desc = r.webhookFn(a, idx, out)
		case kindStatement:
			fn, desc = r.statementFn(a, out)
		default:
			fn, desc = r.resolverFn(a, idx, false, out)
		}
		as, fns, results = append(as, a), append(fns, fn), append(results, out)
		descs = append(descs, fmt.Sprintf("%s:%s%s", a.name, desc, a.plan()))
	}
	r.sched.run(as, fns)
	return r.finishActors(step, as, descs, results)
}

// finishActors traces what the actors of a step did and counts them.
func (r *run) finishActors(step int, as []*actor, descs []string, results []*string) error {
	r.res.Stats.Actors += len(as)
	line := fmt.Sprintf("step %d: %s", step, strings.Join(descs, " | "))
	for j, a := range as {
		if a.panicValue != nil {
			return fmt.Errorf("actor %s panicked: %v", a.name, a.panicValue)
		}
		line += fmt.Sprintf("\n      %s → %s", a.name, *results[j])
		if len(a.notes) > 0 {
			line += " [" + strings.Join(a.notes, "; ") + "]"
		}
		if a.crashed {
			r.res.Stats.Crashes++
		}
		if a.cancelAt >= 0 && a.bankCalls > a.cancelAt {
			r.res.Stats.Cancels++
		}
	}
	r.tracef("%s", line)
	return nil
}

// newActor returns an actor, with a random crash and context end when
// faulty.
func (r *run) newActor(ctx context.Context, name string, faulty bool) *actor {
	a := &actor{name: name, crashAt: -1, cancelAt: -1, crashAfterBank: -1}
	a.ctx, a.cancel = context.WithCancel(ctx)
	if faulty {
		if r.rng.IntN(100) < 15 {
			a.crashAt = r.rng.IntN(12)
		}
		if r.rng.IntN(100) < 8 {
			a.crashAfterBank = r.rng.IntN(2)
		}
		if r.rng.IntN(100) < 8 {
			a.cancelAt, a.cancelMode = r.rng.IntN(2), r.rng.IntN(numCancelModes)
		}
	}
	return a
}

func (a *actor) plan() string {
	s := ""
	if a.crashAt >= 0 {
		s += fmt.Sprintf(" crash@%d", a.crashAt)
	}
	if a.crashAfterBank >= 0 {
		s += fmt.Sprintf(" crash-after-bank%d", a.crashAfterBank)
	}
	if a.cancelAt >= 0 {
		s += fmt.Sprintf(" cancel@bank%d/%d", a.cancelAt, a.cancelMode)
	}
	return s
}

func (r *run) event(d delivery) intake.Event {
	if d.conflict {
		return r.events[d.idx].conflict
	}
	return r.events[d.idx].orig
}

// deliverFn is one delivery of an event to intake.
func (r *run) deliverFn(a *actor, d delivery, out *string) (func(context.Context), string) {
	ev := r.event(d)
	r.delivered[d.idx] = true
	r.unacked[d] = true
	a.onCommit = func() {
		if _, ok := r.first[ev.SettlementID]; !ok {
			r.first[ev.SettlementID] = ev
		}
	}
	svc, err := intake.NewService(intake.Config{DB: actorDB{a: a, pool: r.pool}, Jobs: noJobs{}, Now: r.clock.Now,
		FundsCheck: r.funds && r.cfg.Plant != "funds-check-off"})
	desc := fmt.Sprintf("deliver %s", ev.SettlementID)
	if d.conflict {
		desc += " (conflicting payload)"
	}
	return func(ctx context.Context) {
		if err != nil {
			*out = err.Error()
			return
		}
		res, err := svc.Submit(ctx, ev)
		var ce *intake.ConflictError
		switch {
		case errors.As(err, &ce):
			delete(r.unacked, d)
			r.conflictsAcked[ev.SettlementID]++
			*out = "409 conflict"
		case errors.Is(err, intake.ErrInsufficientFunds):
			// The refusal is the receipt's outcome: every delivery of this
			// payload is refused from now on.
			delete(r.unacked, d)
			r.refused[ev.SettlementID] = true
			*out = "422 insufficient funds"
		case err != nil:
			*out = "error: " + err.Error()
		default:
			delete(r.unacked, d)
			*out = fmt.Sprintf("ok replayed=%v state=%s", res.Replayed, res.Settlement.State)
		}
	}, desc
}

// resolver is the engine's Resolver as actor a runs it.
func (r *run) resolver(a *actor) *reconcile.Resolver {
	a.plant, a.pool = r.cfg.Plant, r.pool
	rs := &reconcile.Resolver{
		DB: actorDB{a: a, pool: r.pool}, Bank: actorBank{a: a, bank: r.bank}, Now: r.clock.Now,
		KeyTTL: r.engineTTL, CheckInterval: checkInterval, MaxCheckInterval: maxCheckInterval, Lease: lease,
		Capabilities: &r.caps, RequestBound: requestBound, ReturnWatch: returnWatch,
		ConsentWait: consentWait, QueueMovement: a.queueMovement,
	}
	if r.caps.ReturnsOnStatementsOnly {
		rs.ReturnWatch = 0 // as the worker configures it: statements bring the returns
	}
	switch r.cfg.Plant {
	case "replay-after-window":
		rs.RequestBound = -3 * EngineKeyTTL
	case "resend-after-window":
		rs.KeyTTL = 100 * EngineKeyTTL
	case "consent-wait-forever":
		rs.ConsentWait = -1
	}
	return rs
}

// resolverFn is one Resolver.Send (send) or Resolve call.
func (r *run) resolverFn(a *actor, idx int, send bool, out *string) (func(context.Context), string) {
	id := r.events[idx].orig.SettlementID
	rs := r.resolver(a)
	call, desc := rs.Resolve, "resolve "+id
	if send {
		call, desc = rs.Send, "send "+id
	}
	return func(ctx context.Context) {
		o, err := call(ctx, id, nil)
		if err != nil {
			*out = "error: " + err.Error()
			return
		}
		*out = fmt.Sprintf("%s → %s done=%v lost_race=%v flag=%q", o.Action, o.State, o.Done, o.LostRace, o.Decision.Flag)
	}, desc
}

// noJobs stands in for River: the simulation drives sends itself.
type noJobs struct{}

func (noJobs) InsertSendTx(context.Context, pgx.Tx, []intake.SendJob) error { return nil }

// recover turns the faults off, redelivers what was never acknowledged and
// resolves every open settlement that no human owns, advancing the clock,
// until none is left or the rounds run out.
func (r *run) recover(ctx context.Context) error {
	r.setFaults("recovery (none)", Faults{})
	for idx := range r.events {
		for _, c := range []bool{false, true} {
			d := delivery{idx: idx, conflict: c}
			if !r.unacked[d] {
				continue
			}
			if err := r.single(ctx, "redeliver", func(a *actor, out *string) (func(context.Context), string) {
				return r.deliverFn(a, d, out)
			}); err != nil {
				return err
			}
		}
	}
	for round := 0; round < recoveryRounds; round++ {
		rows, err := r.pool.Query(ctx, `SELECT settlement_id FROM settlements
			WHERE state NOT IN ('confirmed', 'failed', 'returned') AND NOT needs_investigation ORDER BY settlement_id`)
		if err != nil {
			return fmt.Errorf("error listing open settlements: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("error listing open settlements: %w", err)
		}
		if len(ids) == 0 {
			r.res.Stats.Rounds = round
			return nil
		}
		if r.caps.Authorisation {
			if err := r.single(ctx, "customers", r.customerFn); err != nil {
				return err
			}
		}
		for _, id := range ids {
			idx := indexOf(settlementIDs(r.events), id)
			if err := r.single(ctx, "recover", func(a *actor, out *string) (func(context.Context), string) {
				return r.resolverFn(a, idx, false, out)
			}); err != nil {
				return err
			}
		}
		r.clock.Advance(maxCheckInterval)
		r.tracef("clock +%s", maxCheckInterval)
	}
	r.res.Stats.Rounds = recoveryRounds
	return nil
}

func settlementIDs(ps []payloads) []string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.orig.SettlementID
	}
	return ids
}

// single runs one fault-free actor.
func (r *run) single(ctx context.Context, label string, mk func(*actor, *string) (func(context.Context), string)) error {
	a := r.newActor(ctx, "R", false)
	out := new(string)
	fn, desc := mk(a, out)
	r.sched.run([]*actor{a}, []func(context.Context){fn})
	if a.panicValue != nil {
		return fmt.Errorf("actor %s panicked: %v", desc, a.panicValue)
	}
	r.tracef("%s: %s → %s", label, desc, *out)
	return nil
}

// expect is what the checker needs to know of the run: every payload whose
// intake committed first, every delivery, the bank's books.
func (r *run) expect() audit.Expect {
	first := make(map[string]audit.Payload, len(r.first))
	for id, ev := range r.first {
		if r.refused[id] {
			continue // never a settlement: AllCommitted makes one a violation
		}
		first[id] = audit.Payload{AccountID: ev.AccountID, AmountCents: ev.AmountCents, Currency: ev.Currency,
			Beneficiary: ev.Beneficiary, PayloadHash: intake.CanonicalHash(ev)}
	}
	e := audit.Expect{
		KeyTTL:         r.engineTTL,
		First:          first,
		AllCommitted:   true,
		CheckBank:      true,
		Payments:       r.bank.Payments(),
		ConflictsAcked: r.conflictsAcked,
		Recovered:      true,
	}
	for _, ret := range r.bank.ReturnsBooked() {
		if !ret.Full {
			e.PartialReturns = append(e.PartialReturns, ret.Reference)
		}
	}
	for idx := range r.events {
		if r.delivered[idx] && !r.refused[r.events[idx].orig.SettlementID] {
			e.Delivered = append(e.Delivered, r.events[idx].orig.SettlementID)
		}
	}
	return e
}

// count fills the end-state statistics.
func (r *run) count(ctx context.Context) error {
	s := &r.res.Stats
	s.BankPayments = len(r.bank.Payments())
	s.Consents = r.bank.consentCount()
	s.Refused = len(r.refused)
	if r.funds {
		s.FundsRuns = 1
	}
	for _, ret := range r.bank.ReturnsBooked() {
		s.Returns++
		if !ret.Full {
			s.Partial++
		}
	}
	return r.pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE state = 'confirmed'),
		count(*) FILTER (WHERE state = 'failed'),
		count(*) FILTER (WHERE needs_investigation),
		count(*) FILTER (WHERE state = 'returned')
		FROM settlements`).Scan(&s.Confirmed, &s.Failed, &s.Flagged, &s.Returned)
}
