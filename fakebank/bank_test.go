package fakebank_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/settletest"
)

func TestReplayVersusKeyReuse(t *testing.T) {
	t.Parallel()
	tb := setup(t, fakebank.Options{})
	req := paymentReq("settlement-1")

	first := tb.post(t, "k1", req)
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("first: want 201 not replayed, got %d replayed=%v", first.status, first.replayed)
	}
	again := tb.post(t, "k1", req)
	if again.status != http.StatusOK || !again.replayed {
		t.Fatalf("replay: want 200 replayed, got %d replayed=%v", again.status, again.replayed)
	}
	if a, b := first.payment(t), again.payment(t); a.ID != b.ID {
		t.Fatalf("replay returned payment %s, want %s", b.ID, a.ID)
	}

	other := req
	other.CreditorAccount = "someone-else"
	reuse := tb.post(t, "k1", other)
	if reuse.status != http.StatusUnprocessableEntity || reuse.errorCode(t) != settle.ErrorCodeKeyReuse {
		t.Fatalf("key reuse: want 422 %s, got %d %s", settle.ErrorCodeKeyReuse, reuse.status, reuse.body)
	}

	want := fakebank.Stats{Payments: 1, Replays: 1, KeyReuseConflicts: 1, MaxExecutionsPerKey: 1, MaxPaymentsPerReference: 1}
	if got := tb.bank.Stats(); got != want {
		t.Fatalf("stats: want %+v, got %+v", want, got)
	}
}

func TestPaymentProgressFollowsTheBankClock(t *testing.T) {
	t.Parallel()
	tb := setup(t, fakebank.Options{Faults: fakebank.Faults{SettleDelayMS: 10_000}})
	p := tb.post(t, "k", paymentReq("r")).payment(t)
	if p.Status != bankclient.StatusAccepted || !p.CreatedAt.Equal(t0) {
		t.Fatalf("at creation: want accepted at %v, got %s at %v", t0, p.Status, p.CreatedAt)
	}
	steps := []struct {
		advance time.Duration
		status  bankclient.Status
		updated time.Time
	}{
		{4999 * time.Millisecond, bankclient.StatusAccepted, t0},
		{time.Millisecond, bankclient.StatusProcessing, t0.Add(5 * time.Second)},
		{4999 * time.Millisecond, bankclient.StatusProcessing, t0.Add(5 * time.Second)},
		{time.Millisecond, bankclient.StatusSettled, t0.Add(10 * time.Second)},
		{time.Hour, bankclient.StatusSettled, t0.Add(10 * time.Second)},
	}
	for _, s := range steps {
		tb.clock.Advance(s.advance)
		got := tb.mustByKey(t, "k")
		if got.Status != s.status || !got.UpdatedAt.Equal(s.updated) {
			t.Fatalf("at %v: want %s updated %v, got %s updated %v",
				tb.clock.Now().Sub(t0), s.status, s.updated, got.Status, got.UpdatedAt)
		}
	}
	// A settle delay changed later does not move a payment already made.
	tb.setFaults(t, fakebank.Faults{SettleDelayMS: 100_000_000})
	if got := tb.mustByKey(t, "k"); got.Status != bankclient.StatusSettled {
		t.Fatalf("after a profile change: want settled, got %s", got.Status)
	}
}

func TestFaultsAtRateOne(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		faults fakebank.Faults
		check  func(t *testing.T, tb *testBundle)
	}{
		{"fail_before_rate answers 503 and records nothing", fakebank.Faults{FailBeforeRate: 1}, func(t *testing.T, tb *testBundle) {
			for i := range 5 {
				a := tb.post(t, fmt.Sprint("k", i), paymentReq(fmt.Sprint("r", i)))
				if a.status != http.StatusServiceUnavailable {
					t.Fatalf("want 503, got %d %s", a.status, a.body)
				}
			}
			if s := tb.bank.Stats(); s.Payments != 0 {
				t.Fatalf("want no payment, got %+v", s)
			}
		}},
		{"drop_response_rate processes the payment and loses the answer both ways", fakebank.Faults{DropResponseRate: 1}, func(t *testing.T, tb *testBundle) {
			dropped, timeouts := 0, 0
			for i := range 20 {
				a := tb.post(t, fmt.Sprint("k", i), paymentReq(fmt.Sprint("r", i)))
				switch {
				case a.dropped:
					dropped++
				case a.status == http.StatusGatewayTimeout:
					timeouts++
				default:
					t.Fatalf("want no answer or 504, got %d %s", a.status, a.body)
				}
			}
			if dropped == 0 || timeouts == 0 {
				t.Fatalf("want both closed connections and 504s among 20, got %d and %d", dropped, timeouts)
			}
			if s := tb.bank.Stats(); s.Payments != 20 {
				t.Fatalf("want 20 payments processed, got %+v", s)
			}
			tb.setFaults(t, fakebank.Faults{})
			if a := tb.post(t, "k0", paymentReq("r0")); a.status != http.StatusOK || !a.replayed {
				t.Fatalf("retry after a dropped answer: want 200 replayed, got %d %s", a.status, a.body)
			}
		}},
		{"status_error_rate answers 503 to status calls only", fakebank.Faults{StatusErrorRate: 1}, func(t *testing.T, tb *testBundle) {
			if a := tb.post(t, "k", paymentReq("r")); a.status != http.StatusCreated {
				t.Fatalf("POST: want 201, got %d %s", a.status, a.body)
			}
			if a := tb.byKey(t, "k"); a.status != http.StatusServiceUnavailable {
				t.Fatalf("by-key: want 503, got %d %s", a.status, a.body)
			}
			if got := tb.statement(t); len(got) != 1 {
				t.Fatalf("statement: want 1 payment, got %d", len(got))
			}
		}},
		{"reject_rate rejects definitively and pins it to the key", fakebank.Faults{RejectRate: 1}, func(t *testing.T, tb *testBundle) {
			a := tb.post(t, "k", paymentReq("r"))
			if a.status != http.StatusUnprocessableEntity || a.errorCode(t) != settle.ErrorCodeRejected {
				t.Fatalf("want 422 rejected, got %d %s", a.status, a.body)
			}
			tb.setFaults(t, fakebank.Faults{})
			a = tb.post(t, "k", paymentReq("r"))
			if a.status != http.StatusUnprocessableEntity || a.errorCode(t) != settle.ErrorCodeRejected || !a.replayed {
				t.Fatalf("retry: want the pinned 422 rejected, got %d %s", a.status, a.body)
			}
			if s := tb.bank.Stats(); s.Payments != 0 {
				t.Fatalf("want no payment, got %+v", s)
			}
		}},
		{"settlement_failure_rate ends every payment failed", fakebank.Faults{SettlementFailureRate: 1, SettleDelayMS: 1000}, func(t *testing.T, tb *testBundle) {
			if a := tb.post(t, "k", paymentReq("r")); a.status != http.StatusCreated || a.payment(t).Status != bankclient.StatusAccepted {
				t.Fatalf("want 201 accepted, got %d %s", a.status, a.body)
			}
			tb.clock.Advance(time.Second)
			if p := tb.mustByKey(t, "k"); p.Status != bankclient.StatusFailed || p.FailureReason == "" {
				t.Fatalf("want failed with a reason, got %s %q", p.Status, p.FailureReason)
			}
		}},
		{"latency holds answers back until the caller gives up", fakebank.Faults{LatencyMinMS: 3_600_000, LatencyMaxMS: 3_600_000}, func(t *testing.T, tb *testBundle) {
			// Cancel once the request is on the wire, so that it is the
			// server's sleeping handler that must notice.
			ctx, cancel := context.WithCancel(context.Background())
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
				WroteRequest: func(httptrace.WroteRequestInfo) { cancel() },
			})
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, tb.url+"/v1/payments/by-key/k", nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				res, err := tb.http.Do(req)
				if err == nil {
					res.Body.Close()
				}
				done <- err
			}()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("want the cancelled call to end, got %v", err)
			}
			// The admin API is never delayed.
			if got := tb.do(t, http.MethodGet, "/admin/stats", "", nil); got.status != http.StatusOK {
				t.Fatalf("admin: want 200, got %d", got.status)
			}
			// The test server's cleanup waits for every handler: it would hang
			// if the sleeping handler ignored the cancellation.
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, fakebank.Options{Seed: 42, Faults: tt.faults})
			tt.check(t, tb)
		})
	}
}

// decisions sends the same sequence of requests to a bank with seed and a
// profile where every fault is a coin toss, and records what came back.
func decisions(t *testing.T, seed int64) []string {
	t.Helper()
	tb := setup(t, fakebank.Options{Seed: seed, Faults: fakebank.Faults{
		FailBeforeRate: 0.3, DropResponseRate: 0.3, StatusErrorRate: 0.5,
		RejectRate: 0.3, SettlementFailureRate: 0.5, LatencyMinMS: 0, LatencyMaxMS: 2,
	}})
	var out []string
	for i := range 40 {
		key := fmt.Sprint("k", i%30) // some keys twice: replays
		a := tb.post(t, key, paymentReq(key))
		out = append(out, fmt.Sprintf("post %s: %d dropped=%v %s", key, a.status, a.dropped, a.body))
		s := tb.byKey(t, key)
		out = append(out, fmt.Sprintf("status %s: %d", key, s.status))
	}
	tb.setFaults(t, fakebank.Faults{})
	for _, p := range tb.statement(t) {
		out = append(out, fmt.Sprintf("statement %s %s %s", p.ID, p.IdempotencyKey, p.Status))
	}
	return out
}

func TestSeedReproducesDecisions(t *testing.T) {
	t.Parallel()
	a, b := decisions(t, 7), decisions(t, 7)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different decisions:\n%v\n%v", a, b)
	}
	if c := decisions(t, 8); slices.Equal(a, c) {
		t.Fatal("seeds 7 and 8 made the same 80 decisions")
	}
}

func TestKeyTTLLetsAForgottenKeyPayTwice(t *testing.T) {
	t.Parallel()
	tb := setup(t, fakebank.Options{Faults: fakebank.Faults{KeyTTLMS: int64(time.Hour / time.Millisecond)}})
	req := paymentReq("settlement-7")
	first := tb.post(t, "k", req).payment(t)

	tb.clock.Advance(time.Hour - time.Millisecond)
	if a := tb.post(t, "k", req); a.status != http.StatusOK {
		t.Fatalf("before the TTL: want a replay, got %d %s", a.status, a.body)
	}
	tb.clock.Advance(time.Millisecond)
	if a := tb.byKey(t, "k"); a.status != http.StatusNotFound {
		t.Fatalf("after the TTL: by-key want 404, got %d %s", a.status, a.body)
	}
	a := tb.post(t, "k", req)
	if a.status != http.StatusCreated {
		t.Fatalf("after the TTL: POST want 201, got %d %s", a.status, a.body)
	}
	second := a.payment(t)
	if second.ID == first.ID {
		t.Fatal("after the TTL: got the old payment back")
	}
	if got := tb.statement(t); len(got) != 2 || got[0].ID != first.ID || got[1].ID != second.ID {
		t.Fatalf("statement: want both payments in order, got %+v", got)
	}
	s := tb.bank.Stats()
	if s.MaxExecutionsPerKey != 2 || s.MaxPaymentsPerReference != 2 || s.Payments != 2 {
		t.Fatalf("stats: want 2 payments, 2 per key, 2 per reference; got %+v", s)
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "books.json")
	clock := settletest.NewManualClock(t0)
	opts := fakebank.Options{StatePath: path, Now: clock.Now, Faults: fakebank.Faults{SettleDelayMS: 60_000}}

	tb := setup(t, opts)
	for i := range 5 {
		if a := tb.post(t, fmt.Sprint("k", i), paymentReq(fmt.Sprint("r", i))); a.status != http.StatusCreated {
			t.Fatalf("want 201, got %d %s", a.status, a.body)
		}
	}
	tb.post(t, "k0", paymentReq("r0"))                     // a replay
	tb.post(t, "k0", paymentReq("other"))                  // a conflict
	tb.post(t, "bad", bankclient.PaymentRequest{})         // a pinned rejection
	before, beforeStmt := tb.bank.Stats(), tb.statement(t) // no Close: the books are on disk already

	clock.Advance(time.Minute)
	again := setup(t, opts)
	if got := again.bank.Stats(); got != before {
		t.Fatalf("stats after restart: want %+v, got %+v", before, got)
	}
	afterStmt := again.statement(t)
	if len(afterStmt) != len(beforeStmt) {
		t.Fatalf("statement after restart: want %d payments, got %d", len(beforeStmt), len(afterStmt))
	}
	for i, p := range afterStmt {
		if p.ID != beforeStmt[i].ID || p.Status != bankclient.StatusSettled || !p.CreatedAt.Equal(beforeStmt[i].CreatedAt) {
			t.Fatalf("payment %d after restart: %+v, before: %+v", i, p, beforeStmt[i])
		}
	}
	if a := again.post(t, "k3", paymentReq("r3")); a.status != http.StatusOK || !a.replayed {
		t.Fatalf("replay after restart: want 200, got %d %s", a.status, a.body)
	}
	if a := again.post(t, "bad", bankclient.PaymentRequest{}); a.status != http.StatusUnprocessableEntity || !a.replayed {
		t.Fatalf("pinned rejection after restart: want 422 replayed, got %d %s", a.status, a.body)
	}
	if a := again.post(t, "k5", paymentReq("r5")); a.status != http.StatusCreated || a.payment(t).ID != "pay_000000000006" {
		t.Fatalf("new payment after restart: want 201 pay_000000000006, got %d %s", a.status, a.body)
	}
}

func TestStateFileProblems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	corrupt := filepath.Join(dir, "corrupt.json")
	if err := os.WriteFile(corrupt, []byte(`{"version":1,"payments":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fakebank.New(fakebank.Options{StatePath: corrupt}); err == nil {
		t.Fatal("a corrupt state file must not load")
	}

	// A temporary file left by a crash in the middle of a write is ignored
	// and removed; the state file itself is intact.
	path := filepath.Join(dir, "books.json")
	tb := setup(t, fakebank.Options{StatePath: path})
	tb.post(t, "k", paymentReq("r"))
	leftover := path + ".tmp-123"
	if err := os.WriteFile(leftover, []byte(`{"vers`), 0o600); err != nil {
		t.Fatal(err)
	}
	again := setup(t, fakebank.Options{StatePath: path})
	if s := again.bank.Stats(); s.Payments != 1 {
		t.Fatalf("want 1 payment, got %+v", s)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover temporary file not removed: %v", err)
	}
}

func TestConcurrentClients(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "books.json")
	tb := setup(t, fakebank.Options{StatePath: path, Seed: 3, Faults: fakebank.Faults{RejectRate: 0.1}})
	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := map[string]string{} // key → payment id
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				key := fmt.Sprintf("k%d", (w*perWorker+i)%50) // every key from several workers
				a := tb.post(t, key, paymentReq("ref-"+key))
				switch a.status {
				case http.StatusCreated, http.StatusOK:
					var p bankclient.Payment
					if err := json.Unmarshal(a.body, &p); err != nil {
						t.Errorf("error decoding %s: %v", a.body, err)
						return
					}
					mu.Lock()
					if id, ok := created[key]; ok && id != p.ID {
						t.Errorf("key %s: payments %s and %s", key, id, p.ID)
					}
					created[key] = p.ID
					mu.Unlock()
				case http.StatusUnprocessableEntity:
				default:
					t.Errorf("unexpected answer %d %s", a.status, a.body)
				}
			}
		})
	}
	wg.Wait()
	s := tb.bank.Stats()
	if s.Payments != int64(len(created)) || s.MaxExecutionsPerKey != 1 || s.MaxPaymentsPerReference != 1 {
		t.Fatalf("stats %+v, want %d payments, one per key and reference", s, len(created))
	}
	again := setup(t, fakebank.Options{StatePath: path})
	if got := again.bank.Stats(); got != s {
		t.Fatalf("stats after reload: want %+v, got %+v", s, got)
	}
}

func TestNewValidatesFaults(t *testing.T) {
	t.Parallel()
	if _, err := fakebank.New(fakebank.Options{Faults: fakebank.Faults{RejectRate: 2}}); err == nil {
		t.Fatal("want an error for reject_rate 2")
	}
	b, err := fakebank.New(fakebank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetFaults(fakebank.Faults{LatencyMinMS: 5, LatencyMaxMS: 1}); err == nil {
		t.Fatal("want an error for latency min > max")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
