package obie_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
)

// paymentJSON is a domestic payment answer for request("r-1") under
// consent c-1 with status st.
func paymentJSON(st string) string {
	return `{"Data":{"DomesticPaymentId":"pay-1","ConsentId":"c-1","Status":"` + st + `","CreationDateTime":"2026-01-02T03:04:05+00:00","StatusUpdateDateTime":"2026-01-02T03:04:05+00:00",` +
		`"Initiation":{"InstructionIdentification":"r-1","EndToEndIdentification":"r-1","InstructedAmount":{"Amount":"12.34","Currency":"GBP"},` +
		`"CreditorAccount":{"SchemeName":"UK.OBIE.SortCodeAccountNumber","Identification":"08080021325698","Name":"ACME Ltd"}}},"Links":{"Self":"https://bank.test/p"},"Meta":{}}`
}

func consentJSON(st string) string {
	return `{"Data":{"ConsentId":"c-1","Status":"` + st + `","CreationDateTime":"2026-01-02T03:04:05+00:00","StatusUpdateDateTime":"2026-01-02T03:04:05+00:00",` +
		`"Initiation":{"InstructionIdentification":"r-1","EndToEndIdentification":"r-1","InstructedAmount":{"Amount":"12.34","Currency":"GBP"},` +
		`"CreditorAccount":{"SchemeName":"UK.OBIE.SortCodeAccountNumber","Identification":"08080021325698","Name":"ACME Ltd"}}},"Risk":{},"Links":{"Self":"https://bank.test/c"},"Meta":{}}`
}

func obErr(code, path string) string {
	return `{"Code":"400","Message":"m","Errors":[{"ErrorCode":"` + code + `","Message":"rejected, retry later maybe","Path":"` + path + `"}]}`
}

// canned answers every request with status, headers and body, counting
// them.
func canned(t *testing.T, status int, header map[string]string, body string) (string, *int) {
	t.Helper()
	var mu sync.Mutex
	n := new(int)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*n++
		mu.Unlock()
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, n
}

func sentRequest() bankclient.PaymentRequest {
	r := request("r-1")
	r.ConsentID = "c-1"
	return r
}

// TestSendClassifiedByStatusAndCode: each answer to POST /domestic-payments
// lands in its class by the HTTP status and the OBIE error codes, whatever
// the messages say.
func TestSendClassifiedByStatusAndCode(t *testing.T) {
	t.Parallel()
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	rejected := func(code string) func(error) bool {
		return func(err error) bool {
			var re *bankclient.RejectedError
			return errors.As(err, &re) && re.Code == code && !bankclient.IsAmbiguous(err) && !errors.Is(err, obie.ErrSignatureRefused)
		}
	}
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		body   string
		check  func(error) bool
	}{
		{"a field error is a refusal", 400, nil, obErr("UK.OBIE.Field.Invalid", "Data.Initiation.InstructedAmount.Amount"), rejected("UK.OBIE.Field.Invalid")},
		{"a missing field is a refusal", 400, nil, obErr("UK.OBIE.Field.Missing", "Data.ConsentId"), rejected("UK.OBIE.Field.Missing")},
		{"an unsupported scheme is a refusal", 400, nil, obErr("UK.OBIE.Unsupported.Scheme", "Data.Initiation.CreditorAccount.SchemeName"), rejected("UK.OBIE.Unsupported.Scheme")},
		{"a consent mismatch is a refusal", 400, nil, obErr("UK.OBIE.Resource.ConsentMismatch", "Data.Initiation"), rejected("UK.OBIE.Resource.ConsentMismatch")},
		{"a consent no longer authorised is not a refusal (our own payment may have consumed it)", 400, nil, obErr("UK.OBIE.Resource.InvalidConsentStatus", "Data.ConsentId"), bankclient.IsAmbiguous},
		{"a bad signature is a refusal that says so", 400, nil, obErr("UK.OBIE.Signature.Invalid", "x-jws-signature"), func(err error) bool {
			var re *bankclient.RejectedError
			return errors.As(err, &re) && re.Code == "UK.OBIE.Signature.Invalid" && errors.Is(err, obie.ErrSignatureRefused) && !bankclient.IsAmbiguous(err)
		}},
		{"a missing signature is a refusal that says so", 400, nil, obErr("UK.OBIE.Signature.Missing", ""), is(obie.ErrSignatureRefused)},
		{"another body under the key is key reuse", 400, nil, obErr("UK.OBIE.Header.Invalid", "x-idempotency-key"), func(err error) bool {
			return bankclient.IsKeyReuse(err) && !bankclient.IsRejected(err) && !bankclient.IsAmbiguous(err)
		}},
		{"a duplicate reference is not a refusal", 400, nil, obErr("UK.OBIE.Rules.DuplicateReference", ""), bankclient.IsAmbiguous},
		{"an unexpected error is not a refusal", 400, nil, obErr("UK.OBIE.UnexpectedError", ""), bankclient.IsAmbiguous},
		{"an unknown code is not a refusal", 400, nil, obErr("BANK.Idempotency.BodyChanged", ""), bankclient.IsAmbiguous},
		{"a 400 without the OB error shape is not a refusal", 400, nil, `<html>bad request</html>`, bankclient.IsAmbiguous},
		{"401 is ambiguous and unauthorized", 401, nil, ``, func(err error) bool { return bankclient.IsAmbiguous(err) && bankclient.IsUnauthorized(err) }},
		{"403 is ambiguous and unauthorized", 403, nil, obErr("UK.OBIE.Reauthenticate", ""), func(err error) bool { return bankclient.IsAmbiguous(err) && bankclient.IsUnauthorized(err) }},
		{"429 carries Retry-After", 429, map[string]string{"Retry-After": "7"}, ``, func(err error) bool {
			var ae *bankclient.AmbiguousError
			return errors.As(err, &ae) && ae.StatusCode == 429 && ae.RetryAfter == 7*time.Second
		}},
		{"500 is ambiguous", 500, nil, obErr("UK.OBIE.UnexpectedError", ""), bankclient.IsAmbiguous},
		{"a gateway's 502 is ambiguous", 502, nil, `<html>bad gateway</html>`, bankclient.IsAmbiguous},
		{"404 on a POST is ambiguous", 404, nil, ``, func(err error) bool {
			return bankclient.IsAmbiguous(err) && !errors.Is(err, bankclient.ErrPaymentNotFound)
		}},
		{"a 200 where 201 is due is ambiguous", 200, nil, paymentJSON("Pending"), bankclient.IsAmbiguous},
		{"garbage JSON is ambiguous", 201, nil, `{"Data":`, is(bankclient.ErrMalformedResponse)},
		{"no payment id is ambiguous", 201, nil, strings.Replace(paymentJSON("Pending"), `"DomesticPaymentId":"pay-1",`, ``, 1), is(bankclient.ErrMalformedResponse)},
		{"another amount is ambiguous", 201, nil, strings.Replace(paymentJSON("Pending"), `"12.34"`, `"12.35"`, 1), is(bankclient.ErrMalformedResponse)},
		{"another reference is ambiguous", 201, nil, strings.Replace(paymentJSON("Pending"), `"EndToEndIdentification":"r-1"`, `"EndToEndIdentification":"r-2"`, 1), is(bankclient.ErrMalformedResponse)},
		{"another consent is ambiguous", 201, nil, strings.Replace(paymentJSON("Pending"), `"ConsentId":"c-1"`, `"ConsentId":"c-2"`, 1), is(bankclient.ErrMalformedResponse)},
		{"an inexact amount is ambiguous", 201, nil, strings.Replace(paymentJSON("Pending"), `"12.34"`, `"12.345"`, 1), is(bankclient.ErrMalformedResponse)},
		{"a duplicate key is ambiguous", 201, nil, strings.Replace(paymentJSON("Pending"), `"Status":"Pending"`, `"Status":"Rejected","Status":"AcceptedCreditSettlementCompleted"`, 1), is(bankclient.ErrMalformedResponse)},
		{"a 201 payment is accepted", 201, nil, paymentJSON("AcceptedSettlementInProcess"), func(err error) bool { return err == nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, n := canned(t, tc.status, tc.header, tc.body)
			c := newClient(t, u, bankclient.Options{Retry: oneAttempt})
			_, err := c.Send(context.Background(), bankclient.KeyFor("r-1"), sentRequest())
			if !tc.check(err) {
				t.Errorf("answer %d %s: %v (%T)", tc.status, tc.body, err, errors.Unwrap(err))
			}
			if *n != 1 {
				t.Errorf("%d requests, want 1", *n)
			}
			if err != nil && !strings.Contains(err.Error(), "x-fapi-interaction-id") && !bankclient.IsKeyReuse(err) {
				t.Errorf("the error does not carry the interaction id: %v", err)
			}
		})
	}
}

// TestStatusByIDClassified: a GET of an id the bank does not hold (400
// UK.OBIE.Resource.NotFound as the profile says, or 404) is
// ErrPaymentNotFound; other 400s, 5xx and garbage are ambiguous; an answer
// about another payment is ambiguous.
func TestStatusByIDClassified(t *testing.T) {
	t.Parallel()
	notFound := func(err error) bool {
		return errors.Is(err, bankclient.ErrPaymentNotFound) && !bankclient.IsAmbiguous(err)
	}
	for _, tc := range []struct {
		name   string
		status int
		body   string
		id     string
		check  func(error) bool
	}{
		{"400 Resource.NotFound", 400, obErr("UK.OBIE.Resource.NotFound", "DomesticPaymentId"), "pay-1", notFound},
		{"404", 404, ``, "pay-1", notFound},
		{"400 other", 400, obErr("UK.OBIE.Field.Invalid", ""), "pay-1", bankclient.IsAmbiguous},
		{"500", 500, ``, "pay-1", bankclient.IsAmbiguous},
		{"garbage", 200, `[]`, "pay-1", func(err error) bool { return errors.Is(err, bankclient.ErrMalformedResponse) }},
		{"another payment", 200, paymentJSON("Pending"), "pay-2", func(err error) bool { return errors.Is(err, bankclient.ErrMalformedResponse) }},
		{"the payment", 200, paymentJSON("Rejected"), "pay-1", func(err error) bool { return err == nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, _ := canned(t, tc.status, nil, tc.body)
			c := newClient(t, u, bankclient.Options{Retry: oneAttempt})
			p, err := c.StatusByID(context.Background(), tc.id)
			if !tc.check(err) {
				t.Errorf("%d %s: %+v, %v", tc.status, tc.body, p, err)
			}
			if err == nil && (p.Status != bankclient.StatusFailed || p.FailureReason != "Rejected" || p.Reference != "r-1" || p.CreditorAccount != "SortCodeAccountNumber:08080021325698:ACME Ltd") {
				t.Errorf("a rejected payment reads %+v", p)
			}
		})
	}
}

// TestStatusTable: every status of the spec maps as the table in
// answer.go says; an unknown one is not final.
func TestStatusTable(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bankclient.Status{
		"Pending":                           bankclient.StatusProcessing,
		"AcceptedSettlementInProcess":       bankclient.StatusProcessing,
		"AcceptedWithoutPosting":            bankclient.StatusProcessing,
		"AcceptedSettlementCompleted":       bankclient.StatusSettled,
		"AcceptedCreditSettlementCompleted": bankclient.StatusSettled,
		"Rejected":                          bankclient.StatusFailed,
		"Cancelled":                         bankclient.StatusAccepted,
		"":                                  bankclient.StatusAccepted,
	} {
		if got := obie.PaymentStatus(code); got != want || (want == bankclient.StatusAccepted && got.Final()) {
			t.Errorf("%q → %s, want %s", code, got, want)
		}
	}
	for code, want := range map[string]bankclient.ConsentStatus{
		"AwaitingAuthorisation": bankclient.ConsentAwaiting,
		"Authorised":            bankclient.ConsentAuthorised,
		"Consumed":              bankclient.ConsentConsumed,
		"Rejected":              bankclient.ConsentRejected,
		"Revoked":               bankclient.ConsentUnknown,
		"authorised":            bankclient.ConsentUnknown,
	} {
		if got := obie.ConsentStatus(code); got != want {
			t.Errorf("consent %q → %s, want %s", code, got, want)
		}
	}
	// Through the wire: an unknown payment status keeps the payment's id.
	u, _ := canned(t, 201, nil, paymentJSON("SomethingNew"))
	c := newClient(t, u, bankclient.Options{Retry: oneAttempt})
	res, err := c.Send(context.Background(), bankclient.KeyFor("r-1"), sentRequest())
	if err != nil || res.Payment.ID != "pay-1" || res.Payment.Status.Final() {
		t.Errorf("an unknown status: %+v, %v", res, err)
	}
}

// TestConsents: a consent answer reads as the consent; its expiry is the
// earlier of CompletionDateTime and CutOffDateTime; a replay of a consent
// already consumed says so; refusals classify as for payments.
func TestConsents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body := strings.Replace(consentJSON("AwaitingAuthorisation"), `"Initiation"`, `"CutOffDateTime":"2026-01-02T18:00:00+00:00","Authorisation":{"AuthorisationType":"Single","CompletionDateTime":"2026-01-02T10:00:00Z"},"Initiation"`, 1)
	u, _ := canned(t, 201, nil, body)
	c := newClient(t, u, bankclient.Options{Retry: oneAttempt})
	con, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor("r-1"), request("r-1"))
	if err != nil || con.ID != "c-1" || con.Status != bankclient.ConsentAwaiting || con.BankStatus != "AwaitingAuthorisation" ||
		!con.ExpiresAt.Equal(time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("CreateConsent: %+v, %v", con, err)
	}
	// Created in 2026-01-02, long before this call: a replay.
	if !con.Replayed {
		t.Errorf("a consent created long before the call is not reported replayed: %+v", con)
	}
	u, _ = canned(t, 400, nil, obErr("UK.OBIE.Signature.InvalidClaim", "x-jws-signature"))
	c = newClient(t, u, bankclient.Options{Retry: oneAttempt})
	if _, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor("r-1"), request("r-1")); !bankclient.IsRejected(err) || !errors.Is(err, obie.ErrSignatureRefused) {
		t.Errorf("a refused signature on the consent: %v", err)
	}
	u, _ = canned(t, 201, nil, strings.Replace(consentJSON("Authorised"), `"08080021325698"`, `"08080021325699"`, 1))
	c = newClient(t, u, bankclient.Options{Retry: oneAttempt})
	if _, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor("r-1"), request("r-1")); !errors.Is(err, bankclient.ErrMalformedResponse) {
		t.Errorf("a consent to another creditor: %v", err)
	}
	u, _ = canned(t, 200, nil, consentJSON("Revoked"))
	c = newClient(t, u, bankclient.Options{Retry: oneAttempt})
	if con, err := c.ConsentByID(ctx, "c-1"); err != nil || con.Status != bankclient.ConsentUnknown {
		t.Errorf("an unknown consent status: %+v, %v", con, err)
	}
	if _, err := c.ConsentByID(ctx, "c-2"); !errors.Is(err, bankclient.ErrMalformedResponse) {
		t.Errorf("an answer about another consent: %v", err)
	}
}

// TestRetriesIdenticalAndASecondApart: an ambiguous answer is retried in
// the call with the identical body, key and signature, each attempt with
// a fresh interaction id, and never less than a second after the one
// before (the profile's rule for duplicate payment initiations); so is a
// replay in a new call.
func TestRetriesIdenticalAndASecondApart(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		mu.Lock()
		got = append(got, recorded{Header: r.Header.Clone(), Body: []byte(b.String()), At: time.Now()})
		n := len(got)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(paymentJSON("Pending")))
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, bankclient.Options{Retry: bankclient.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxElapsed: 5 * time.Second}})
	key := bankclient.KeyFor("r-1")
	res, err := c.Send(context.Background(), key, sentRequest())
	if err != nil || res.Payment.ID != "pay-1" {
		t.Fatalf("Send: %+v, %v", res, err)
	}
	if _, err := c.Send(context.Background(), key, sentRequest()); err != nil {
		t.Fatalf("the replay: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	a, b, r := got[0], got[1], got[2]
	switch {
	case a.Header.Get("x-idempotency-key") != key || b.Header.Get("x-idempotency-key") != key || r.Header.Get("x-idempotency-key") != key:
		t.Error("another key")
	case string(a.Body) != string(b.Body) || string(a.Body) != string(r.Body):
		t.Error("another body")
	case a.Header.Get("x-jws-signature") != b.Header.Get("x-jws-signature"):
		t.Error("the in-call retry was signed again")
	case a.Header.Get("x-fapi-interaction-id") == b.Header.Get("x-fapi-interaction-id"):
		t.Error("the retry reused the interaction id")
	case b.At.Sub(a.At) < obie.MinDuplicateGap || r.At.Sub(b.At) < obie.MinDuplicateGap:
		t.Errorf("duplicates %v and %v apart, want at least %v", b.At.Sub(a.At), r.At.Sub(b.At), obie.MinDuplicateGap)
	}
	if err := verifyJWS(r.Header.Get("x-jws-signature"), r.Body, &testKey().PublicKey); err != nil {
		t.Errorf("the replay's signature: %v", err)
	}
}

// TestHeaders: every request carries the bearer token and a UUID
// interaction id; POSTs also the key, the signature and a JSON content
// type; GETs neither key nor signature nor content type (the profile:
// "Do not use").
func TestHeaders(t *testing.T) {
	t.Parallel()
	b, u := newTestBank(t)
	c := newClient(t, u, bankclient.Options{Token: "tok-123", Retry: oneAttempt})
	ctx := context.Background()
	req := request("hdr-1")
	con, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor("hdr-1"), req)
	if err != nil {
		t.Fatal(err)
	}
	req.ConsentID = con.ID
	res, err := c.Send(ctx, bankclient.KeyFor("hdr-1"), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatusByID(ctx, res.Payment.ID); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range b.Requests() {
		h := r.Header
		iid := h.Get("x-fapi-interaction-id")
		if h.Get("Authorization") != "Bearer tok-123" || len(iid) != 36 || ids[iid] {
			t.Errorf("%s %s: Authorization %q, interaction id %q", r.Method, r.Path, h.Get("Authorization"), iid)
		}
		ids[iid] = true
		post := r.Method == http.MethodPost
		if post != (h.Get("x-idempotency-key") != "") || post != (h.Get("x-jws-signature") != "") || post != (h.Get("Content-Type") == "application/json") {
			t.Errorf("%s %s: key %q, signature %t, content type %q", r.Method, r.Path, h.Get("x-idempotency-key"), h.Get("x-jws-signature") != "", h.Get("Content-Type"))
		}
		for _, no := range []string{"x-fapi-financial-id", "x-fapi-customer-ip-address", "x-fapi-auth-date"} {
			if h.Get(no) != "" {
				t.Errorf("%s %s carries %s", r.Method, r.Path, no)
			}
		}
	}
	if len(ids) != 3 {
		t.Errorf("%d requests", len(ids))
	}
	// The consent and the payment carry the same Initiation, byte for byte.
	rs := b.Requests()
	ini := func(body []byte) string {
		s := string(body)
		return s[strings.Index(s, `"Initiation"`):]
	}
	if ini(rs[0].Body) != ini(rs[1].Body) {
		t.Errorf("consent %s and payment %s differ", rs[0].Body, rs[1].Body)
	}
}

// TestUnsupported: there is no lookup by key and no list; nothing is
// sent.
func TestUnsupported(t *testing.T) {
	t.Parallel()
	u, n := canned(t, 500, nil, ``)
	c := newClient(t, u, bankclient.Options{Retry: oneAttempt})
	if _, err := c.StatusByKey(context.Background(), bankclient.KeyFor("x")); !errors.Is(err, bankclient.ErrUnsupported) {
		t.Errorf("StatusByKey: %v", err)
	}
	if _, err := c.Statement(context.Background(), "", 0); !errors.Is(err, bankclient.ErrUnsupported) {
		t.Errorf("Statement: %v", err)
	}
	bad := sentRequest()
	bad.ConsentID = ""
	if _, err := c.Send(context.Background(), bankclient.KeyFor("x"), bad); err == nil || bankclient.IsAmbiguous(err) {
		t.Errorf("a payment without consent: %v, want a plain error", err)
	}
	if _, err := c.Send(context.Background(), strings.Repeat("k", 41), sentRequest()); err == nil || bankclient.IsAmbiguous(err) {
		t.Errorf("a key of 41: %v, want a plain error", err)
	}
	if *n != 0 {
		t.Errorf("%d requests sent", *n)
	}
}
