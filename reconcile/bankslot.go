package reconcile

import (
	"context"
	"sync"
)

// BankSlot is a caller's bound on its bank calls, lent to the Resolver
// for one Send (WithBankSlot).
type BankSlot struct {
	// Acquire waits for a slot, or returns ctx's error.
	Acquire func(ctx context.Context) error
	// Release gives the slot back.
	Release func()
}

// slotKey is the context key of WithBankSlot.
type slotKey struct{}

// heldSlot is a BankSlot and whether the Send under it holds its slot.
type heldSlot struct {
	mu   sync.Mutex
	s    BankSlot
	held bool
}

// WithBankSlot returns ctx under which a Send holds a slot of s only while
// the bank has its calls: it takes the slot just before its first bank
// call (the consent, the token, the status check, or the POST right after
// its claim has committed) and gives it back as soon as the POST is
// answered, before the answer is recorded. So the claims of the next sends
// commit while the bank answers this one, and the next POST takes the
// slot while this answer is written. A claimed send that cannot get a slot
// before ctx ends records its attempt as not sent and fails: the
// settlement is left, with its lease, to the lost-answer path, as after a
// crash before the POST. release gives the slot back if the Send still
// holds it; call it once the Send has returned.
func WithBankSlot(ctx context.Context, s BankSlot) (_ context.Context, release func()) {
	h := &heldSlot{s: s}
	return context.WithValue(ctx, slotKey{}, h), h.give
}

// takeSlot takes the slot of ctx's BankSlot unless it is held already
// (nothing without one).
func takeSlot(ctx context.Context) error {
	h, ok := ctx.Value(slotKey{}).(*heldSlot)
	if !ok {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		return nil
	}
	if err := h.s.Acquire(ctx); err != nil {
		return err
	}
	h.held = true
	return nil
}

// giveSlot gives the slot of ctx's BankSlot back if it is held.
func giveSlot(ctx context.Context) {
	if h, ok := ctx.Value(slotKey{}).(*heldSlot); ok {
		h.give()
	}
}

func (h *heldSlot) give() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		h.held = false
		h.s.Release()
	}
}
