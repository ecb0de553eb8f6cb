package settletest

import (
	"sync"
	"time"
)

// ManualClock is a clock that moves only when told to, in whole
// microseconds (the precision of timestamptz, so a time read back from
// PostgreSQL equals the one written). Pass its Now method wherever a clock
// is injected. It is safe for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock standing at start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start.Truncate(time.Microsecond)}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (rounded down to a microsecond); a
// negative d is ignored.
func (c *ManualClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d.Truncate(time.Microsecond))
}

// Set moves the clock to t if t is later than now.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t.Truncate(time.Microsecond)
	}
}
