package settle

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
)

// FuzzParsePayment checks that no body makes the payment parser panic, and
// that whatever it accepts is a payment the engine can act on.
func FuzzParsePayment(f *testing.F) {
	f.Add([]byte(`{"id":"pay-1","idempotency_key":"k","reference":"stl-1","status":"settled","amount_cents":1250,"currency":"EUR"}`))
	f.Add([]byte(`{"id":"pay-1","status":"paid"}`))
	f.Add([]byte(`{"id":"","status":"accepted"}`))
	f.Add([]byte(`{"id":"p","status":"accepted","amount_cents":-1}`))
	f.Add([]byte(`{"id":"p","status":"accepted","amount_cents":1e400}`))
	f.Add([]byte(`{"id":"p","status":"accepted"} trailing`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := parsePayment(body)
		if err != nil {
			if !errors.Is(err, bankclient.ErrMalformedResponse) {
				t.Fatalf("error %v does not wrap bankclient.ErrMalformedResponse", err)
			}
			return
		}
		if p.ID == "" || !p.Status.Valid() || p.AmountCents < 0 {
			t.Fatalf("accepted an invalid payment: %+v", p)
		}
	})
}

// FuzzParseStatement does the same for statement pages.
func FuzzParseStatement(f *testing.F) {
	f.Add([]byte(`{"payments":[{"id":"p1","status":"settled"}],"next":"1"}`))
	f.Add([]byte(`{"payments":[],"next":""}`))
	f.Add([]byte(`{"payments":null}`))
	f.Add([]byte(`{"payments":[{"id":"p1","status":"lost"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		page, err := parseStatement(body)
		if err != nil {
			if !errors.Is(err, bankclient.ErrMalformedResponse) {
				t.Fatalf("error %v does not wrap bankclient.ErrMalformedResponse", err)
			}
			return
		}
		for _, p := range page.Payments {
			if p.ID == "" || !p.Status.Valid() {
				t.Fatalf("accepted an invalid payment: %+v", p)
			}
		}
	})
}

// FuzzClassifySend checks the classification of any answer to a payment
// request: exactly one class, and the safety rules hold. Above all, nothing
// but a 400 or 422 is ever a rejection, and no 5xx, 429 or 401 is ever
// definitive.
func FuzzClassifySend(f *testing.F) {
	key := bankclient.KeyFor("stl-1")
	f.Add(201, "", []byte(`{"id":"p","idempotency_key":"`+key+`","reference":"stl-1","status":"accepted","amount_cents":1250,"currency":"EUR"}`))
	f.Add(200, "true", []byte(`{"id":"p","status":"settled"}`))
	f.Add(422, "", []byte(`{"error":"rejected","reason":"no"}`))
	f.Add(422, "", []byte(`{"error":"idempotency_key_reuse"}`))
	f.Add(422, "", []byte(`<html>`))
	f.Add(400, "", []byte(``))
	f.Add(401, "", []byte(`{"error":"rejected"}`))
	f.Add(503, "", []byte(`{"error":"rejected"}`))
	f.Add(429, "", []byte(`{"error":"idempotency_key_reuse"}`))
	f.Add(201, "", []byte(`{"id":"p","status":"accepted","idempotency_key":"other"}`))
	f.Add(302, "", []byte(``))
	f.Fuzz(func(t *testing.T, status int, replayed string, body []byte) {
		req := bankclient.PaymentRequest{AmountCents: 1250, Currency: "EUR", Reference: "stl-1"}
		a := answer{status: status, header: http.Header{"Idempotent-Replayed": {replayed}}, body: body}
		res, outcome, err := classifySend(a, key, req)

		classes := 0
		for _, b := range []bool{err == nil, bankclient.IsAmbiguous(err), bankclient.IsRejected(err), bankclient.IsKeyReuse(err)} {
			if b {
				classes++
			}
		}
		if classes != 1 {
			t.Fatalf("status %d: %d classes (err %v)", status, classes, err)
		}
		if bankclient.IsNotFound(err) {
			t.Fatalf("status %d: send classified as not found", status)
		}
		switch {
		case err == nil:
			if status != 200 && status != 201 {
				t.Fatalf("status %d accepted", status)
			}
			p := res.Payment
			if p.ID == "" || !p.Status.Valid() || (p.IdempotencyKey != "" && p.IdempotencyKey != key) {
				t.Fatalf("accepted an invalid payment: %+v", p)
			}
			if outcome != bankclient.OutcomeAccepted && outcome != bankclient.OutcomeReplayed {
				t.Fatalf("outcome %s for an accepted payment", outcome)
			}
		case bankclient.IsRejected(err):
			if status != 400 && status != 422 {
				t.Fatalf("status %d classified as a rejection", status)
			}
			if outcome != bankclient.OutcomeRejected {
				t.Fatalf("outcome %s for a rejection", outcome)
			}
			assertPrintable(t, err.Error())
		case bankclient.IsKeyReuse(err):
			if status != 422 {
				t.Fatalf("status %d classified as key reuse", status)
			}
		case bankclient.IsAmbiguous(err):
			if outcome != bankclient.OutcomeAmbiguous && outcome != bankclient.OutcomeUnauthorized {
				t.Fatalf("outcome %s for an ambiguous answer", outcome)
			}
			assertPrintable(t, err.Error())
		}
		if (status >= 500 || status == 429 || status == 401 || status == 403) && !bankclient.IsAmbiguous(err) {
			t.Fatalf("status %d not ambiguous: %v", status, err)
		}
	})
}

// assertPrintable fails if s carries control characters from the bank.
func assertPrintable(t *testing.T, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("invalid UTF-8 in %q", s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			t.Fatalf("unprintable %U in %q", r, s)
		}
	}
}

func TestCheckDuplicateKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body    string
		wantErr error
	}{
		{`{"id":"p","status":"settled"}`, nil},
		{`{"status":"failed","status":"settled"}`, bankhttp.ErrDuplicateKey},
		{`{"payments":[{"id":"a","x":{"k":1}},{"id":"b","x":{"k":2}}],"next":""}`, nil},
		{`{"payments":[{"id":"a","id":"b"}]}`, bankhttp.ErrDuplicateKey},
		{`{"a":{"b":1},"a":2}`, bankhttp.ErrDuplicateKey},
		{`{"a":[1,{"b":2}],"c":{"b":3}}`, nil},
		{`{"a":1,"\u0061":2}`, bankhttp.ErrDuplicateKey},
		{strings.Repeat("[", 40) + strings.Repeat("]", 40), bankhttp.ErrTooDeep},
		{`{"a":`, nil}, // a syntax error, left to json.Unmarshal
	}
	for _, tt := range tests {
		err := checkDuplicateKeys([]byte(tt.body))
		if !errors.Is(err, tt.wantErr) || (err != nil && !errors.Is(err, bankclient.ErrMalformedResponse)) {
			t.Errorf("checkDuplicateKeys(%s) = %v, want %v", tt.body, err, tt.wantErr)
		}
	}
}
