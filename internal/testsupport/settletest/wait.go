package settletest

import (
	"testing"
	"time"
)

// WaitLimit is the longest Wait waits. It is not a performance bound: it
// only ends a test whose condition will never hold, long after a loaded
// two-core machine would have got there.
const WaitLimit = 3 * time.Minute

// Wait polls cond until it reports true and returns; cond's string says
// where things stand, for the failure message. The pause between polls
// grows from 10 ms to 250 ms. It fails the test when the test's context
// ends, the test binary's deadline (go test -timeout) is 30 s away, or
// WaitLimit has passed.
func Wait(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	limit := start.Add(WaitLimit)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok && dl.Add(-30*time.Second).Before(limit) {
			limit = dl.Add(-30 * time.Second)
		}
	}
	timer := time.NewTimer(time.Until(limit))
	defer timer.Stop()
	pause := 10 * time.Millisecond
	for {
		ok, state := cond()
		if ok {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting for %s (%s)", what, state)
		case <-timer.C:
			t.Fatalf("gave up waiting for %s after %s: %s", what, time.Since(start).Round(time.Second), state)
		case <-time.After(pause):
		}
		pause = min(pause*2, 250*time.Millisecond)
	}
}
