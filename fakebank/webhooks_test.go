package fakebank_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
)

// hookReceiver is a real HTTP receiver of the bank's pushes: it verifies
// each with the connector's own verification (what settle's worker runs),
// refuses the first attempt of every push with 503 when flaky, and records
// what each verified push named.
type hookReceiver struct {
	verify func(h http.Header, body []byte, secret string, now time.Time) (bankclient.Hint, error)
	secret string
	flaky  bool

	mu       sync.Mutex
	seen     map[string]int // body → attempts, for the flaky first refusal
	hints    []bankclient.Hint
	bodies   []string
	bad      []error
	changed  chan struct{}
	accepted int
}

func newHookReceiver(t *testing.T, verify func(http.Header, []byte, string, time.Time) (bankclient.Hint, error), flaky bool) (*hookReceiver, string) {
	r := &hookReceiver{verify: verify, secret: "whsec_test_" + t.Name(), flaky: flaky, seen: map[string]int{}, changed: make(chan struct{}, 1)}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL + "/hooks"
}

func (r *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}()
	hint, err := r.verify(req.Header, body, r.secret, time.Now())
	if err != nil {
		r.bad = append(r.bad, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.seen[string(body)]++
	if r.flaky && r.seen[string(body)] == 1 {
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	r.accepted++
	r.hints = append(r.hints, hint)
	r.bodies = append(r.bodies, string(body))
	w.WriteHeader(http.StatusNoContent)
}

// waitFor waits until cond holds over the receiver's records (checked
// after every push it takes), or fails after a bound meant for a loaded
// machine, not a deadline of the behaviour.
func (r *hookReceiver) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("waiting for %s: %d pushes taken, bodies %q, refused %v", what, r.accepted, r.bodies, r.bad)
		}
	}
}

// TestWebhooksSettleProfile: each status change of a payment (accepted,
// processing, settled, then its return) is pushed, signed so that the
// settle connector's verification accepts it, retried after a 503, and —
// with the duplicate and delay faults — sent twice and late; every push
// names the payment by id, key and reference.
func TestWebhooksSettleProfile(t *testing.T) {
	t.Parallel()
	recv, hookURL := newHookReceiver(t, settle.Connector.VerifyWebhook, true)
	bank, base := fakebanktest.NewServer(t, fakebank.Options{
		Faults: fakebank.Faults{SettleDelayMS: 200, ReturnRate: 1, ReturnAfterMS: 200,
			WebhookDuplicateRate: 1, WebhookDelayMaxMS: 50},
		WebhookURL: hookURL, WebhookSecret: recv.secret,
	})
	tb := &testBundle{bank: bank, url: base, http: http.DefaultClient}
	refs := []string{"st-w1", "st-w2", "st-w3"}
	ids := map[string]string{}
	for _, ref := range refs {
		a := tb.post(t, "key-"+ref, paymentReq(ref))
		if a.status != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", ref, a.status, a.body)
		}
		ids[ref] = a.payment(t).ID
	}
	want := []string{"payment.accepted", "payment.processing", "payment.settled", "payment.returned"}
	// Each status of each payment, twice (the duplicate fault).
	recv.waitFor(t, "every status of every payment twice", func() bool {
		for _, ref := range refs {
			for _, typ := range want {
				if n := countBodies(recv.bodies, `"type":"`+typ+`"`, `"reference":"`+ref+`"`); n < 2 {
					return false
				}
			}
		}
		return true
	})
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.bad) != 0 {
		t.Errorf("pushes that did not verify: %v", recv.bad)
	}
	for _, h := range recv.hints {
		if ids[h.Reference] == "" || h.PaymentID != ids[h.Reference] || h.Key != "key-"+h.Reference {
			t.Errorf("push names %+v, want one of the payments %v with its key", h, ids)
		}
	}
	st := bank.WebhookStats()
	if st.Events != int64(len(refs)*len(want)) || st.Duplicated != st.Events || st.Lost != 0 {
		t.Errorf("stats %+v: want %d events, each duplicated, none lost", st, len(refs)*len(want))
	}
	if st.Attempts <= st.Delivered {
		t.Errorf("stats %+v: the receiver refused every first attempt, so attempts must exceed deliveries", st)
	}
}

// countBodies counts the bodies holding every one of parts.
func countBodies(bodies []string, parts ...string) int {
	n := 0
	for _, b := range bodies {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(b, p)
		}
		if all {
			n++
		}
	}
	return n
}

// TestWebhooksStripeProfile: the stripe profile pushes payout.created,
// payout.paid and, for a paid payout that came back, payout.failed, as
// Stripe events whose signature the Stripe connector verifies and whose
// payout carries our reference in its metadata.
func TestWebhooksStripeProfile(t *testing.T) {
	t.Parallel()
	recv, hookURL := newHookReceiver(t, stripe.VerifyWebhook, false)
	bank, base := fakebanktest.NewServer(t, fakebank.Options{
		Profile:    "stripe",
		Faults:     fakebank.Faults{SettleDelayMS: 200},
		WebhookURL: hookURL, WebhookSecret: recv.secret,
	})
	code, _, po := stripePost(t, base, "k-stripe-1", payoutForm("st-s1", "1500"))
	if code != http.StatusOK {
		t.Fatalf("POST /v1/payouts: %d %v", code, po)
	}
	id, _ := po["id"].(string)
	recv.waitFor(t, "payout.paid", func() bool { return countBodies(recv.bodies, `"type":"payout.paid"`) == 1 })
	if err := bank.Return(id, ""); err != nil {
		t.Fatal(err)
	}
	recv.waitFor(t, "payout.failed after the return", func() bool { return countBodies(recv.bodies, `"type":"payout.failed"`) == 1 })
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, typ := range []string{"payout.created", "payout.updated", "payout.paid", "payout.failed"} {
		if n := countBodies(recv.bodies, `"type":"`+typ+`"`); n != 1 {
			t.Errorf("%d %s events, want 1: %q", n, typ, recv.bodies)
		}
	}
	for _, h := range recv.hints {
		if h.PaymentID != id || h.Reference != "st-s1" {
			t.Errorf("push names %+v, want payout %s with reference st-s1", h, id)
		}
	}
	if countBodies(recv.bodies, `"failure_code":"account_closed"`) != 1 {
		t.Errorf("the return's payout.failed carries no failure_code account_closed: %q", recv.bodies)
	}
}

// TestWebhooksLost: with webhook_loss_rate 1 nothing is pushed, and the
// bank counts what it did not tell.
func TestWebhooksLost(t *testing.T) {
	t.Parallel()
	recv, hookURL := newHookReceiver(t, settle.Connector.VerifyWebhook, false)
	bank, base := fakebanktest.NewServer(t, fakebank.Options{
		Faults:     fakebank.Faults{WebhookLossRate: 1},
		WebhookURL: hookURL, WebhookSecret: recv.secret,
	})
	tb := &testBundle{bank: bank, url: base, http: http.DefaultClient}
	if a := tb.post(t, "key-lost", paymentReq("st-lost")); a.status != http.StatusCreated {
		t.Fatalf("POST: %d %s", a.status, a.body)
	}
	// settle_delay_ms 0: accepted and settled at once, told as one change.
	for bank.WebhookStats().Lost < 1 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := bank.Close(); err != nil { // waits for every push in flight
		t.Fatal(err)
	}
	st := bank.WebhookStats()
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if st.Attempts != 0 || recv.accepted != 0 || st.Lost != st.Events {
		t.Errorf("stats %+v, %d pushes taken: want every event lost, none sent", st, recv.accepted)
	}
}

// TestSetWebhookRefuses: no secret, a URL that is not absolute http(s),
// and the obie profile (which pushes nothing) are refused.
func TestSetWebhookRefuses(t *testing.T) {
	t.Parallel()
	bank, err := fakebank.New(fakebank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bank.Close() })
	if err := bank.SetWebhook("http://127.0.0.1:1/h", ""); !errors.Is(err, fakebank.ErrNoWebhookSecret) {
		t.Errorf("no secret: %v", err)
	}
	for _, u := range []string{"127.0.0.1:1/h", "ftp://x/h", "/relative"} {
		if err := bank.SetWebhook(u, "s"); err == nil {
			t.Errorf("SetWebhook(%q) accepted", u)
		}
	}
	obie, err := fakebank.New(fakebank.Options{Profile: "obie"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = obie.Close() })
	if err := obie.SetWebhook("http://127.0.0.1:1/h", "s"); !errors.Is(err, fakebank.ErrObieNoWebhooks) {
		t.Errorf("obie: %v", err)
	}
}

// TestWebhooksTellEveryStatusWhenLate: a notifier that runs late (here the
// bank's clock jumps past a payment's due time and its return at once, as
// a loaded machine's timers do in effect) still pushes every status the
// payment passed through, each once and in order of its change, not only
// the one it finds.
func TestWebhooksTellEveryStatusWhenLate(t *testing.T) {
	t.Parallel()
	recv, hookURL := newHookReceiver(t, settle.Connector.VerifyWebhook, false)
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}
	bank, base := fakebanktest.NewServer(t, fakebank.Options{
		Now:        now,
		Faults:     fakebank.Faults{SettleDelayMS: 200, ReturnRate: 1, ReturnAfterMS: 200},
		WebhookURL: hookURL, WebhookSecret: recv.secret,
	})
	tb := &testBundle{bank: bank, url: base, http: http.DefaultClient}
	if a := tb.post(t, "key-late", paymentReq("late")); a.status != http.StatusCreated {
		t.Fatalf("POST: %d %s", a.status, a.body)
	}
	recv.waitFor(t, "the payment's creation", func() bool { return len(recv.bodies) == 1 })
	mu.Lock()
	clock = clock.Add(time.Second) // past processing, its outcome and its return
	mu.Unlock()
	want := []string{"payment.accepted", "payment.processing", "payment.settled", "payment.returned"}
	recv.waitFor(t, "every status", func() bool { return len(recv.bodies) >= len(want) })
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, typ := range want {
		if n := countBodies(recv.bodies, `"type":"`+typ+`"`); n != 1 {
			t.Errorf("%s pushed %d times, want once; bodies %q", typ, n, recv.bodies)
		}
	}
}
