package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
)

// client is the suite's plain HTTP client for one bank. It deliberately does
// not use package bankclient's client: the suite checks the wire itself.
type client struct {
	baseURL string
	http    *http.Client
	prefix  string // makes this run's keys and references unique
	n       int
}

func newClient(t *testing.T, baseURL string) *client {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("error drawing a run prefix: %v", err)
	}
	tr := &http.Transport{
		// No connection reuse: net/http retries a request carrying an
		// Idempotency-Key on its own when a reused connection breaks, which
		// would hide what the bank answered to each request.
		DisableKeepAlives: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{
		baseURL: strings.TrimRight(baseURL, "/"),
		http:    &http.Client{Transport: tr, Timeout: 30 * time.Second},
		prefix:  "conf-" + hex.EncodeToString(b[:]),
	}
}

// unique returns a fresh name for a key or a reference.
func (c *client) unique(kind string) string {
	c.n++
	return fmt.Sprintf("%s-%s-%d", c.prefix, kind, c.n)
}

// newRequest returns a valid payment request with a fresh reference.
func (c *client) newRequest() bankclient.PaymentRequest {
	return bankclient.PaymentRequest{
		AmountCents:     12345,
		Currency:        "EUR",
		DebtorAccount:   "DE89370400440532013000",
		CreditorAccount: "FR1420041010050500013M02606",
		Reference:       c.unique("ref"),
	}
}

// response is an answer of the bank.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string {
	return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body))
}

// decode decodes the body into v, failing the test on error.
func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("error decoding %q: %v", r.body, err)
	}
}

// errorBody decodes the body as an error and checks it names an error.
func (r response) errorBody(t *testing.T) settle.ErrorBody {
	t.Helper()
	var e settle.ErrorBody
	r.decode(t, &e)
	if e.Error == "" {
		t.Fatalf("error answer without an error code: %s", r)
	}
	return e
}

// do sends a request; a transport error is returned, not fatal.
func (c *client) do(ctx context.Context, method, path string, header map[string]string, body []byte) (response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, rd)
	if err != nil {
		return response{}, fmt.Errorf("error building request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("error sending %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, fmt.Errorf("error reading answer to %s %s: %w", method, path, err)
	}
	return response{status: res.StatusCode, header: res.Header, body: data}, nil
}

// must sends a request and fails the test on a transport error.
func (c *client) must(t *testing.T, method, path string, header map[string]string, body []byte) response {
	t.Helper()
	r, err := c.do(context.Background(), method, path, header, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// postRaw posts body under key ("" sends no Idempotency-Key).
func (c *client) postRaw(t *testing.T, key string, body []byte) response {
	t.Helper()
	h := map[string]string{}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	return c.must(t, http.MethodPost, "/v1/payments", h, body)
}

// post posts req under key.
func (c *client) post(t *testing.T, key string, req bankclient.PaymentRequest) response {
	t.Helper()
	return c.postRaw(t, key, mustJSON(t, req))
}

// create posts req under key and expects a new payment.
func (c *client) create(t *testing.T, key string, req bankclient.PaymentRequest) bankclient.Payment {
	t.Helper()
	r := c.post(t, key, req)
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/payments: want 201, got %s", r)
	}
	var p bankclient.Payment
	r.decode(t, &p)
	return p
}

// byKey asks for the payment under key.
func (c *client) byKey(t *testing.T, key string) response {
	t.Helper()
	return c.must(t, http.MethodGet, "/v1/payments/by-key/"+key, nil, nil)
}

// mustByKey expects the payment under key to exist.
func (c *client) mustByKey(t *testing.T, key string) bankclient.Payment {
	t.Helper()
	r := c.byKey(t, key)
	if r.status != http.StatusOK {
		t.Fatalf("GET by-key %s: want 200, got %s", key, r)
	}
	var p bankclient.Payment
	r.decode(t, &p)
	return p
}

// setFaults replaces the fault profile.
func (c *client) setFaults(t *testing.T, f fakebank.Faults) {
	t.Helper()
	r := c.must(t, http.MethodPut, "/admin/faults", nil, mustJSON(t, f))
	if r.status != http.StatusOK {
		t.Fatalf("PUT /admin/faults: want 200, got %s", r)
	}
}

// faults returns the fault profile.
func (c *client) faults(t *testing.T) fakebank.Faults {
	t.Helper()
	r := c.must(t, http.MethodGet, "/admin/faults", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /admin/faults: want 200, got %s", r)
	}
	var f fakebank.Faults
	r.decode(t, &f)
	return f
}

// stats returns the bank's stats.
func (c *client) stats(t *testing.T) fakebank.Stats {
	t.Helper()
	r := c.must(t, http.MethodGet, "/admin/stats", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /admin/stats: want 200, got %s", r)
	}
	var s fakebank.Stats
	r.decode(t, &s)
	return s
}

// statement pages through the whole statement with the given page size.
func (c *client) statement(t *testing.T, limit int) []bankclient.Payment {
	t.Helper()
	var all []bankclient.Payment
	after := ""
	for pages := 0; ; pages++ {
		if pages > 1_000_000 {
			t.Fatal("statement does not end")
		}
		path := fmt.Sprintf("/v1/statement?limit=%d", limit)
		if after != "" {
			path += "&after=" + after
		}
		r := c.must(t, http.MethodGet, path, nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: want 200, got %s", path, r)
		}
		var pg bankclient.StatementPage
		r.decode(t, &pg)
		if len(pg.Payments) > limit {
			t.Fatalf("GET %s: %d payments, more than the limit", path, len(pg.Payments))
		}
		all = append(all, pg.Payments...)
		if pg.Next == "" {
			return all
		}
		after = pg.Next
	}
}

// eventually polls cond every few milliseconds until it holds or a
// generous deadline passes. It is used only where the bank's own clock must
// move and the suite cannot inject one.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("error encoding %T: %v", v, err)
	}
	return data
}
