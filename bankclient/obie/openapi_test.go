package obie_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/fakebank/obietest"
)

// TestEveryRequestAgainstTheSpec sends every request the connector makes
// (consent, its replay, consent status, payment, its replay, payment
// status, unknown ids) through a validator that checks each, headers and
// body, against the Open Banking OpenAPI document, and each answer of the
// test bank too.
func TestEveryRequestAgainstTheSpec(t *testing.T) {
	t.Parallel()
	b, u := newTestBank(t)
	v := obietest.NewValidator(t, nil)
	c := newClient(t, u, bankclient.Options{HTTPClient: &http.Client{Transport: v}, Retry: oneAttempt})
	ctx := context.Background()
	for _, tc := range []struct{ ref, beneficiary string }{
		{"spec-1", "SortCodeAccountNumber:08080021325698:ACME Ltd"},
		{"spec-2", "IBAN:GB29NWBK60161331926819:Zoë Ørsted: Ltd"},
	} {
		req := request(tc.ref)
		req.CreditorAccount = tc.beneficiary
		con, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor(tc.ref), req)
		if err != nil || con.Status != bankclient.ConsentAuthorised {
			t.Fatalf("CreateConsent: %+v, %v", con, err)
		}
		if again, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor(tc.ref), req); err != nil || again.ID != con.ID {
			t.Fatalf("the consent's replay: %+v, %v; want consent %s", again, err, con.ID)
		}
		if got, err := c.ConsentByID(ctx, con.ID); err != nil || got.ID != con.ID {
			t.Fatalf("ConsentByID: %+v, %v", got, err)
		}
		req.ConsentID = con.ID
		res, err := c.Send(ctx, bankclient.KeyFor(tc.ref), req)
		if err != nil || res.Payment.Reference != tc.ref || res.Payment.AmountCents != 1234 || res.Payment.Currency != "GBP" {
			t.Fatalf("Send: %+v, %v", res, err)
		}
		if again, err := c.Send(ctx, bankclient.KeyFor(tc.ref), req); err != nil || again.Payment.ID != res.Payment.ID {
			t.Fatalf("the payment's replay: %+v, %v; want payment %s", again, err, res.Payment.ID)
		}
		if p, err := c.StatusByID(ctx, res.Payment.ID); err != nil || p.ID != res.Payment.ID || p.Status != bankclient.StatusProcessing {
			t.Fatalf("StatusByID: %+v, %v", p, err)
		}
	}
	if _, err := c.StatusByID(ctx, "pay-9999"); !errors.Is(err, bankclient.ErrPaymentNotFound) {
		t.Errorf("an unknown payment: %v, want ErrPaymentNotFound", err)
	}
	if _, err := c.ConsentByID(ctx, "cons-9999"); !errors.Is(err, bankclient.ErrPaymentNotFound) {
		t.Errorf("an unknown consent: %v, want ErrPaymentNotFound", err)
	}
	// Every operation of the connector was sent, and went through the
	// validator.
	seen := map[string]int{}
	for _, r := range b.Requests() {
		path := strings.TrimPrefix(r.Path, obie.APIPath)
		if i := strings.LastIndex(path, "/"); i > 0 {
			path = path[:i] + "/{id}"
		}
		seen[r.Method+" "+path]++
	}
	for _, op := range []string{"POST /domestic-payment-consents", "GET /domestic-payment-consents/{id}", "POST /domestic-payments", "GET /domestic-payments/{id}"} {
		if seen[op] == 0 {
			t.Errorf("no %s was sent (saw %v)", op, seen)
		}
	}
	if n := len(b.Requests()); v.Checked() != n {
		t.Errorf("the validator checked %d requests of %d", v.Checked(), n)
	}
}

// TestValidatorRefusesWhatTheSpecDoes: requests outside the document (no
// signature, an idempotency key over 40 characters or with a trailing
// space, an amount as a number, no CreditorAccount name) are caught, so a
// connector sending one would fail the test above.
func TestValidatorRefusesWhatTheSpecDoes(t *testing.T) {
	t.Parallel()
	doc := obietest.Spec(t)
	good := `{"Data":{"Initiation":{"InstructionIdentification":"a","EndToEndIdentification":"a","InstructedAmount":{"Amount":"1.00","Currency":"GBP"},"CreditorAccount":{"SchemeName":"UK.OBIE.SortCodeAccountNumber","Identification":"08080021325698","Name":"A"}}},"Risk":{}}`
	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
		ok     bool
	}{
		{"a good request", nil, good, true},
		{"no signature", map[string]string{"x-jws-signature": ""}, good, false},
		{"no idempotency key", map[string]string{"x-idempotency-key": ""}, good, false},
		{"no token", map[string]string{"Authorization": ""}, good, false},
		{"a key of 41 characters", map[string]string{"x-idempotency-key": strings.Repeat("k", 41)}, good, false},
		{"a key ending in a space", map[string]string{"x-idempotency-key": "key "}, good, false},
		{"an amount as a number", nil, strings.Replace(good, `"1.00"`, `1.00`, 1), false},
		{"an amount with a comma", nil, strings.Replace(good, `"1.00"`, `"1,00"`, 1), false},
		{"no creditor name", nil, strings.Replace(good, `,"Name":"A"`, ``, 1), false},
		{"an E2E id of 36", nil, strings.Replace(good, `"EndToEndIdentification":"a"`, `"EndToEndIdentification":"`+strings.Repeat("e", 36)+`"`, 1), false},
		{"no Risk", nil, strings.Replace(good, `,"Risk":{}`, ``, 1), false},
	} {
		r := httptest.NewRequest(http.MethodPost, "https://bank.test/open-banking/v3.1/pisp/domestic-payment-consents", bytes.NewBufferString(tc.body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer x")
		r.Header.Set("x-idempotency-key", "0b0e9a43-5b3e-5d7a-9f1e-0a0a0a0a0a0a")
		r.Header.Set("x-jws-signature", "e30..c2ln")
		for k, v := range tc.header {
			if v == "" {
				r.Header.Del(k)
			} else {
				r.Header.Set(k, v)
			}
		}
		_, err := obietest.ValidateRequest(doc, r, []byte(tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("%s: validation says %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
