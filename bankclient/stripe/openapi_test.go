package stripe_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/connectortest"
	"github.com/settle/settle/bankclient/stripe"
	"github.com/settle/settle/bankclient/stripe/stripetest"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// TestConformanceAgainstStripesSpec runs the conformance suite with every
// request the connector sends and every response the stripe profile gives
// validated against Stripe's OpenAPI document.
func TestConformanceAgainstStripesSpec(t *testing.T) {
	t.Parallel()
	v := stripetest.NewValidator(t)
	tg := target
	tg.Options.HTTPClient = &http.Client{Transport: v}
	connectortest.Run(t, tg)
}

// TestListPagesAgainstStripesSpec pages through the payout list, and asks
// for a payout Stripe does not hold, through the validator.
func TestListPagesAgainstStripesSpec(t *testing.T) {
	t.Parallel()
	v := stripetest.NewValidator(t)
	bank, u := fakebanktest.NewServer(t, fakebank.Options{Seed: 1, Faults: fakebank.Faults{SettleDelayMS: 1}, Profile: "stripe"})
	c, err := stripe.New(u, bankclient.Options{Token: "sk_test_x", Account: "acct_1Test", HTTPClient: &http.Client{Transport: v}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 5 {
		ref := fmt.Sprintf("list-%d", i)
		if _, err := c.Send(ctx, bankclient.KeyFor(ref), target.Request(ref)); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	for p, err := range bankclient.Payments(ctx, c, 2) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, p.Reference)
	}
	if got := strings.Join(seen, ","); got != "list-4,list-3,list-2,list-1,list-0" {
		t.Errorf("the list, two a page: %s; want every payout once, newest first", got)
	}
	if _, err := c.StatusByID(ctx, "pay_000000000099"); err == nil {
		t.Error("an unknown payout was found")
	}
	if st := bank.Stats(); st.Payments != 5 {
		t.Errorf("bank %+v", st)
	}
}

// TestSearchSinceAgainstStripesSpec: the engine's search after a lost
// answer reads the payout list from a point in time (created[gte]), so it
// reads the payouts of the last hours, not the account's history; the
// query is Stripe's.
func TestSearchSinceAgainstStripesSpec(t *testing.T) {
	t.Parallel()
	v := stripetest.NewValidator(t)
	clock := settletest.NewManualClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	_, u := fakebanktest.NewServer(t, fakebank.Options{Seed: 1, Profile: "stripe", Now: clock.Now})
	c, err := stripe.New(u, bankclient.Options{Token: "sk_test_x", HTTPClient: &http.Client{Transport: v}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	send := func(ref string) {
		if _, err := c.Send(ctx, bankclient.KeyFor(ref), target.Request(ref)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		send(fmt.Sprintf("old-%d", i))
	}
	clock.Advance(3 * time.Hour)
	since := clock.Now()
	send("new-0")
	send("new-1")
	var seen []string
	for p, err := range bankclient.PaymentsSince(ctx, c, since, 1) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, p.Reference)
	}
	if got := strings.Join(seen, ","); got != "new-1,new-0" {
		t.Errorf("payouts since %s: %s; want the two created since, newest first", since, got)
	}
	n := 0
	for _, err := range bankclient.PaymentsSince(ctx, c, time.Time{}, 2) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 5 {
		t.Errorf("since the beginning: %d payouts, want 5", n)
	}
}

// TestValidatorRefusesWhatStripeWould: a request outside the document
// (a string amount, an unknown parameter's shape) is caught, so a
// connector that sent one would fail the tests above.
func TestValidatorRefusesWhatStripeWould(t *testing.T) {
	t.Parallel()
	doc := stripetest.Spec(t)
	for _, body := range []string{
		"amount=ten&currency=eur",
		"currency=eur", // amount is required
	} {
		r, _ := http.NewRequest(http.MethodPost, "https://api.stripe.com/v1/payouts", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rt, params, err := stripetest.Route(doc, r)
		if err != nil {
			t.Fatal(err)
		}
		err = openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
			Request: r, PathParams: params, Route: rt,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		})
		if err == nil {
			t.Errorf("POST /v1/payouts %q passes validation", body)
		}
	}
	// A response in settle's own error shape, not Stripe's.
	r, _ := http.NewRequest(http.MethodGet, "https://api.stripe.com/v1/payouts?limit=10", nil)
	rt, params, err := stripetest.Route(doc, r)
	if err != nil {
		t.Fatal(err)
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: rt,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		t.Fatalf("a plain list request: %v", err)
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: http.StatusTooManyRequests,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   io.NopCloser(strings.NewReader(`{"error":"rate_limited","reason":"slow down"}`)),
	})
	if err == nil {
		t.Error("an error body in settle's shape passes as Stripe's")
	}
}
