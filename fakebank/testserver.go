package fakebank

import (
	"context"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// NewTestServer starts a bank configured by opts on an httptest server and
// returns it with its base URL. The server and the bank are closed when the
// test ends. It is meant for tests in any package.
func NewTestServer(t testing.TB, opts Options) (*Bank, string) {
	t.Helper()
	b, err := New(opts)
	if err != nil {
		t.Fatalf("fakebank.NewTestServer: %v", err)
	}
	srv := httptest.NewUnstartedServer(b.Handler())
	srv.Config.BaseContext = func(net.Listener) context.Context { return b.ctx }
	srv.Start()
	t.Cleanup(func() {
		// Close the bank first: it cancels requests sleeping on latency, so
		// that the server's Close, which waits for them, returns at once.
		if err := b.Close(); err != nil {
			t.Errorf("fakebank.NewTestServer: error closing bank: %v", err)
		}
		srv.Close()
	})
	return b, srv.URL
}

// ManualClock is a clock for tests that moves only when told to. Pass its
// Now method as Options.Now.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock standing at start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
