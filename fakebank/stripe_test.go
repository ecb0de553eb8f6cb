package fakebank_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
)

// stripePost posts a payout form under key and decodes the answer.
func stripePost(t *testing.T, base, key string, form url.Values) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/payouts", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", key)
	return stripeDo(t, req)
}

func stripeDo(t *testing.T, req *http.Request) (int, http.Header, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp.StatusCode, resp.Header, body
}

func payoutForm(ref string, amount string) url.Values {
	return url.Values{"amount": {amount}, "currency": {"eur"}, "destination": {"ba_1X"}, "metadata[reference]": {ref}, "description": {"d"}}
}

// TestStripeProfileIdempotencyAsStripeDocumentsIt: the same key and
// parameters replay the original response, marked; other parameters are
// an idempotency_error; a parameter Stripe does not know is refused before
// anything is kept under the key.
func TestStripeProfileIdempotencyAsStripeDocumentsIt(t *testing.T) {
	t.Parallel()
	bank, base := fakebanktest.NewServer(t, fakebank.Options{Profile: "stripe", Faults: fakebank.Faults{SettleDelayMS: 50}})
	code, h, first := stripePost(t, base, "k-1", payoutForm("ref-1", "500"))
	if code != http.StatusOK || first["status"] != "pending" || h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("create: %d %v %v", code, h, first)
	}
	time.Sleep(80 * time.Millisecond) // paid by now
	code, h, again := stripePost(t, base, "k-1", payoutForm("ref-1", "500"))
	if code != http.StatusOK || h.Get("Idempotent-Replayed") != "true" || again["id"] != first["id"] || again["status"] != "pending" {
		t.Errorf("replay: %d %v %v; want the original response (pending), marked", code, h, again)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/payouts/"+first["id"].(string), nil)
	if _, _, now := stripeDo(t, req); now["status"] != "paid" {
		t.Errorf("GET by id: %v, want paid", now["status"])
	}
	code, _, other := stripePost(t, base, "k-1", payoutForm("ref-1", "501"))
	if e, _ := other["error"].(map[string]any); code != http.StatusBadRequest || e["type"] != "idempotency_error" {
		t.Errorf("other parameters: %d %v", code, other)
	}
	bad := payoutForm("ref-2", "500")
	bad.Set("colour", "blue")
	code, _, refused := stripePost(t, base, "k-2", bad)
	if e, _ := refused["error"].(map[string]any); code != http.StatusBadRequest || e["type"] != "invalid_request_error" || e["param"] != "colour" {
		t.Errorf("unknown parameter: %d %v", code, refused)
	}
	if code, _, _ := stripePost(t, base, "k-2", payoutForm("ref-2", "500")); code != http.StatusOK {
		t.Errorf("the key of a refused request is free: %d", code)
	}
	if st := bank.Stats(); st.Payments != 2 || st.Replays != 1 || st.KeyReuseConflicts != 1 || st.MaxPaymentsPerReference != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestStripeProfileForgetsKeysAndReturns: past key_ttl_ms the same
// request is a new payout (counted by metadata[reference]); a returned
// payout reads paid, then failed.
func TestStripeProfileForgetsKeysAndReturns(t *testing.T) {
	t.Parallel()
	bank, base := fakebanktest.NewServer(t, fakebank.Options{Profile: "stripe", Faults: fakebank.Faults{KeyTTLMS: 20}})
	_, _, first := stripePost(t, base, "k-ttl", payoutForm("ref-ttl", "700"))
	if first["status"] != "paid" {
		t.Fatalf("create: %v", first)
	}
	time.Sleep(40 * time.Millisecond)
	_, h, second := stripePost(t, base, "k-ttl", payoutForm("ref-ttl", "700"))
	if second["id"] == first["id"] || h.Get("Idempotent-Replayed") != "" {
		t.Errorf("after the key TTL: %v %v, want a new payout", h, second)
	}
	if st := bank.Stats(); st.MaxExecutionsPerKey != 2 || st.MaxPaymentsPerReference != 2 {
		t.Errorf("stats %+v: the reference paid twice is what key_ttl_ms simulates", st)
	}
	id := first["id"].(string)
	if err := bank.Return(id, ""); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/payouts/"+id, nil)
	if _, _, po := stripeDo(t, req); po["status"] != "failed" || po["failure_code"] == nil {
		t.Errorf("a returned payout: %v, want failed with a failure_code", po)
	}
}
