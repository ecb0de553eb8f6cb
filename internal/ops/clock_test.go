package ops_test

import (
	"sync"
	"time"
)

// testClock is a clock that moves only when told to.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = time.Unix(1_700_000_000, 0)
	}
	return c.t
}

func (c *testClock) advance(seconds int) {
	c.Now()
	c.mu.Lock()
	c.t = c.t.Add(time.Duration(seconds) * time.Second)
	c.mu.Unlock()
}
