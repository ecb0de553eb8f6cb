package sqs_test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// endpoint stands between a consumer and moto_server, so that a test can
// take the queue's endpoint away and give it back. SQS is a service nobody
// restarts; what a consumer meets of an outage of it is its endpoint
// refusing and dropping connections for a while, the queue's messages
// kept. That is what down does: every open connection is cut and each new
// one is refused (accepted and closed at once) until up.
type endpoint struct {
	ln      net.Listener
	backend string

	mu      sync.Mutex
	down    bool
	refused int
	conns   map[net.Conn]struct{}
	// changed is closed and replaced whenever refused grows.
	changed chan struct{}
}

// newEndpoint starts an endpoint in front of the server at rawURL and
// returns it with its own URL.
func newEndpoint(t *testing.T, rawURL string) (*endpoint, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{ln: ln, backend: u.Host, conns: map[net.Conn]struct{}{}, changed: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() { e.serve(&wg) })
	t.Cleanup(func() {
		_ = ln.Close()
		e.cut()
		wg.Wait()
	})
	return e, "http://" + ln.Addr().String()
}

// serve accepts until the listener is closed.
func (e *endpoint) serve(wg *sync.WaitGroup) {
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		if e.down {
			e.refused++
			close(e.changed)
			e.changed = make(chan struct{})
			e.mu.Unlock()
			_ = c.Close()
			continue
		}
		e.conns[c] = struct{}{}
		e.mu.Unlock()
		wg.Go(func() { e.relay(c) })
	}
}

// relay copies c to a new connection to the backend and back until either
// side closes.
func (e *endpoint) relay(c net.Conn) {
	defer e.forget(c)
	b, err := net.DialTimeout("tcp", e.backend, 10*time.Second)
	if err != nil {
		return
	}
	e.mu.Lock()
	if e.down {
		e.mu.Unlock()
		_ = b.Close()
		return
	}
	e.conns[b] = struct{}{}
	e.mu.Unlock()
	defer e.forget(b)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = b.Close()
	<-done
}

// forget closes c and stops tracking it.
func (e *endpoint) forget(c net.Conn) {
	_ = c.Close()
	e.mu.Lock()
	delete(e.conns, c)
	e.mu.Unlock()
}

// cut closes every open connection.
func (e *endpoint) cut() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for c := range e.conns {
		_ = c.Close()
	}
}

// outage takes the endpoint away, waits until it has refused a
// connection (the consumer met the outage), then gives it back.
func (e *endpoint) outage(t *testing.T, within time.Duration) {
	t.Helper()
	e.mu.Lock()
	e.down = true
	from := e.refused
	e.mu.Unlock()
	e.cut()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		e.mu.Lock()
		n, changed := e.refused, e.changed
		e.mu.Unlock()
		if n > from {
			break
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no connection was refused within %s of the outage", within)
		}
	}
	e.mu.Lock()
	e.down = false
	e.mu.Unlock()
}
