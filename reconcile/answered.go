package reconcile

import "context"

// answeredKey is the context key of WithAnswered.
type answeredKey struct{}

// WithAnswered returns ctx asking the Resolver to call fn as soon as the
// POST of a Send under ctx is back from the bank (with an answer or
// without one), before that answer is recorded: a caller holding a slot of
// the bank's concurrency for the send gives it back there, so that the
// next POST does not wait for this one's database writes. fn is called at
// most once, after the last bank call of the Send (nothing but the
// recording follows it), and not at all when the Send makes no POST (the
// settlement is not claimable, or is checked by status instead): the
// caller gives its slot back when the Send returns, as without it.
func WithAnswered(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, answeredKey{}, fn)
}

// answered calls the function WithAnswered put in ctx, if any.
func answered(ctx context.Context) {
	if fn, ok := ctx.Value(answeredKey{}).(func()); ok && fn != nil {
		fn()
	}
}
