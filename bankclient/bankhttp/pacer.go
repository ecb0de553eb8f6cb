package bankhttp

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrPaceDeadline is returned by Pacer.Wait when the caller's turn comes
// after its context's deadline: nothing would be sent in time.
var ErrPaceDeadline = errors.New("the next turn under the bank rate limit is after the call's deadline")

// Pacer spaces a client's requests so that the bank sees at most one per
// 1/rate: request i of a run leaves no sooner than i/rate after the first.
// It is a token bucket of one token, as golang.org/x/time/rate's Limiter
// with a burst of 1, but the time a turn is computed from is read under
// the pacer's lock. The Limiter reads the time before it takes its lock,
// so on a loaded machine a caller that read the time, was descheduled and
// then reserved moves the limiter's clock back and is given time it had
// already handed out: the bank then saw requests closer together than the
// rate (measured, 17 ms early after 20 requests at 20 a second). A bank
// that enforces its limit answers those with 429.
//
// A nil *Pacer lets every request go at once.
type Pacer struct {
	interval time.Duration
	mu       sync.Mutex
	next     time.Time // the soonest the next turn may start
}

// NewPacer returns a pacer of perSecond requests a second, or nil (no cap)
// when perSecond is not positive.
func NewPacer(perSecond float64) *Pacer {
	if perSecond <= 0 {
		return nil
	}
	return &Pacer{interval: time.Duration(float64(time.Second) / perSecond)}
}

// Wait takes the next turn and waits for it. When ctx ends first, or its
// deadline falls before the turn, Wait returns an error and gives the turn
// back if no later turn was taken meanwhile (a turn not given back only
// slows the client down, never speeds it up).
func (p *Pacer) Wait(ctx context.Context) error {
	if p == nil {
		return ctx.Err()
	}
	p.mu.Lock()
	now := time.Now()
	turn := p.next
	if turn.Before(now) {
		turn = now
	}
	if deadline, ok := ctx.Deadline(); ok && turn.After(deadline) {
		p.mu.Unlock()
		return ErrPaceDeadline
	}
	p.next = turn.Add(p.interval)
	p.mu.Unlock()
	wait := turn.Sub(now)
	if wait <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		if p.next.Equal(turn.Add(p.interval)) {
			p.next = turn
		}
		p.mu.Unlock()
		return ctx.Err()
	}
}
