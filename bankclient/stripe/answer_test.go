package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/stripe"
)

// TestAnswersClassifiedByType: each answer Stripe can give to a payout
// request lands in its class by Stripe's error type and the HTTP status,
// whatever its message says.
func TestAnswersClassifiedByType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		body   string
		check  func(error) bool
	}{
		{"invalid request is a rejection", 400, nil, `{"error":{"type":"invalid_request_error","code":"balance_insufficient","message":"retry later, maybe"}}`, bankclient.IsRejected},
		{"card error is a rejection", 402, nil, `{"error":{"type":"card_error","code":"card_declined","message":"x"}}`, bankclient.IsRejected},
		{"idempotency error is key reuse", 400, nil, `{"error":{"type":"idempotency_error","message":"rejected"}}`, bankclient.IsKeyReuse},
		{"api error is ambiguous", 500, nil, `{"error":{"type":"api_error","message":"rejected"}}`, bankclient.IsAmbiguous},
		{"409 in flight is ambiguous", 409, nil, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"x"}}`, bankclient.IsAmbiguous},
		{"401 is ambiguous and unauthorized", 401, nil, `{"error":{"type":"invalid_request_error","message":"Invalid API Key"}}`, func(err error) bool {
			return bankclient.IsAmbiguous(err) && bankclient.IsUnauthorized(err)
		}},
		{"429 carries Retry-After", 429, map[string]string{"Retry-After": "7"}, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"x"}}`, func(err error) bool {
			var ae *bankclient.AmbiguousError
			return errors.As(err, &ae) && ae.StatusCode == 429 && ae.RetryAfter == 7*time.Second
		}},
		{"a gateway's HTML is ambiguous", 502, nil, `<html>bad gateway</html>`, bankclient.IsAmbiguous},
		{"a 200 that is no payout is ambiguous", 200, nil, `{"object":"payout"}`, func(err error) bool {
			return bankclient.IsAmbiguous(err) && errors.Is(err, bankclient.ErrMalformedResponse)
		}},
		{"an unknown status is ambiguous", 200, nil, `{"id":"po_1","object":"payout","amount":5,"currency":"eur","status":"exploded"}`, func(err error) bool {
			return bankclient.IsAmbiguous(err) && errors.Is(err, bankclient.ErrMalformedResponse)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var requests int
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests++
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			c, err := stripe.New(srv.URL, bankclient.Options{Token: "sk_test_x", Retry: bankclient.RetryPolicy{MaxAttempts: 1, RateLimitWait: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Send(context.Background(), bankclient.KeyFor(tc.name), target.Request("r-1"))
			if !tc.check(err) {
				t.Errorf("answer %d %s: %v (%T)", tc.status, tc.body, err, errors.Unwrap(err))
			}
			if requests != 1 {
				t.Errorf("%d requests, want 1: stripe-go must not retry on its own", requests)
			}
		})
	}
}

// TestRetriesAreOursUnderTheSameKey: an ambiguous answer is retried by
// the connector's policy, the identical request under the same key. (The
// policy's MaxElapsed is generous: a loaded machine can take over a second
// for the first attempt alone, and then the call would rightly stop.)
func TestRetriesAreOursUnderTheSameKey(t *testing.T) {
	t.Parallel()
	var keys []string
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		bodies = append(bodies, r.PostForm.Encode())
		w.Header().Set("Content-Type", "application/json")
		if len(keys) < 3 {
			w.WriteHeader(500)
			_, _ = w.Write([]byte(`{"error":{"type":"api_error","message":"x"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"po_1","object":"payout","amount":1234,"currency":"eur","status":"pending","created":1,"metadata":{"reference":"r-1"}}`))
	}))
	t.Cleanup(srv.Close)
	c, err := stripe.New(srv.URL, bankclient.Options{Token: "sk_test_x", Retry: bankclient.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxElapsed: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	key := bankclient.KeyFor("retry")
	res, err := c.Send(context.Background(), key, target.Request("r-1"))
	if err != nil || res.Payment.ID != "po_1" || res.Payment.Reference != "r-1" || res.Payment.Status != bankclient.StatusProcessing {
		t.Fatalf("Send: %+v, %v", res, err)
	}
	if len(keys) != 3 || keys[0] != key || keys[1] != key || keys[2] != key || bodies[0] != bodies[2] {
		t.Errorf("keys %v bodies %v: want three identical requests under %s", keys, bodies, key)
	}
}

// TestCheckEvent: a beneficiary Stripe cannot pay out to is refused with
// a FieldError naming it; so is a currency the connector does not pay.
func TestCheckEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ cur, bene, field string }{
		{"EUR", "ba_1Abc", ""},
		{"USD", "card_1Xyz_2", ""},
		{"EUR", "DE89370400440532013000", "beneficiary"},
		{"EUR", "ba_", "beneficiary"},
		{"EUR", "ba_1 2", "beneficiary"},
		{"XTS", "ba_1Abc", "currency"},
	} {
		err := stripe.Connector.Check(tc.cur, tc.bene)
		var fe *bankclient.FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("Check(%s, %s): %v", tc.cur, tc.bene, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("Check(%s, %s): %v, want a FieldError on %s", tc.cur, tc.bene, err, tc.field)
		}
	}
}

// TestOverTheLimitIsUnsendable: a payout over Stripe's eight digits, or in
// a currency the connector does not pay out, is refused before anything
// is sent, definitively (an Unsendable rejection); exactly the limit goes.
func TestOverTheLimitIsUnsendable(t *testing.T) {
	t.Parallel()
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"po_1","object":"payout","amount":99999999,"currency":"usd","status":"pending","created":1,"metadata":{"reference":"r-1"}}`))
	}))
	t.Cleanup(srv.Close)
	c, err := stripe.New(srv.URL, bankclient.Options{Token: "sk_test_x", Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	req := target.Request("r-1")
	req.Currency = "USD"
	for _, bad := range []bankclient.PaymentRequest{
		func() bankclient.PaymentRequest { r := req; r.AmountCents = stripe.MaxAmount + 1; return r }(),
		func() bankclient.PaymentRequest { r := req; r.AmountCents = 1<<63 - 1; return r }(),
		func() bankclient.PaymentRequest { r := req; r.Currency = "BGN"; return r }(),
	} {
		_, err := c.Send(context.Background(), bankclient.KeyFor("over"), bad)
		var re *bankclient.RejectedError
		if !errors.As(err, &re) || re.Code != bankclient.CodeUnsendable || re.StatusCode != 0 {
			t.Errorf("%d %s: %v, want an unsendable rejection", bad.AmountCents, bad.Currency, err)
		}
	}
	if requests != 0 {
		t.Fatalf("%d requests reached Stripe", requests)
	}
	req.AmountCents = stripe.MaxAmount
	if _, err := c.Send(context.Background(), bankclient.KeyFor("at"), req); err != nil || requests != 1 {
		t.Fatalf("exactly the limit: %v (%d requests)", err, requests)
	}
}
