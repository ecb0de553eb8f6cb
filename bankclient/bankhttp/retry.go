package bankhttp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/settle/settle/bankclient"
)

// Attempt is how one attempt of a connector's call ended: the outcome
// reported to Options.Observe, the classified error (nil on success; an
// *bankclient.AmbiguousError when the bank may or may not have acted), and whether
// another attempt under the same key may help.
type Attempt struct {
	Outcome string
	Err     error
	Retry   bool
}

// Retrier is what RetryCall needs to know about a connector: its policy and
// timeouts, and the few places where connectors differ (what they log, what
// they wait for before sending).
type Retrier struct {
	// Policy bounds the retries; it is taken as it is (see
	// bankclient.RetryPolicy.WithDefaults).
	Policy bankclient.RetryPolicy
	// Timeout bounds each attempt.
	Timeout time.Duration
	// Observe, when set, is told each attempt's operation, outcome and
	// duration.
	Observe func(op, outcome string, d time.Duration)
	// Peer names the other side in the error returned when the context has
	// ended before the first attempt ("the bank", "Stripe").
	Peer string
	// Wait, when set, runs before every attempt (a rate limiter's turn).
	// Its error ends the call as it is: nothing was sent by that attempt.
	Wait func(ctx context.Context) error
	// FoldDefinitive makes a definitive error that follows an ambiguous
	// attempt of the same call ambiguous: the earlier attempt did leave,
	// and its answer is what the caller must know.
	FoldDefinitive bool
	// Ambiguous, when set, is told of every ambiguous answer as soon as it
	// is seen.
	Ambiguous func(ctx context.Context, op, key string, attempt int, ae *bankclient.AmbiguousError)
	// Retrying, when set, is told of every ambiguous answer that is about
	// to be retried, and how long the call waits first.
	Retrying func(ctx context.Context, op, key string, attempt int, ae *bankclient.AmbiguousError, wait time.Duration)
}

// RetryCall runs attempt under r's retry policy: an ambiguous answer that
// may clear up is retried with jittered exponential backoff, the identical
// request every time; a 429 with Retry-After is waited out within
// Policy.RateLimitWait without counting against MaxAttempts; anything
// definitive, and the parent context ending, stops at once. The attempt
// must send the identical request, under the identical key, every time;
// key is only reported to r's callbacks.
func RetryCall[T any](ctx context.Context, r Retrier, op, key string, attempt func(context.Context) (T, Attempt)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("error before contacting %s: %w", r.Peer, err)
	}
	p := r.Policy
	start := time.Now()
	interval := p.InitialInterval
	rateLimitBudget := p.RateLimitWait
	attempts, counted := 0, 0
	var last *bankclient.AmbiguousError
	for {
		if r.Wait != nil {
			if err := r.Wait(ctx); err != nil {
				return zero, err
			}
		}
		attempts++
		counted++
		actx, cancel := context.WithTimeout(ctx, r.Timeout)
		t0 := time.Now()
		res, a := attempt(actx)
		cancel()
		if r.Observe != nil {
			r.Observe(op, a.Outcome, time.Since(t0))
		}
		if a.Err == nil {
			return res, nil
		}
		var ae *bankclient.AmbiguousError
		if !errors.As(a.Err, &ae) {
			if r.FoldDefinitive && last != nil {
				last.Err = fmt.Errorf("%w (%w)", a.Err, last.Err)
				return zero, last
			}
			return zero, a.Err
		}
		ae.Op, ae.Attempts = op, attempts
		last = ae
		if r.Ambiguous != nil {
			r.Ambiguous(ctx, op, key, attempts, ae)
		}
		if ctx.Err() != nil {
			ae.Err = fmt.Errorf("%w (%w)", ctx.Err(), ae.Err)
			return zero, ae
		}
		var wait time.Duration
		switch {
		case ae.StatusCode == http.StatusTooManyRequests && ae.RetryAfter > 0:
			if ae.RetryAfter > rateLimitBudget {
				return zero, ae
			}
			rateLimitBudget -= ae.RetryAfter
			counted--
			wait = ae.RetryAfter
		case !a.Retry || counted >= p.MaxAttempts || ae.RetryAfter > p.MaxInterval:
			return zero, ae
		default:
			wait = max(ae.RetryAfter, jitter(interval, p.RandomizationFactor))
			interval = min(time.Duration(float64(interval)*p.Multiplier), p.MaxInterval)
			if time.Since(start)+wait > p.MaxElapsed {
				return zero, ae
			}
		}
		if r.Retrying != nil {
			r.Retrying(ctx, op, key, attempts, ae, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			ae.Err = fmt.Errorf("%w (%w)", ctx.Err(), ae.Err)
			return zero, ae
		case <-t.C:
		}
	}
}

// jitter spreads d by ± factor.
func jitter(d time.Duration, factor float64) time.Duration {
	return time.Duration(float64(d) * (1 + factor*(2*rand.Float64()-1))) //nolint:gosec // G404: jitter, not a secret
}
