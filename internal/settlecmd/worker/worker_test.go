package worker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/events/eventstest"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/settlecmd/submit"
	"github.com/settle/settle/internal/settlecmd/worker"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// TestWebhookHints: a webhook is a hint. Verified, it enqueues an
// immediate status check of the settlement it names and nothing else; a
// bad signature, an old timestamp, a body naming no payment or a payment
// of no settlement changes nothing; every outcome is counted.
func TestWebhookHints(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test"
	var pool *pgxpool.Pool
	w := newWorker(t, "tok", func(c *worker.Config) { c.WebhookSecret, pool = secret, c.Pool })
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	ev := `{"settlement_id":"hinted","account_id":"acc","amount_cents":700,"currency":"EUR","beneficiary":"b"}`
	if code, body := settletest.Do(t, http.MethodPost, srv.URL+"/v1/settlements", "Bearer tok", ev); code != http.StatusCreated {
		t.Fatalf("POST = %d %s", code, body)
	}
	jobs := func() int {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'reconcile_settlement' AND args->>'settlement_id' = 'hinted'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	state := func() string {
		var st string
		_ = pool.QueryRow(context.Background(), `SELECT state FROM settlements WHERE settlement_id = 'hinted'`).Scan(&st)
		return st
	}
	post := func(body, sig string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/bank/webhooks/settle", strings.NewReader(body))
		if sig != "" {
			req.Header.Set(settle.SignatureHeader, sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	now := time.Now()
	// A hint claiming the payment settled: only a check follows.
	hint := `{"type":"payment.updated","payment":{"id":"pay_000000000001","reference":"hinted","status":"settled","amount_cents":700,"currency":"EUR"}}`
	for _, tc := range []struct {
		name, body, sig string
		code            int
	}{
		{"no signature", hint, "", http.StatusBadRequest},
		{"forged", hint, bankhttp.SignHMAC([]byte(hint), "not-the-secret", now), http.StatusBadRequest},
		{"tampered body", strings.Replace(hint, "700", "7000", 1), bankhttp.SignHMAC([]byte(hint), secret, now), http.StatusBadRequest},
		{"stale", hint, bankhttp.SignHMAC([]byte(hint), secret, now.Add(-10*time.Minute)), http.StatusBadRequest},
		{"names no payment", `{"type":"x"}`, bankhttp.SignHMAC([]byte(`{"type":"x"}`), secret, now), http.StatusBadRequest},
		{"unknown settlement", strings.Replace(hint, `"hinted"`, `"nobody"`, 1), bankhttp.SignHMAC([]byte(strings.Replace(hint, `"hinted"`, `"nobody"`, 1)), secret, now), http.StatusOK},
	} {
		if code := post(tc.body, tc.sig); code != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.code)
		}
	}
	if n := jobs(); n != 0 {
		t.Fatalf("refused hints enqueued %d checks", n)
	}
	if code := post(hint, bankhttp.SignHMAC([]byte(hint), secret, now)); code != http.StatusAccepted {
		t.Fatalf("a good hint: %d, want 202", code)
	}
	if code := post(hint, bankhttp.SignHMAC([]byte(hint), secret, now)); code != http.StatusAccepted {
		t.Fatalf("the good hint again: %d, want 202", code)
	}
	if n := jobs(); n != 1 {
		t.Errorf("%d checks enqueued by two identical hints, want one", n)
	}
	if st := state(); st != "pending" {
		t.Errorf("the hint's body moved the settlement to %s", st)
	}
	if code := post(hint, bankhttp.SignHMAC([]byte(hint), secret, now)); code != http.StatusAccepted {
		t.Fatal("third hint refused")
	}
	if code := post(hint, ""); code != http.StatusBadRequest {
		t.Fatal("unsigned hint accepted")
	}
	if code := post(hint, bankhttp.SignHMAC([]byte(hint), secret, now)); code != http.StatusAccepted {
		t.Fatal("hint refused")
	}
	if code, _ := settletest.Do(t, http.MethodPost, srv.URL+"/v1/bank/webhooks/stripe", "", hint); code != http.StatusNotFound {
		t.Errorf("a webhook for another connector: %d, want 404", code)
	}
	_, metrics := settletest.Get(t, srv.URL+"/metrics", "Bearer tok")
	for _, want := range []string{
		`settle_bank_webhooks_total{connector="settle",outcome="checked"} 4`,
		`settle_bank_webhooks_total{connector="settle",outcome="bad_signature"} 4`,
		`settle_bank_webhooks_total{connector="settle",outcome="stale"} 1`,
		`settle_bank_webhooks_total{connector="settle",outcome="malformed"} 1`,
		`settle_bank_webhooks_total{connector="settle",outcome="unknown_settlement"} 1`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// newWorker assembles a worker on a fresh database and an in-process bank,
// listening on a free port; it is closed when the test ends.
func newWorker(t *testing.T, token string, tweak ...func(*worker.Config)) *worker.Worker {
	t.Helper()
	db := dbtest.New(t)
	_, bankURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 1})
	c := worker.DefaultConfig()
	c.Pool, c.BankURL, c.APIToken, c.Listen = db.Pool, bankURL, token, "127.0.0.1:0"
	c.ShutdownTimeout = 5 * time.Second
	for _, f := range tweak {
		f(&c)
	}
	w, err := worker.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// TestSubmitThroughIntakeThenScrape sends a known NDJSON file with bad lines
// through the real intake API with submit, checks submit's counts, then
// scrapes /metrics and checks the counters' and gauges' values.
func TestSubmitThroughIntakeThenScrape(t *testing.T) {
	t.Parallel()
	// The assembly's handler, served without Run: River is not started, so
	// the send jobs stay queued and the settlements pending.
	w := newWorker(t, "tok")
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)

	f, err := os.Open("../submit/testdata/events.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Concurrency 1 keeps the file's order, so "first" and "redelivery"
	// are well defined.
	sum, err := submit.Run(context.Background(), f, submit.Options{URL: srv.URL, Token: "tok", Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Lines != 10 || sum.Created != 3 || sum.Replayed != 2 || sum.Conflict != 1 || sum.Invalid != 4 || sum.Errors != 0 {
		t.Errorf("summary = %+v, want 10 lines: 3 created, 2 replayed, 1 conflict, 4 invalid, 0 errors", sum)
	}
	var problemLines []int
	for _, p := range sum.Problems {
		problemLines = append(problemLines, p.Line)
	}
	if want := []int{4, 5, 6, 9, 11}; !equalInts(problemLines, want) {
		t.Errorf("problem lines = %v, want %v: %+v", problemLines, want, sum.Problems)
	}

	if code, _ := settletest.Get(t, srv.URL+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token = %d, want 401", code)
	}
	_, body := settletest.Get(t, srv.URL+"/metrics", "Bearer tok")
	for _, want := range []string{
		// Line 4 is refused by submit itself and never reaches intake.
		`settle_intake_total{outcome="created"} 3`,
		`settle_intake_total{outcome="replayed"} 2`,
		`settle_intake_total{outcome="conflict"} 1`,
		`settle_intake_total{outcome="invalid"} 3`,
		"settle_receipt_conflicts_total 1",
		"settle_replay_age_seconds_count 2",
		`settle_settlements{state="pending"} 3`,
		`settle_settlements{state="confirmed"} 0`,
		"settle_needs_investigation 0",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "settle_") {
				t.Log(l)
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRunServesUntilCancelled boots the whole worker: it announces its
// address once it accepts connections, answers /healthz and /readyz
// without the token and /metrics, /v1/ and /riverui/ only with it, settles
// a payment through River, and returns cleanly when its context ends.
func TestRunServesUntilCancelled(t *testing.T) {
	t.Parallel()
	w := newWorker(t, "s3cret")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(addr string) { ready <- addr }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	base := "http://" + <-ready
	do := func(method, path, auth, body string) (int, string) {
		t.Helper()
		return settletest.Do(t, method, base+path, auth, body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := do(http.MethodGet, path, "", ""); code != http.StatusOK {
			t.Errorf("GET %s = %d %s", path, code, body)
		}
	}
	for _, path := range []string{"/metrics", "/riverui/", "/v1/settlements/x"} {
		if code, _ := do(http.MethodGet, path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token = %d, want 401", path, code)
		}
	}
	for _, path := range []string{"/riverui/", "/riverui/api/queues"} {
		if code, body := do(http.MethodGet, path, "Bearer s3cret", ""); code != http.StatusOK {
			t.Errorf("GET %s with the token = %d\n%.300s", path, code, body)
		}
	}
	ev := `{"settlement_id":"run-1","account_id":"acc","amount_cents":1234,"currency":"EUR","beneficiary":"DE89370400440532013000"}`
	if code, body := do(http.MethodPost, "/v1/settlements", "Bearer s3cret", ev); code != http.StatusCreated {
		t.Fatalf("POST = %d %s", code, body)
	}
	// River runs the send job; the bank settles at once: wait for the
	// settlement to be confirmed (the signal), as long as the test allows.
	for {
		code, body := do(http.MethodGet, "/v1/settlements/run-1", "Bearer s3cret", "")
		if code != http.StatusOK {
			t.Fatalf("GET = %d %s", code, body)
		}
		var v settlement.View
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		if v.Settlement.State == settlement.Confirmed {
			if v.Movement == nil || v.Movement.AmountCents != 1234 {
				t.Errorf("confirmed without its movement: %s", body)
			}
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("still %s", v.Settlement.State)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestRunRegistersSinksFirst: by the time the worker accepts connections
// (and before River or a source moves anything) its event sinks are
// registered, so the very first settlement's events are queued for them
// and delivered.
func TestRunRegistersSinksFirst(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rcv := eventstest.NewReceiver(t, nil, secret)
	var pool *pgxpool.Pool
	w := newWorker(t, "tok", func(c *worker.Config) {
		c.EventsURLs, c.EventsSecret, pool = []string{rcv.URL()}, secret, c.Pool
	})
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var registered int
	go func() {
		done <- w.Run(ctx, func(addr string) {
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM event_sinks WHERE sink = $1 AND seen_at IS NOT NULL`, rcv.URL()).Scan(&registered); err != nil {
				t.Error(err)
			}
			ready <- addr
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	base := "http://" + <-ready
	if registered != 1 {
		t.Fatalf("the sink was not registered when the worker said it was ready")
	}
	ev := `{"settlement_id":"first","account_id":"acc","amount_cents":1234,"currency":"EUR","beneficiary":"DE89370400440532013000"}`
	if code, body := settletest.Do(t, http.MethodPost, base+"/v1/settlements", "Bearer tok", ev); code != http.StatusCreated {
		t.Fatalf("POST = %d %s", code, body)
	}
	if !rcv.Wait(time.Minute, func(m []eventstest.Message) bool { return len(m) > 0 && m[len(m)-1].Type == "settlement.confirmed" }) {
		t.Fatalf("received %+v", rcv.Accepted())
	}
	if p := rcv.Problems(); len(p) > 0 || rcv.Accepted()[0].ID != "first:1" {
		t.Fatalf("problems %q, accepted %+v", p, rcv.Accepted())
	}
}
