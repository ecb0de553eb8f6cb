package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/database/dberr"
)

// DefaultOutcomeGroup is the outcome transactions a worker's concurrent
// sends keep in flight at once (Resolver.OutcomeGroup, settle worker
// --outcome-group): none, each outcome commits alone. Shared outcome
// transactions take commits away (2.2 to 1.5 per settlement paying 2,000
// at once through a worker) but write each outcome's five or six round
// trips one after another on one connection, where alone they ran side by
// side on as many connections: in settle bench on two shared cores e2e
// settled about half as many per second (BENCHMARKS.md, issue 28). Sending
// a group's statements in one pipeline is the step that would make them
// pay.
const DefaultOutcomeGroup = 0

// maxOutcomeGroup is the most outcomes one shared transaction records.
const maxOutcomeGroup = 100

// record records the outcome of a send: alone, or with the outcomes of
// the sends answered at the same time when r.OutcomeGroup is positive.
func (r *Resolver) record(ctx context.Context, f facts, d Decision, att attempt, hook TxHook) (Outcome, error) {
	if r.OutcomeGroup <= 0 {
		return r.apply(ctx, f, d, att, hook)
	}
	r.outcomesOnce.Do(func() { r.outcomes = &outcomeGroup{r: r, inFlight: r.OutcomeGroup} })
	return r.outcomes.record(ctx, r.prepare(ctx, f, d, att, hook))
}

// outcomeGroup gathers the outcomes of concurrent sends into shared
// transactions, as claimGroup gathers their claims: at most inFlight
// outcome transactions run at once, and every outcome answered meanwhile
// waits for the next, which records them all (up to maxOutcomeGroup), each
// with its hook (the job's completion), in one commit. Each outcome is
// written as it would be alone, under a savepoint of its own: a lost race
// or an error undoes that outcome only (its attempt's answer is then
// recorded alone in the same transaction, or it gets its error), never the
// others. Nothing of the group is committed before the shared commit: a
// crash before it leaves every settlement of the group claimed, with its
// lease, to the lost-answer path, as a crash before its own commit did. A
// shared transaction that fails as a whole with anything but an
// unavailable database is rolled back and each outcome is recorded alone.
// No goroutine of it outlives its work.
type outcomeGroup struct {
	r        *Resolver
	inFlight int

	mu      sync.Mutex
	waiting []*outcomeWaiter
	running int

	// committed, set only by tests, is called with the number of
	// outcomes each shared transaction committed.
	committed func(n int)
}

// outcomeWaiter is one outcome waiting for its transaction.
type outcomeWaiter struct {
	ctx  context.Context
	o    *outcome
	lost bool
	out  Outcome
	err  error
	done chan struct{}
}

func (g *outcomeGroup) record(ctx context.Context, o *outcome) (Outcome, error) {
	w := &outcomeWaiter{ctx: ctx, o: o, done: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, w)
	start := g.running < g.inFlight
	if start {
		g.running++
	}
	g.mu.Unlock()
	if start {
		go g.run()
	}
	<-w.done // bounded by the group's recordTimeout
	return w.out, w.err
}

// run records groups of waiting outcomes until none is left. A settlement
// answered twice waits for a later group, so that one transaction never
// holds two outcomes of one settlement.
func (g *outcomeGroup) run() {
	for {
		g.mu.Lock()
		var group []*outcomeWaiter
		group, g.waiting = takeGroup(g.waiting, maxOutcomeGroup, func(w *outcomeWaiter) string { return w.o.f.SettlementID })
		if len(group) == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.commit(group)
	}
}

// commit records group in one transaction, or each outcome alone when that
// fails.
func (g *outcomeGroup) commit(group []*outcomeWaiter) {
	r := g.r
	if len(group) == 1 {
		w := group[0]
		w.out, w.err = r.applyOutcome(w.ctx, w.o)
		close(w.done)
		return
	}
	// The balances a payout changes are locked in one order by every
	// shared transaction (a statement locks its own rows in that order), so
	// that two of them never wait on each other: by account and currency.
	sort.SliceStable(group, func(i, j int) bool {
		a, b := group[i].o.f, group[j].o.f
		if a.AccountID != b.AccountID {
			return a.AccountID < b.AccountID
		}
		if a.Currency != b.Currency {
			return a.Currency < b.Currency
		}
		return a.SettlementID < b.SettlementID
	})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), recordTimeout)
	defer cancel()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = g.writeMany(ctx, group); !deadlock(err) {
			break
		}
	}
	switch {
	case err == nil:
		if g.committed != nil {
			g.committed(len(group))
		}
		for _, w := range group {
			if w.err == nil && !w.lost {
				r.committed(w.ctx, w.o)
				w.out = w.o.out
			}
			close(w.done)
		}
	case errors.Is(dberr.Classify(err), dberr.ErrUnavailable):
		for _, w := range group {
			w.out, w.err = Outcome{}, err
			close(w.done)
		}
	default:
		var wg sync.WaitGroup
		for _, w := range group {
			wg.Go(func() {
				w.out, w.err = r.applyOutcome(w.ctx, w.o)
				close(w.done)
			})
		}
		wg.Wait()
	}
}

// writeMany writes every outcome of group in one transaction, each under a
// savepoint, and commits. An outcome that loses its race gets its
// attempt's answer recorded alone (in the same transaction) and a lost
// Outcome; one that fails gets its error; both leave the others whole. It
// returns an error only when the transaction itself failed, nothing of it
// committed.
func (g *outcomeGroup) writeMany(ctx context.Context, group []*outcomeWaiter) error {
	r := g.r
	for _, w := range group {
		w.lost, w.out, w.err = false, Outcome{}, nil
	}
	tx, err := r.DB.Begin(ctx)
	if err != nil {
		return fmt.Errorf("error recording the answers of %d settlements: %w", len(group), err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	for _, w := range group {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return fmt.Errorf("error recording the answers of %d settlements: %w", len(group), err)
		}
		lost, err := r.write(ctx, sp, w.o)
		if deadlock(err) {
			return err // the whole group runs again
		}
		if err == nil && !lost {
			err = sp.Commit(ctx)
			if err != nil {
				return fmt.Errorf("error recording the answers of %d settlements: %w", len(group), err)
			}
			continue
		}
		if rerr := sp.Rollback(ctx); rerr != nil {
			return fmt.Errorf("error recording the answers of %d settlements: %w", len(group), errors.Join(err, rerr))
		}
		if err != nil {
			w.err = err
			continue
		}
		w.lost = true
		if err := finishAttempt(ctx, tx, w.o.att, r.now()); err != nil {
			return fmt.Errorf("error recording the answers of %d settlements: %w", len(group), err)
		}
		w.out = r.lost(w.ctx, w.o)
	}
	for _, w := range group {
		if w.err == nil && !w.lost {
			w.o.beforeCommit()
		}
	}
	crash.Point(crash.OutcomesBeforeCommit)
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing the answers of %d settlements: %w", len(group), err)
	}
	crash.Point(crash.OutcomesAfterCommit)
	return nil
}
