package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/stripe"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/settlecmd/worker"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// TestStripeIntakeAndWebhooks: a worker paying through Stripe refuses at
// intake a beneficiary Stripe cannot pay out to (422 naming it), and takes
// Stripe's payout.* webhooks as hints: a Stripe-Signature made with the
// endpoint's secret enqueues one check of the settlement the payout's
// metadata names; a forged one, or an event about something else, nothing.
func TestStripeIntakeAndWebhooks(t *testing.T) {
	t.Parallel()
	const secret = "whsec_stripe_test"
	var pool *pgxpool.Pool
	_, bankURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 1, Profile: "stripe"})
	w := newWorker(t, "tok", func(c *worker.Config) {
		c.WebhookSecret, c.BankName, c.BankURL, pool = secret, stripe.Name, bankURL, c.Pool
		c.Connectors = bankclient.Connectors{stripe.Connector}
	})
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)

	bad := `{"settlement_id":"iban-1","account_id":"acc","amount_cents":700,"currency":"EUR","beneficiary":"DE89370400440532013000"}`
	if code, body := settletest.Do(t, http.MethodPost, srv.URL+"/v1/settlements", "Bearer tok", bad); code != http.StatusUnprocessableEntity || !strings.Contains(body, "beneficiary") {
		t.Errorf("an IBAN as a Stripe destination: %d %s, want 422 naming beneficiary", code, body)
	}
	ev := `{"settlement_id":"hinted-s","account_id":"acc","amount_cents":700,"currency":"EUR","beneficiary":"ba_1Hook"}`
	if code, body := settletest.Do(t, http.MethodPost, srv.URL+"/v1/settlements", "Bearer tok", ev); code != http.StatusCreated {
		t.Fatalf("POST = %d %s", code, body)
	}
	jobs := func() int {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'reconcile_settlement' AND args->>'settlement_id' = 'hinted-s'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	post := func(body []byte, h http.Header) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/bank/webhooks/stripe", strings.NewReader(string(body)))
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	sign := func(body []byte, key string) http.Header {
		return http.Header{stripe.SignatureHeader: {bankhttp.SignHMAC(body, key, time.Now())}}
	}
	paid, _ := stripe.WebhookBody("evt_1", "payout.paid", map[string]any{
		"id": "pay_000000000001", "object": "payout", "status": "paid", "metadata": map[string]string{"reference": "hinted-s"},
	})
	charge, _ := stripe.WebhookBody("evt_2", "charge.succeeded", map[string]any{"id": "ch_1", "object": "charge"})
	if code := post(paid, sign(paid, "whsec_other")); code != http.StatusBadRequest {
		t.Errorf("forged: %d, want 400", code)
	}
	if code := post(charge, sign(charge, secret)); code != http.StatusBadRequest {
		t.Errorf("not about a payout: %d, want 400", code)
	}
	// An hour-old signature given a fresh t= in front (issue 32): one
	// parser reads both, and two t= are no header.
	replayed := "t=" + strconv.FormatInt(time.Now().Unix(), 10) + "," + bankhttp.SignHMAC(paid, secret, time.Now().Add(-time.Hour))
	if code := post(paid, http.Header{stripe.SignatureHeader: {replayed}}); code != http.StatusBadRequest {
		t.Errorf("a replay with a fresh t= in front: %d, want 400", code)
	}
	if n := jobs(); n != 0 {
		t.Fatalf("refused hints enqueued %d checks", n)
	}
	if code := post(paid, sign(paid, secret)); code != http.StatusAccepted {
		t.Fatalf("a good payout.paid: %d, want 202", code)
	}
	if n := jobs(); n != 1 {
		t.Errorf("%d checks enqueued, want one", n)
	}
}
