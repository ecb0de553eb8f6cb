package loadtest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/settle/settle/fakebank"
)

// Bank is an in-process fakebank behind a front that counts every request
// and can be switched off: while down, it holds each request for DownDelay
// and then closes the connection without an answer, as an unreachable or
// crashed bank does (the client sees no definitive answer).
type Bank struct {
	*fakebank.Bank
	// URL is the base URL of the front.
	URL string
	// DownDelay is how long a request is held before the connection is
	// closed while the bank is down; set it before starting traffic.
	DownDelay time.Duration

	down                  atomic.Bool
	posts, status, others atomic.Int64
	inflight, maxInflight atomic.Int64
	srv                   *http.Server
}

// BankCounts are the requests the front has seen.
type BankCounts struct {
	Posts, Status, Others int64
	// MaxInflight is the most bank-protocol requests (payments and status)
	// in flight at once since the last ResetMaxInflight.
	MaxInflight int64
}

// Total is every payment and status request.
func (c BankCounts) Total() int64 { return c.Posts + c.Status }

// StartBank starts a fakebank with seed and faults behind a counting front
// on a free loopback port. Call Close when done.
func StartBank(seed int64, faults fakebank.Faults) (*Bank, error) {
	fb, err := fakebank.New(fakebank.Options{Seed: seed, Faults: faults})
	if err != nil {
		return nil, err
	}
	b := &Bank{Bank: fb, DownDelay: 100 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = fb.Close()
		return nil, err
	}
	b.URL = "http://" + ln.Addr().String()
	// Idle keep-alive connections are closed soon, as banks' load
	// balancers do, so that a client's idle pool does not look like a leak.
	b.srv = &http.Server{Handler: b.front(fb.Handler()), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

func (b *Bank) front(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protocol := true
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/payments":
			b.posts.Add(1)
		case strings.HasPrefix(r.URL.Path, "/v1/payments/by-key/"):
			b.status.Add(1)
		default:
			protocol = false
			b.others.Add(1)
		}
		if protocol {
			n := b.inflight.Add(1)
			defer b.inflight.Add(-1)
			for {
				m := b.maxInflight.Load()
				if n <= m || b.maxInflight.CompareAndSwap(m, n) {
					break
				}
			}
		}
		if protocol && b.down.Load() {
			select {
			case <-time.After(b.DownDelay):
			case <-r.Context().Done():
			}
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		h.ServeHTTP(w, r)
	})
}

// SetDown switches the bank off (true) or on again (false).
func (b *Bank) SetDown(down bool) { b.down.Store(down) }

// Counts returns the requests seen so far.
func (b *Bank) Counts() BankCounts {
	return BankCounts{Posts: b.posts.Load(), Status: b.status.Load(), Others: b.others.Load(), MaxInflight: b.maxInflight.Load()}
}

// ResetMaxInflight starts a new measurement of MaxInflight.
func (b *Bank) ResetMaxInflight() { b.maxInflight.Store(b.inflight.Load()) }

// Close stops the front and the bank.
func (b *Bank) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errBank := b.Bank.Close() // ends requests sleeping on latency
	err := b.srv.Shutdown(ctx)
	if err != nil {
		err = b.srv.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(errBank, err)
}
