package sim

import (
	"sync"
	"time"
)

// Epoch is the simulated time every run starts at.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is the simulated clock shared by the engine and the bank. It only
// moves when the simulation advances it, in whole microseconds (the
// precision of timestamptz, so a time read back from PostgreSQL equals the
// one written). It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start.Truncate(time.Microsecond)}
}

// Now returns the simulated time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (rounded down to a microsecond);
// a negative d is ignored.
func (c *Clock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d.Truncate(time.Microsecond))
	c.mu.Unlock()
}

// Set moves the clock to t if t is later than now.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t.Truncate(time.Microsecond)
	}
	c.mu.Unlock()
}
