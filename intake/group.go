package intake

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// DefaultGroupCommit is the intake transactions of single events a worker
// keeps in flight at once (Config.GroupCommit): the events submitted while
// they run wait and share the next one.
const DefaultGroupCommit = 2

// maxGroup is the most single events one group-committed transaction takes.
const maxGroup = 100

// groupCommit gathers single events (Submit) into shared intake
// transactions: at most inFlight transactions run at once, and every event
// submitted meanwhile waits for the next one, which takes all that are
// waiting (up to maxGroup). The window is therefore the time one
// transaction takes, and an event submitted to an idle service commits at
// once, alone. Each event still gets its own outcome, exactly as
// SubmitBatch gives one per event.
//
// No goroutine of it outlives its work: a transaction's goroutine ends
// when nothing is left waiting.
type groupCommit struct {
	s        *Service
	inFlight int

	mu      sync.Mutex
	waiting []*groupWaiter
	running int

	// hooks, set only by tests, see the queue and the groups.
	hooks groupHooks
}

// groupHooks are called, when set, with the number of events waiting
// after one is queued, and with the size of each group as it commits.
type groupHooks struct {
	queued     func(waiting int)
	committing func(size int)
}

// groupWaiter is one event waiting for its group's transaction.
type groupWaiter struct {
	ctx  context.Context
	ev   Event
	out  Outcome
	err  error
	done chan struct{}
}

func (w *groupWaiter) finish(out Outcome, err error) {
	w.out, w.err = out, err
	close(w.done)
}

// submit takes ev in through the next shared transaction and returns its
// own outcome. When ctx ends first, it returns an error matching
// ErrUnavailable: the event may or may not have committed, as when a
// client hangs up during a transaction of its own, and a redelivery gets
// the stored outcome.
func (g *groupCommit) submit(ctx context.Context, ev Event) (Result, error) {
	w := &groupWaiter{ctx: ctx, ev: ev, done: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, w)
	if g.hooks.queued != nil {
		g.hooks.queued(len(g.waiting))
	}
	start := g.running < g.inFlight
	if start {
		g.running++
	}
	g.mu.Unlock()
	if start {
		go g.run()
	}
	select {
	case <-w.done:
		if w.err != nil {
			return Result{}, w.err
		}
		return w.out.Result, w.out.Err
	case <-ctx.Done():
		return Result{}, classify(fmt.Errorf("error waiting for the intake transaction: %w", ctx.Err()))
	}
}

// run commits groups of the waiting events until none is left.
func (g *groupCommit) run() {
	for {
		g.mu.Lock()
		n := min(len(g.waiting), maxGroup)
		if n == 0 {
			g.running--
			g.waiting = nil // let the backing array go
			g.mu.Unlock()
			return
		}
		group := make([]*groupWaiter, n)
		copy(group, g.waiting)
		g.waiting = g.waiting[n:]
		g.mu.Unlock()
		g.commit(group)
	}
}

// commit takes group's events in, in one transaction, and hands each its
// outcome. The transaction does not end with any one producer's request:
// it runs on the first event's context without its cancellation, bounded
// by the service's timeout.
//
// One bad event spoils none of the others: when the shared transaction
// fails with an error that is not ErrUnavailable (a statement refused, a
// bug), it has written nothing, and each event is taken in again in a
// transaction of its own, so that only the bad one gets the error. When
// the database is unavailable, every event of the group gets that answer
// (503), as each would have alone.
func (g *groupCommit) commit(group []*groupWaiter) {
	if g.hooks.committing != nil {
		g.hooks.committing(len(group))
	}
	ctx := context.WithoutCancel(group[0].ctx)
	evs := make([]Event, len(group))
	for i, w := range group {
		evs[i] = w.ev
	}
	outs, err := g.s.submit(ctx, evs, nil, true)
	if err == nil {
		for i, w := range group {
			w.finish(outs[i], nil)
		}
		return
	}
	if len(group) == 1 || errors.Is(err, ErrUnavailable) {
		for _, w := range group {
			w.finish(Outcome{}, err)
		}
		return
	}
	var wg sync.WaitGroup
	for _, w := range group {
		wg.Go(func() {
			outs, err := g.s.submit(context.WithoutCancel(w.ctx), []Event{w.ev}, nil, false)
			if err != nil {
				w.finish(Outcome{}, err)
				return
			}
			w.finish(outs[0], nil)
		})
	}
	wg.Wait()
}
