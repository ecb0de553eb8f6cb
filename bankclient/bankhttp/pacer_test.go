package bankhttp

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPacerSpacesConcurrentCallers: 200 callers at once, many more than
// the cores, each let go at its turn: the i-th to go goes no sooner than
// i intervals after the start (a timer never fires early, so this holds
// however loaded the machine is).
func TestPacerSpacesConcurrentCallers(t *testing.T) {
	t.Parallel()
	const n, perSecond = 200, 1000.0
	p := NewPacer(perSecond)
	start := time.Now()
	var mu sync.Mutex
	var went []time.Duration
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := p.Wait(context.Background()); err != nil {
				t.Error(err)
				return
			}
			d := time.Since(start)
			mu.Lock()
			went = append(went, d)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(went)
	interval := time.Duration(float64(time.Second) / perSecond)
	for i, d := range went {
		if soonest := time.Duration(i) * interval; d < soonest {
			t.Fatalf("caller %d went %v after the start, before its turn at %v", i+1, d, soonest)
		}
	}
}

// TestPacerGivesBackATurnNotTaken: a caller whose context ends before its
// turn gives the turn back, so the next caller takes it; a caller whose
// deadline is before its turn is refused at once.
func TestPacerGivesBackATurnNotTaken(t *testing.T) {
	t.Parallel()
	p := NewPacer(0.01) // a turn every 100 s
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	second := p.next
	p.mu.Unlock()
	soon, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := p.Wait(soon); !errors.Is(err, ErrPaceDeadline) {
		t.Fatalf("a caller whose deadline is before its turn: %v, want ErrPaceDeadline", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Wait(ctx) }()
	// The waiter has taken the second turn once next has moved past it.
	for {
		p.mu.Lock()
		taken := p.next.After(second)
		p.mu.Unlock()
		if taken {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled waiter: %v", err)
	}
	p.mu.Lock()
	next := p.next
	p.mu.Unlock()
	if !next.Equal(second) {
		t.Errorf("the cancelled waiter kept its turn: the next turn is %v after the one it gave back", next.Sub(second))
	}
}

// TestNilPacerNeverWaits: no rate, no wait.
func TestNilPacerNeverWaits(t *testing.T) {
	t.Parallel()
	p := NewPacer(0)
	if p != nil {
		t.Fatal("NewPacer(0) is not nil")
	}
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}
