package settle

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// fastRetry is a retry policy with tiny waits, so tests do not sleep.
var fastRetry = bankclient.RetryPolicy{
	MaxAttempts:         3,
	MaxElapsed:          time.Minute,
	InitialInterval:     time.Millisecond,
	MaxInterval:         2 * time.Millisecond,
	Multiplier:          2,
	RandomizationFactor: 0.5,
}

const testToken = "tok-9f8e7d6c5b4a-do-not-leak"

// recorded is one request as the test server saw it.
type recorded struct {
	Method, Path, Query, Key, Auth, Body string
	// At is when the server received the request.
	At time.Time
}

// observation is one call of Options.Observe.
type observation struct{ op, outcome string }

type testBundle struct {
	client *Client
	server *httptest.Server
	logs   *settletest.Buffer

	mu   sync.Mutex
	reqs []recorded
	obs  []observation
}

func (b *testBundle) requests() []recorded {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]recorded(nil), b.reqs...)
}

func (b *testBundle) observations() []observation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]observation(nil), b.obs...)
}

// setup starts a server running handler, recording every request, and a
// client of it with fast retries, a debug logger and the test token.
func setup(t *testing.T, handler http.HandlerFunc, mutate ...func(*bankclient.Options)) *testBundle {
	t.Helper()
	b := &testBundle{logs: &settletest.Buffer{}}
	b.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.reqs = append(b.reqs, recorded{
			Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
			Key: r.Header.Get("Idempotency-Key"), Auth: r.Header.Get("Authorization"), Body: string(body),
			At: time.Now(),
		})
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		handler(w, r)
	}))
	t.Cleanup(b.server.Close)

	opts := bankclient.Options{
		Timeout: 5 * time.Second,
		Retry:   fastRetry,
		Token:   testToken,
		Logger:  slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Observe: func(op, outcome string, _ time.Duration) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.obs = append(b.obs, observation{op, outcome})
		},
	}
	for _, m := range mutate {
		m(&opts)
	}
	client, err := New(b.server.URL, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.client = client
	return b
}

func testRequest() bankclient.PaymentRequest {
	return bankclient.PaymentRequest{AmountCents: 1250, Currency: "EUR", DebtorAccount: "acc-1", CreditorAccount: "DE89370400440532013000", Reference: "stl-1"}
}

// paymentFor is the payment a correct bank would answer for r.
func paymentFor(r *http.Request, status bankclient.Status) bankclient.Payment {
	var req bankclient.PaymentRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		key = strings.TrimPrefix(r.URL.Path, "/v1/payments/by-key/")
	}
	return bankclient.Payment{
		ID: "pay-1", IdempotencyKey: key, Reference: req.Reference, Status: status,
		AmountCents: req.AmountCents, Currency: req.Currency,
		DebtorAccount: req.DebtorAccount, CreditorAccount: req.CreditorAccount,
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func statusHandler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// hangUp closes the connection without answering.
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

// slow answers only after the client has given up.
func slow(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
	writeJSON(w, http.StatusCreated, paymentFor(r, bankclient.StatusAccepted))
}

// errClass names the class of an error, by the package's predicates only.
func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case bankclient.IsUnauthorized(err):
		if !bankclient.IsAmbiguous(err) {
			return "unauthorized-but-not-ambiguous"
		}
		return "unauthorized"
	case bankclient.IsAmbiguous(err):
		return "ambiguous"
	case bankclient.IsRejected(err):
		return "rejected"
	case bankclient.IsKeyReuse(err):
		return "key_reuse"
	case bankclient.IsNotFound(err):
		return "not_found"
	}
	return "other"
}

func TestSendClassification(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name         string
		handler      http.HandlerFunc
		mutate       func(*bankclient.Options)
		wantClass    string
		wantAttempts int
		wantReplayed bool
		wantStatus   int // of the AmbiguousError, or the RejectedError
	}{
		{name: "201 created", handler: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusCreated, paymentFor(r, bankclient.StatusAccepted))
		}, wantClass: "ok", wantAttempts: 1},
		{name: "200 replay", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Idempotent-Replayed", "true")
			writeJSON(w, http.StatusOK, paymentFor(r, bankclient.StatusSettled))
		}, wantClass: "ok", wantAttempts: 1, wantReplayed: true},
		{name: "422 rejected", handler: statusHandler(422, `{"error":"rejected","reason":"insufficient funds"}`),
			wantClass: "rejected", wantAttempts: 1, wantStatus: 422},
		{name: "422 other code", handler: statusHandler(422, `{"error":"invalid_creditor"}`),
			wantClass: "rejected", wantAttempts: 1, wantStatus: 422},
		{name: "422 key reuse", handler: statusHandler(422, `{"error":"idempotency_key_reuse"}`),
			wantClass: "key_reuse", wantAttempts: 1},
		{name: "422 unreadable", handler: statusHandler(422, `<html>oops</html>`),
			wantClass: "ambiguous", wantAttempts: 1, wantStatus: 422},
		{name: "400", handler: statusHandler(400, `{"error":"missing_idempotency_key"}`),
			wantClass: "rejected", wantAttempts: 1, wantStatus: 400},
		{name: "400 no body", handler: statusHandler(400, ``),
			wantClass: "rejected", wantAttempts: 1, wantStatus: 400},
		{name: "404 wrong url", handler: http.NotFound,
			wantClass: "ambiguous", wantAttempts: 1, wantStatus: 404},
		{name: "500", handler: statusHandler(500, `{"error":"internal"}`),
			wantClass: "ambiguous", wantAttempts: 3, wantStatus: 500},
		{name: "503", handler: statusHandler(503, ``),
			wantClass: "ambiguous", wantAttempts: 3, wantStatus: 503},
		{name: "504", handler: statusHandler(504, `gateway timeout`),
			wantClass: "ambiguous", wantAttempts: 3, wantStatus: 504},
		{name: "429", handler: statusHandler(429, `{"error":"rate_limited"}`),
			wantClass: "ambiguous", wantAttempts: 3, wantStatus: 429},
		{name: "429 long retry-after", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(429)
		}, wantClass: "ambiguous", wantAttempts: 1, wantStatus: 429},
		{name: "401", handler: statusHandler(401, `{"error":"unauthorized"}`),
			wantClass: "unauthorized", wantAttempts: 1, wantStatus: 401},
		{name: "403", handler: statusHandler(403, ``),
			wantClass: "unauthorized", wantAttempts: 1, wantStatus: 403},
		{name: "302 not followed", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, wantClass: "ambiguous", wantAttempts: 1, wantStatus: 302},
		{name: "hang up without answer", handler: hangUp,
			wantClass: "ambiguous", wantAttempts: 3},
		{name: "slower than timeout", handler: slow,
			mutate:    func(o *bankclient.Options) { o.Timeout = 50 * time.Millisecond },
			wantClass: "ambiguous", wantAttempts: 3},
		{name: "garbage 2xx", handler: statusHandler(201, `{"id":`),
			wantClass: "ambiguous", wantAttempts: 3, wantStatus: 201},
		{name: "2xx html", handler: statusHandler(200, `<html>welcome</html>`),
			wantClass: "ambiguous", wantAttempts: 3, wantStatus: 200},
		{name: "2xx unknown status", handler: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusCreated, paymentFor(r, "paid"))
		}, wantClass: "ambiguous", wantAttempts: 3, wantStatus: 201},
		{name: "2xx another key", handler: func(w http.ResponseWriter, r *http.Request) {
			p := paymentFor(r, bankclient.StatusAccepted)
			p.IdempotencyKey = bankclient.KeyFor("someone-else")
			writeJSON(w, http.StatusCreated, p)
		}, wantClass: "ambiguous", wantAttempts: 3, wantStatus: 201},
		{name: "2xx another amount", handler: func(w http.ResponseWriter, r *http.Request) {
			p := paymentFor(r, bankclient.StatusAccepted)
			p.AmountCents++
			writeJSON(w, http.StatusCreated, p)
		}, wantClass: "ambiguous", wantAttempts: 3, wantStatus: 201},
		{name: "2xx too large", handler: func(w http.ResponseWriter, r *http.Request) {
			p := paymentFor(r, bankclient.StatusAccepted)
			p.FailureReason = strings.Repeat("x", 4096)
			writeJSON(w, http.StatusCreated, p)
		}, mutate: func(o *bankclient.Options) { o.MaxResponseSize = 1024 },
			wantClass: "ambiguous", wantAttempts: 3, wantStatus: 201},
		{name: "204 no content", handler: statusHandler(204, ``),
			wantClass: "ambiguous", wantAttempts: 3, wantStatus: 204},
		{name: "single attempt policy", handler: statusHandler(503, ``),
			mutate:    func(o *bankclient.Options) { o.Retry.MaxAttempts = 1 },
			wantClass: "ambiguous", wantAttempts: 1, wantStatus: 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mutate []func(*bankclient.Options)
			if tt.mutate != nil {
				mutate = append(mutate, tt.mutate)
			}
			b := setup(t, tt.handler, mutate...)
			key := bankclient.KeyFor("stl-1")

			res, err := b.client.Send(context.Background(), key, testRequest())

			if got := errClass(err); got != tt.wantClass {
				t.Fatalf("class = %s, want %s (err: %v)", got, tt.wantClass, err)
			}
			reqs := b.requests()
			if len(reqs) != tt.wantAttempts {
				t.Fatalf("server saw %d requests, want %d", len(reqs), tt.wantAttempts)
			}
			wantBody, _ := json.Marshal(testRequest())
			for i, r := range reqs {
				if r.Method != http.MethodPost || r.Path != "/v1/payments" {
					t.Errorf("request %d: %s %s", i, r.Method, r.Path)
				}
				if r.Key != key {
					t.Errorf("request %d: Idempotency-Key %q, want %q", i, r.Key, key)
				}
				if r.Body != string(wantBody) {
					t.Errorf("request %d: body %s, want %s", i, r.Body, wantBody)
				}
				if r.Auth != "Bearer "+testToken {
					t.Errorf("request %d: no bearer credential", i)
				}
			}
			if got := len(b.observations()); got != tt.wantAttempts {
				t.Errorf("Observe called %d times, want %d", got, tt.wantAttempts)
			}

			if err == nil {
				if res.Replayed != tt.wantReplayed {
					t.Errorf("Replayed = %v, want %v", res.Replayed, tt.wantReplayed)
				}
				if res.Payment.IdempotencyKey != key || res.Payment.ID == "" {
					t.Errorf("payment = %+v", res.Payment)
				}
			}
			var ae *bankclient.AmbiguousError
			if errors.As(err, &ae) {
				if ae.Op != bankclient.OpSend || ae.Attempts != tt.wantAttempts || ae.StatusCode != tt.wantStatus {
					t.Errorf("AmbiguousError{Op:%s Attempts:%d StatusCode:%d}, want {send %d %d}", ae.Op, ae.Attempts, ae.StatusCode, tt.wantAttempts, tt.wantStatus)
				}
				if bankclient.IsRejected(err) || bankclient.IsKeyReuse(err) || bankclient.IsNotFound(err) {
					t.Errorf("ambiguous error matches a definitive predicate: %v", err)
				}
			}
			var re *bankclient.RejectedError
			if errors.As(err, &re) && re.StatusCode != tt.wantStatus {
				t.Errorf("RejectedError.StatusCode = %d, want %d", re.StatusCode, tt.wantStatus)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "error sending payment ") {
				t.Errorf("error %q does not read \"error sending payment ...\"", err)
			}
			assertNoToken(t, err, b.logs.String())
		})
	}
}

// assertNoToken fails if the credential shows in err or in logs.
func assertNoToken(t *testing.T, err error, logs string) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), testToken) {
		t.Errorf("credential in error: %v", err)
	}
	if err != nil && strings.Contains(fmt.Sprintf("%+v %#v", err, err), testToken) {
		t.Errorf("credential in formatted error")
	}
	if strings.Contains(logs, testToken) {
		t.Errorf("credential in logs: %s", logs)
	}
}

func TestSendRejectedReason(t *testing.T) {
	t.Parallel()
	b := setup(t, statusHandler(422, `{"error":"rejected","reason":"insufficient funds\u0000\n"}`))

	_, err := b.client.Send(context.Background(), bankclient.KeyFor("stl-1"), testRequest())

	var re *bankclient.RejectedError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want *bankclient.RejectedError", err)
	}
	if re.Code != ErrorCodeRejected || re.Reason != "insufficient funds" {
		t.Errorf("RejectedError = %+v", re)
	}
}

func TestSendRetriesUntilAnswer(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name         string
		first        http.HandlerFunc // for the first two attempts
		wantReplayed bool
	}{
		{name: "after 503", first: statusHandler(503, ``)},
		{name: "after hang up", first: hangUp, wantReplayed: true},
		{name: "after garbage", first: statusHandler(201, `nonsense`), wantReplayed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			n := 0
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n++
				i := n
				mu.Unlock()
				switch {
				case i < 3:
					tt.first(w, r)
				case tt.wantReplayed:
					w.Header().Set("Idempotent-Replayed", "true")
					writeJSON(w, http.StatusOK, paymentFor(r, bankclient.StatusAccepted))
				default:
					writeJSON(w, http.StatusCreated, paymentFor(r, bankclient.StatusAccepted))
				}
			})
			key := bankclient.KeyFor("stl-retry")

			res, err := b.client.Send(context.Background(), key, testRequest())
			if err != nil {
				t.Fatalf("Send: %v", err)
			}
			if res.Replayed != tt.wantReplayed {
				t.Errorf("Replayed = %v, want %v", res.Replayed, tt.wantReplayed)
			}
			reqs := b.requests()
			if len(reqs) != 3 {
				t.Fatalf("server saw %d requests, want 3", len(reqs))
			}
			for _, r := range reqs[1:] {
				if r.Key != reqs[0].Key || r.Body != reqs[0].Body {
					t.Errorf("retry differs from first attempt: %+v vs %+v", r, reqs[0])
				}
			}
			if !strings.Contains(b.logs.String(), "retrying") {
				t.Errorf("no retry logged: %s", b.logs.String())
			}
			assertNoToken(t, err, b.logs.String())
		})
	}
}

func TestSendContext(t *testing.T) {
	t.Parallel()

	t.Run("cancel during request", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-r.Context().Done()
		}, func(o *bankclient.Options) { o.Timeout = time.Hour })
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := b.client.Send(ctx, bankclient.KeyFor("stl-1"), testRequest())
			errc <- err
		}()
		<-arrived
		cancel()
		err := waitErr(t, errc)
		var ae *bankclient.AmbiguousError
		if !errors.As(err, &ae) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want ambiguous and context.Canceled", err)
		}
		if ae.Attempts != 1 || len(b.requests()) != 1 {
			t.Errorf("attempts = %d, requests = %d, want 1", ae.Attempts, len(b.requests()))
		}
	})

	t.Run("cancel during backoff wait", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		b := setup(t, statusHandler(503, ``), func(o *bankclient.Options) {
			o.Retry = bankclient.RetryPolicy{MaxAttempts: 5, MaxElapsed: 2 * time.Hour, InitialInterval: time.Hour, MaxInterval: time.Hour}
			// Observe runs once the answer is classified, before the wait.
			o.Observe = func(string, string, time.Duration) { arrived <- struct{}{} }
		})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := b.client.Send(ctx, bankclient.KeyFor("stl-1"), testRequest())
			errc <- err
		}()
		<-arrived
		cancel()
		err := waitErr(t, errc)
		var ae *bankclient.AmbiguousError
		if !errors.As(err, &ae) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want ambiguous and context.Canceled", err)
		}
		if ae.StatusCode != 503 || ae.Attempts != 1 || len(b.requests()) != 1 {
			t.Errorf("AmbiguousError = %+v, requests = %d", ae, len(b.requests()))
		}
	})

	t.Run("done before any request", func(t *testing.T) {
		t.Parallel()
		b := setup(t, statusHandler(201, ``))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := b.client.Send(ctx, bankclient.KeyFor("stl-1"), testRequest())
		if !errors.Is(err, context.Canceled) || bankclient.IsAmbiguous(err) {
			t.Fatalf("err = %v, want context.Canceled and not ambiguous (nothing was sent)", err)
		}
		if len(b.requests()) != 0 {
			t.Errorf("server saw %d requests, want 0", len(b.requests()))
		}
	})
}

// waitErr waits for a call that must return promptly once its context ends;
// the bound only guards against a hang, it measures nothing.
func waitErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("call did not return after its context was cancelled")
		return nil
	}
}

func TestSendInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t, statusHandler(201, ``))

	tests := []struct {
		name string
		key  string
		req  bankclient.PaymentRequest
	}{
		{name: "empty key", key: "", req: testRequest()},
		{name: "zero amount", key: bankclient.KeyFor("x"), req: bankclient.PaymentRequest{Currency: "EUR", Reference: "x"}},
	}
	for _, tt := range tests {
		_, err := b.client.Send(context.Background(), tt.key, tt.req)
		if err == nil || errClass(err) != "other" {
			t.Errorf("%s: err = %v, want a plain error", tt.name, err)
		}
	}
	if len(b.requests()) != 0 {
		t.Errorf("server saw %d requests, want 0", len(b.requests()))
	}
}

func TestStatusByKey(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name         string
		handler      http.HandlerFunc
		wantClass    string
		wantAttempts int
	}{
		{name: "200", handler: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, paymentFor(r, bankclient.StatusSettled))
		}, wantClass: "ok", wantAttempts: 1},
		{name: "404", handler: statusHandler(404, `{"error":"not_found"}`), wantClass: "not_found", wantAttempts: 1},
		{name: "500", handler: statusHandler(500, ``), wantClass: "ambiguous", wantAttempts: 3},
		{name: "429", handler: statusHandler(429, ``), wantClass: "ambiguous", wantAttempts: 3},
		{name: "401", handler: statusHandler(401, ``), wantClass: "unauthorized", wantAttempts: 1},
		{name: "400", handler: statusHandler(400, `{"error":"bad_key"}`), wantClass: "ambiguous", wantAttempts: 1},
		{name: "hang up", handler: hangUp, wantClass: "ambiguous", wantAttempts: 3},
		{name: "garbage", handler: statusHandler(200, `[]`), wantClass: "ambiguous", wantAttempts: 3},
		{name: "another key", handler: func(w http.ResponseWriter, r *http.Request) {
			p := paymentFor(r, bankclient.StatusSettled)
			p.IdempotencyKey = "other"
			writeJSON(w, http.StatusOK, p)
		}, wantClass: "ambiguous", wantAttempts: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.handler)
			key := bankclient.KeyFor("stl-status")

			p, err := b.client.StatusByKey(context.Background(), key)

			if got := errClass(err); got != tt.wantClass {
				t.Fatalf("class = %s, want %s (err: %v)", got, tt.wantClass, err)
			}
			reqs := b.requests()
			if len(reqs) != tt.wantAttempts {
				t.Fatalf("server saw %d requests, want %d", len(reqs), tt.wantAttempts)
			}
			for _, r := range reqs {
				if r.Method != http.MethodGet || r.Path != "/v1/payments/by-key/"+key {
					t.Errorf("request %s %s", r.Method, r.Path)
				}
			}
			if err == nil && (p.Status != bankclient.StatusSettled || p.IdempotencyKey != key) {
				t.Errorf("payment = %+v", p)
			}
			assertNoToken(t, err, b.logs.String())
		})
	}
}

func TestStatement(t *testing.T) {
	t.Parallel()

	pages := map[string]string{
		"":   `{"payments":[{"id":"p1","status":"settled","amount_cents":1},{"id":"p2","status":"failed","amount_cents":2}],"next":"c1"}`,
		"c1": `{"payments":[{"id":"p3","status":"accepted","amount_cents":3}],"next":"c2"}`,
		"c2": `{"payments":[],"next":""}`,
	}
	pager := func(w http.ResponseWriter, r *http.Request) {
		page, ok := pages[r.URL.Query().Get("after")]
		if !ok {
			w.WriteHeader(400)
			return
		}
		_, _ = io.WriteString(w, page)
	}

	t.Run("pages", func(t *testing.T) {
		t.Parallel()
		b := setup(t, pager)
		var ids []string
		for p, err := range bankclient.Payments(context.Background(), b.client, 2) {
			if err != nil {
				t.Fatalf("Payments: %v", err)
			}
			ids = append(ids, p.ID)
		}
		if got := strings.Join(ids, ","); got != "p1,p2,p3" {
			t.Errorf("ids = %s", got)
		}
		var queries []string
		for _, r := range b.requests() {
			queries = append(queries, r.Query)
		}
		if got := strings.Join(queries, " "); got != "limit=2 after=c1&limit=2 after=c2&limit=2" {
			t.Errorf("queries = %s", got)
		}
	})

	t.Run("cursor loop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, statusHandler(200, `{"payments":[],"next":"same"}`))
		var last error
		n := 0
		for _, err := range bankclient.Payments(context.Background(), b.client, 0) {
			n++
			last = err
		}
		if !errors.Is(last, bankclient.ErrCursorLoop) || n != 1 {
			t.Errorf("yields = %d, last = %v", n, last)
		}
	})

	tests := []struct {
		name      string
		body      string
		wantClass string
	}{
		{name: "no payments field", body: `{"next":""}`, wantClass: "ambiguous"},
		{name: "bad status", body: `{"payments":[{"id":"p1","status":"gone"}]}`, wantClass: "ambiguous"},
		{name: "no id", body: `{"payments":[{"status":"settled"}]}`, wantClass: "ambiguous"},
		{name: "truncated", body: `{"payments":[`, wantClass: "ambiguous"},
		{name: "empty", body: `{"payments":[]}`, wantClass: "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, statusHandler(200, tt.body))
			_, err := b.client.Statement(context.Background(), "", 10)
			if got := errClass(err); got != tt.wantClass {
				t.Errorf("class = %s, want %s (err: %v)", got, tt.wantClass, err)
			}
		})
	}
}

func TestObserve(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	n := 0
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		switch i {
		case 1:
			w.WriteHeader(503)
		case 2:
			w.Header().Set("Idempotent-Replayed", "true")
			writeJSON(w, 200, paymentFor(r, bankclient.StatusAccepted))
		case 3:
			w.WriteHeader(404)
		default:
			w.WriteHeader(401)
		}
	})
	ctx := context.Background()
	_, _ = b.client.Send(ctx, bankclient.KeyFor("a"), testRequest())
	_, _ = b.client.StatusByKey(ctx, bankclient.KeyFor("a"))
	_, _ = b.client.Statement(ctx, "", 0)

	want := []observation{
		{bankclient.OpSend, bankclient.OutcomeAmbiguous}, {bankclient.OpSend, bankclient.OutcomeReplayed},
		{bankclient.OpStatus, bankclient.OutcomeNotFound}, {bankclient.OpStatement, bankclient.OutcomeUnauthorized},
	}
	if got := b.observations(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("observations = %v, want %v", got, want)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		url     string
		opts    bankclient.Options
		wantErr bool
	}{
		{name: "http loopback", url: "http://127.0.0.1:8081"},
		{name: "https with path", url: "https://bank.example/api/"},
		{name: "token over https", url: "https://bank.example", opts: bankclient.Options{Token: testToken}},
		{name: "token over http loopback", url: "http://localhost:8081", opts: bankclient.Options{Token: testToken}},
		{name: "token over plain http", url: "http://bank.example", opts: bankclient.Options{Token: testToken}, wantErr: true},
		{name: "token with newline", url: "https://bank.example", opts: bankclient.Options{Token: testToken + "\n"}, wantErr: true},
		{name: "no scheme", url: "bank.example:8081", wantErr: true},
		{name: "ftp", url: "ftp://bank.example", wantErr: true},
		{name: "user info", url: "https://user:" + testToken + "@bank.example", wantErr: true},
		{name: "query", url: "https://bank.example/?x=1", wantErr: true},
		{name: "ca and client", url: "https://bank.example", opts: bankclient.Options{CAFile: "ca.pem", HTTPClient: &http.Client{}}, wantErr: true},
		{name: "missing ca", url: "https://bank.example", opts: bankclient.Options{CAFile: filepath.Join(t.TempDir(), "none.pem")}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.url, tt.opts)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), testToken) {
				t.Errorf("credential in error: %v", err)
			}
		})
	}
}

func TestTLSWithCAFile(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			w.WriteHeader(401)
			return
		}
		writeJSON(w, http.StatusOK, paymentFor(r, bankclient.StatusSettled))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted handshake below fails on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{bankclient.EnvToken: testToken, bankclient.EnvCAFile: caFile}
	opts := bankclient.OptionsFromEnv(func(k string) string { return env[k] })
	opts.Retry = fastRetry

	trusted, err := New(srv.URL, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := trusted.StatusByKey(context.Background(), bankclient.KeyFor("tls")); err != nil {
		t.Fatalf("StatusByKey with CA file: %v", err)
	}

	opts.CAFile = ""
	untrusted, err := New(srv.URL, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	_, err = untrusted.StatusByKey(context.Background(), bankclient.KeyFor("tls"))
	var ae *bankclient.AmbiguousError
	if !errors.As(err, &ae) || ae.Attempts != 1 {
		t.Fatalf("err = %v, want ambiguous after one attempt (untrusted certificate is not retried)", err)
	}
	assertNoToken(t, err, "")
}

func TestSecretNeverPrints(t *testing.T) {
	t.Parallel()
	opts := bankclient.Options{Token: testToken, CAFile: "/etc/ca.pem"}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("options", "opts", opts, "token", opts.Token)
	js, _ := json.Marshal(struct{ T bankclient.Secret }{opts.Token})
	for _, s := range []string{
		fmt.Sprintf("%v", opts), fmt.Sprintf("%+v", opts), fmt.Sprintf("%#v", opts),
		fmt.Sprint(opts.Token), logs.String(), string(js),
	} {
		if strings.Contains(s, testToken) {
			t.Errorf("credential printed: %s", s)
		}
	}
}
