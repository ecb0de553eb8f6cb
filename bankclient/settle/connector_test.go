package settle

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	c, err := bankclient.Connectors{Connector}.Lookup("settle")
	if err != nil || c.Name != "settle" || !c.Capabilities.LookupByKey {
		t.Fatalf("Lookup(settle) = %+v, %v", c, err)
	}
	if _, err := (bankclient.Connectors{Connector}).Lookup("swift-gpi"); err == nil || !strings.Contains(err.Error(), "settle") {
		t.Errorf("Lookup of an unknown connector: %v, want an error listing the known ones", err)
	}
	if err := c.Check("EUR", "anyone"); err != nil {
		t.Errorf("settle refuses EUR: %v", err)
	}
	narrow := bankclient.Connector{Name: "gbp-only", Capabilities: bankclient.Capabilities{Currencies: []string{"GBP"}}}
	if err := narrow.Check("EUR", "x"); err == nil || !strings.HasPrefix(err.Error(), "currency ") {
		t.Errorf("a GBP-only bank takes EUR: %v", err)
	}
}

// TestRateLimitWithRetryAfterDoesNotBurnAttempts: 429s that say how long to
// wait are waited out as asked, within the budget, and do not use up the
// attempts of the call.
func TestRateLimitWithRetryAfterDoesNotBurnAttempts(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 5 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		writeJSON(w, http.StatusCreated, paymentFor(r, bankclient.StatusAccepted))
	}, func(o *bankclient.Options) { o.Retry.RateLimitWait = time.Minute })
	start := time.Now()
	if _, err := b.client.Send(context.Background(), bankclient.KeyFor("rl"), testRequest()); err != nil {
		t.Fatalf("Send after five 429s: %v", err)
	}
	if got := len(b.requests()); got != 6 {
		t.Errorf("server saw %d requests, want 6 (five 429s, then the answer)", got)
	}
	if waited := time.Since(start); waited < 5*time.Second {
		t.Errorf("waited %s, the bank asked for 5 s in all", waited)
	}
}

// TestRateLimitBudgetEnds: past the budget the 429 comes back ambiguous
// with the wait the bank asked for, for the engine to honour.
func TestRateLimitBudgetEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	_, err := b.client.StatusByKey(context.Background(), bankclient.KeyFor("rl2"))
	var ae *bankclient.AmbiguousError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests || ae.RetryAfter != 30*time.Second {
		t.Fatalf("err = %v, want an ambiguous 429 asking for 30 s", err)
	}
	if got := len(b.requests()); got != 1 {
		t.Errorf("server saw %d requests, want 1", got)
	}
}

// TestRatePerSecond: the client spaces its requests so that the bank sees
// no more than the configured rate (measured by the server). A token
// bucket of one token lets request i leave no sooner than i/rate after the
// first, which left after start, so the bank cannot see it sooner than
// that after start: a bound that a loaded machine's delays only make
// easier to meet (a rate measured between the first and the last arrival
// is not, when the first arrival is the one delayed).
func TestRatePerSecond(t *testing.T) {
	t.Parallel()
	const perSecond, n = 20.0, 30
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, paymentFor(r, bankclient.StatusAccepted))
	}, func(o *bankclient.Options) { o.RatePerSecond = perSecond })
	done := make(chan error, n)
	start := time.Now()
	for i := range n {
		go func() {
			_, err := b.client.StatusByKey(context.Background(), bankclient.KeyFor("r"+string(rune('a'+i))))
			done <- err
		}()
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	reqs := b.requests()
	if len(reqs) != n {
		t.Fatalf("%d requests, want %d", len(reqs), n)
	}
	for i, r := range reqs {
		// A millisecond for the limiter's rounding of its token times.
		soonest := time.Duration(float64(i)/perSecond*float64(time.Second)) - time.Millisecond
		if got := r.At.Sub(start); got < soonest {
			t.Errorf("request %d reached the bank %v after the start, before %v: more than %g a second", i+1, got, soonest, perSecond)
		}
	}
}
