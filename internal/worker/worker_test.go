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

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/dbtest"
	"github.com/settle/settle/internal/settletest"
	"github.com/settle/settle/internal/submit"
	"github.com/settle/settle/internal/worker"
	"github.com/settle/settle/settlement"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// newWorker assembles a worker on a fresh database and an in-process bank,
// listening on a free port; it is closed when the test ends.
func newWorker(t *testing.T, token string) *worker.Worker {
	t.Helper()
	db := dbtest.New(t)
	_, bankURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 1})
	c := worker.DefaultConfig()
	c.Pool, c.BankURL, c.APIToken, c.Listen = db.Pool, bankURL, token, "127.0.0.1:0"
	c.ShutdownTimeout = 5 * time.Second
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
