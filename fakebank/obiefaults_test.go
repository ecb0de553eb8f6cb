package fakebank_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/fakebank/obietest"
)

// signWith signs body under a JOSE header of our choosing, PS256 with
// key, detached: what a TPP that gets the header wrong sends.
func signWith(t *testing.T, key *rsa.PrivateKey, header map[string]any, body []byte) string {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	input := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(body)
	digest := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPSS(rand.Reader, key, crypto.SHA256, digest[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(h) + ".." + base64.RawURLEncoding.EncodeToString(sig)
}

var otherKey = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

// TestOBIESignatures: with the TPP's public key the bank verifies every
// POST's x-jws-signature as the profile's "Process for Verifying a
// Signature" says; a missing or bad one is 400 with the profile's
// UK.OBIE.Signature.* code and nothing is created. Without the key a
// signature is still required but not verified.
func TestOBIESignatures(t *testing.T) {
	t.Parallel()
	ob := setupOB(t, fakebank.Options{})
	c := ob.invalidClient(t)
	body := consentBody("sig-1", "5.00")
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	other, err := otherKey()
	if err != nil {
		t.Fatal(err)
	}
	now := ob.clock.Now().Unix()
	header := func(edit func(h map[string]any)) map[string]any {
		h := map[string]any{
			"alg": "PS256", "kid": "tpp-kid-1", "typ": "JOSE",
			fakebank.ClaimIAT: now, fakebank.ClaimISS: "org/software", fakebank.ClaimTAN: "openbanking.org.uk",
			"crit": []string{fakebank.ClaimIAT, fakebank.ClaimISS, fakebank.ClaimTAN},
		}
		if edit != nil {
			edit(h)
		}
		return h
	}
	good := signWith(t, ob.key, header(nil), data)
	parts := strings.Split(good, ".")
	for _, tc := range []struct {
		name string
		sig  string
		code string
	}{
		{"missing", "", fakebank.OBSignatureMissing},
		{"over another body", signWith(t, ob.key, header(nil), []byte(`{"Data":{}}`)), fakebank.OBSignatureInvalid},
		{"by another key", signWith(t, other, header(nil), data), fakebank.OBSignatureInvalid},
		{"signature bytes altered", parts[0] + ".." + strings.Repeat("A", len(parts[2])), fakebank.OBSignatureInvalid},
		{"payload attached", parts[0] + "." + base64.RawURLEncoding.EncodeToString(data) + "." + parts[2], fakebank.OBSignatureMalformed},
		{"not a JWS", "hello", fakebank.OBSignatureMalformed},
		{"alg RS256", signWith(t, ob.key, header(func(h map[string]any) { h["alg"] = "RS256" }), data), fakebank.OBSignatureInvalidClaim},
		{"no kid", signWith(t, ob.key, header(func(h map[string]any) { delete(h, "kid") }), data), fakebank.OBSignatureMissingClaim},
		{"no iat", signWith(t, ob.key, header(func(h map[string]any) { delete(h, fakebank.ClaimIAT) }), data), fakebank.OBSignatureMissingClaim},
		{"iat in the future", signWith(t, ob.key, header(func(h map[string]any) { h[fakebank.ClaimIAT] = now + 3600 }), data), fakebank.OBSignatureInvalidClaim},
		{"iat a string", signWith(t, ob.key, header(func(h map[string]any) { h[fakebank.ClaimIAT] = "yesterday" }), data), fakebank.OBSignatureInvalidClaim},
		{"crit without tan", signWith(t, ob.key, header(func(h map[string]any) { h["crit"] = []string{fakebank.ClaimIAT, fakebank.ClaimISS} }), data), fakebank.OBSignatureInvalidClaim},
		{"crit with more", signWith(t, ob.key, header(func(h map[string]any) {
			h["crit"] = []string{fakebank.ClaimIAT, fakebank.ClaimISS, fakebank.ClaimTAN, "b64"}
		}), data), fakebank.OBSignatureInvalidClaim},
		{"no crit", signWith(t, ob.key, header(func(h map[string]any) { delete(h, "crit") }), data), fakebank.OBSignatureMissingClaim},
		{"an extra claim", signWith(t, ob.key, header(func(h map[string]any) { h["b64"] = false }), data), fakebank.OBSignatureInvalidClaim},
		{"typ JWT", signWith(t, ob.key, header(func(h map[string]any) { h["typ"] = "JWT" }), data), fakebank.OBSignatureInvalidClaim},
	} {
		rq := request{method: http.MethodPost, path: "/domestic-payment-consents", key: "sig-" + strings.ReplaceAll(tc.name, " ", "-"), raw: data, sig: tc.sig}
		if tc.sig == "" {
			rq.noSig = true
		}
		a := ob.do(t, c, rq)
		if a.status != http.StatusBadRequest || a.errorCode(t) != tc.code {
			t.Errorf("signature %s: %d %s, want 400 %s", tc.name, a.status, a.body, tc.code)
		}
	}
	if cs := ob.bank.ConsentStats(); cs.Consents != 0 {
		t.Fatalf("consent stats %+v: a badly signed request created a consent", cs)
	}
	// The well-signed request, and one signed by go-jose the usual way.
	if a := ob.do(t, ob.http, request{method: http.MethodPost, path: "/domestic-payment-consents", key: "sig-good", raw: data, sig: good}); a.status != http.StatusCreated {
		t.Fatalf("a good signature: %d %s", a.status, a.body)
	}
	cid := ob.mustConsent(t, "sig-2", "5.00")
	// A badly signed payment creates nothing either.
	pdata, _ := json.Marshal(paymentBody(cid, "sig-2", "5.00"))
	if a := ob.do(t, c, request{method: http.MethodPost, path: "/domestic-payments", key: "p-sig", raw: pdata, sig: signWith(t, other, header(nil), pdata)}); a.status != http.StatusBadRequest || a.errorCode(t) != fakebank.OBSignatureInvalid {
		t.Fatalf("a payment signed by another key: %d %s", a.status, a.body)
	}
	if st := ob.bank.Stats(); st.Payments != 0 {
		t.Fatalf("stats %+v", st)
	}

	// Without the key: required, not verified.
	nv := setupOB(t, fakebank.Options{JWSPublicKey: noVerify})
	nc := nv.invalidClient(t)
	if a := nv.do(t, nc, request{method: http.MethodPost, path: "/domestic-payment-consents", key: "u-1", raw: data, noSig: true}); a.status != http.StatusBadRequest || a.errorCode(t) != fakebank.OBSignatureMissing {
		t.Errorf("no signature, bank without a key: %d %s", a.status, a.body)
	}
	if a := nv.do(t, nv.http, request{method: http.MethodPost, path: "/domestic-payment-consents", key: "u-2", raw: data, sig: signWith(t, other, header(nil), []byte("x"))}); a.status != http.StatusCreated {
		t.Errorf("a wrong signature, bank without a key: %d %s", a.status, a.body)
	}
}

// TestOBIEFaults: the section 7 faults, in Open Banking's shape.
func TestOBIEFaults(t *testing.T) {
	t.Parallel()
	ob := setupOB(t, fakebank.Options{})
	c := ob.invalidClient(t)
	set := func(f fakebank.Faults) {
		t.Helper()
		if err := ob.bank.SetFaults(f); err != nil {
			t.Fatal(err)
		}
	}

	// fail_before_rate: 500 before anything is done.
	set(fakebank.Faults{FailBeforeRate: 1})
	if a := ob.postConsent(t, "f-1", consentBody("f-1", "1.00")); a.status != http.StatusInternalServerError || a.errorCode(t) != fakebank.OBUnexpectedError {
		t.Fatalf("fail_before_rate: %d %s", a.status, a.body)
	}
	set(fakebank.Faults{})
	cid := ob.mustConsent(t, "f-1", "1.00")
	set(fakebank.Faults{FailBeforeRate: 1})
	if a := ob.postPayment(t, "p-f-1", paymentBody(cid, "f-1", "1.00")); a.status != http.StatusInternalServerError {
		t.Fatalf("fail_before_rate on a payment: %d %s", a.status, a.body)
	}
	if st, cs := ob.bank.Stats(), ob.bank.ConsentStats(); st.Payments != 0 || cs.Consents != 1 {
		t.Fatalf("after fail_before_rate: %+v %+v", st, cs)
	}

	// drop_response_rate: made, answer lost; the replay finds it.
	set(fakebank.Faults{DropResponseRate: 1})
	if a := ob.postPayment(t, "p-f-1", paymentBody(cid, "f-1", "1.00")); !a.dropped && a.status != http.StatusInternalServerError {
		t.Fatalf("drop_response_rate: %d %s", a.status, a.body)
	}
	set(fakebank.Faults{})
	a := ob.postPayment(t, "p-f-1", paymentBody(cid, "f-1", "1.00"))
	if a.status != http.StatusCreated || a.get(t, "Data", "Status") != "AcceptedCreditSettlementCompleted" {
		t.Fatalf("replay after a lost answer: %d %s", a.status, a.body)
	}
	pid := a.get(t, "Data", "DomesticPaymentId")

	// status_error_rate: the GETs fail.
	set(fakebank.Faults{StatusErrorRate: 1})
	if a := ob.getPayment(t, pid); a.status != http.StatusInternalServerError {
		t.Fatalf("status_error_rate: %d %s", a.status, a.body)
	}
	if a := ob.getConsent(t, cid); a.status != http.StatusInternalServerError {
		t.Fatalf("status_error_rate on a consent: %d %s", a.status, a.body)
	}

	// reject_rate: Rejected at once; settlement_failure_rate: Rejected
	// once the settle delay has passed.
	set(fakebank.Faults{RejectRate: 1})
	rid := ob.mustConsent(t, "f-2", "2.00")
	if a := ob.postPayment(t, "p-f-2", paymentBody(rid, "f-2", "2.00")); a.status != http.StatusCreated || a.get(t, "Data", "Status") != "Rejected" {
		t.Fatalf("reject_rate: %d %s", a.status, a.body)
	}
	set(fakebank.Faults{SettlementFailureRate: 1, SettleDelayMS: 100})
	sid := ob.mustConsent(t, "f-3", "3.00")
	a = ob.postPayment(t, "p-f-3", paymentBody(sid, "f-3", "3.00"))
	if a.status != http.StatusCreated || a.get(t, "Data", "Status") != "Pending" {
		t.Fatalf("settlement_failure_rate: %d %s", a.status, a.body)
	}
	ob.clock.Advance(100 * time.Millisecond)
	if g := ob.getPayment(t, a.get(t, "Data", "DomesticPaymentId")); g.get(t, "Data", "Status") != "Rejected" {
		t.Fatalf("settlement_failure_rate once due: %s", g.body)
	}

	// rate_limit_per_s: 429 with Retry-After past the fair usage.
	set(fakebank.Faults{RateLimitPerS: 0.001})
	var limited obAnswer
	for range 3 {
		if limited = ob.do(t, c, request{method: http.MethodGet, path: "/domestic-payments/" + pid}); limited.status == http.StatusTooManyRequests {
			break
		}
	}
	if limited.status != http.StatusTooManyRequests || limited.header.Get("Retry-After") == "" || limited.errorCode(t) != fakebank.OBUnexpectedError {
		t.Fatalf("rate_limit_per_s: %d %v %s", limited.status, limited.header, limited.body)
	}

	// latency: every answer waits.
	set(fakebank.Faults{LatencyMinMS: 30, LatencyMaxMS: 30})
	start := time.Now()
	ob.getPayment(t, pid)
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("latency 30 ms: answered in %v", d)
	}

	// key_ttl_ms: past it the bank forgets the payment key, but the
	// consent is consumed: the same request pays nothing twice. A
	// consent key forgotten makes a new consent.
	set(fakebank.Faults{KeyTTLMS: 1000})
	kid := ob.mustConsent(t, "f-4", "4.00")
	if a := ob.postPayment(t, "p-f-4", paymentBody(kid, "f-4", "4.00")); a.status != http.StatusCreated {
		t.Fatalf("payment: %d %s", a.status, a.body)
	}
	ob.clock.Advance(1001 * time.Millisecond)
	if a := ob.postPayment(t, "p-f-4", paymentBody(kid, "f-4", "4.00")); a.status != http.StatusBadRequest || a.errorCode(t) != fakebank.OBResourceInvalidConsent {
		t.Fatalf("the payment key past key_ttl_ms: %d %s", a.status, a.body)
	}
	if again := ob.mustConsent(t, "f-4", "4.00"); again == kid {
		t.Errorf("the consent key past key_ttl_ms replayed %s", kid)
	}

	// Without key_ttl_ms the window is the profile's 24 hours.
	set(fakebank.Faults{})
	wid := ob.mustConsent(t, "f-5", "5.00")
	ob.clock.Advance(24*time.Hour - time.Millisecond)
	if again := ob.mustConsent(t, "f-5", "5.00"); again != wid {
		t.Errorf("within 24 h the consent key made %s, want %s", again, wid)
	}
	ob.clock.Advance(time.Millisecond)
	if again := ob.mustConsent(t, "f-5", "5.00"); again == wid {
		t.Errorf("after 24 h the consent key still replays %s", wid)
	}

	want := fakebank.Stats{Payments: 4, Replays: 1, MaxExecutionsPerKey: 1, MaxPaymentsPerReference: 1}
	if st := ob.bank.Stats(); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	// /admin/stats has the same, and the consents.
	got := adminStats(t, http.DefaultClient, ob.url)
	if got["payments"] != 4 || got["max_payments_per_reference"] != 1 || got["consents"] != 7 {
		t.Errorf("/admin/stats %v", got)
	}
}

// TestOBIEReturnsOnlyOnStatements: a returned payment keeps its settled
// status at the payment resource, as Open Banking reports returns only on
// statements; the statement books it back with its return reason, under
// the EndToEndIdentification sent.
func TestOBIEReturnsOnlyOnStatements(t *testing.T) {
	t.Parallel()
	ob := setupOB(t, fakebank.Options{Faults: fakebank.Faults{ReturnRate: 1, ReturnAfterMS: 1000}})
	cid := ob.mustConsent(t, "E2E-RET-1", "12.34")
	a := ob.postPayment(t, "p-ret-1", paymentBody(cid, "E2E-RET-1", "12.34"))
	pid := a.get(t, "Data", "DomesticPaymentId")
	if err := ob.bank.SetFaults(fakebank.Faults{}); err != nil {
		t.Fatal(err)
	}
	cid2 := ob.mustConsent(t, "E2E-RET-2", "1.00")
	b := ob.postPayment(t, "p-ret-2", paymentBody(cid2, "E2E-RET-2", "1.00"))
	if a.status != http.StatusCreated || b.status != http.StatusCreated {
		t.Fatalf("payments: %s %s", a.body, b.body)
	}
	ob.clock.Advance(time.Second) // the first comes back by return_rate
	if err := ob.bank.Return(b.get(t, "Data", "DomesticPaymentId"), "MD06"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{pid, b.get(t, "Data", "DomesticPaymentId")} {
		if g := ob.getPayment(t, id); g.get(t, "Data", "Status") != "AcceptedCreditSettlementCompleted" {
			t.Errorf("a returned payment reads %s", g.body)
		}
		if p, _ := ob.bank.PaymentByID(id); p.Status != bankclient.StatusReturned {
			t.Errorf("the books: %+v, want returned", p)
		}
	}
	res, err := http.Get(ob.url + "/v1/statements/" + t0.Format(time.DateOnly) + "?format=camt.053&batch=1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	stmt := string(body)
	for _, want := range []string{
		"<EndToEndId>E2E-RET-1</EndToEndId>", "<EndToEndId>E2E-RET-2</EndToEndId>",
		"<RtrInf><Rsn><Cd>AC04</Cd></Rsn></RtrInf>", "<RtrInf><Rsn><Cd>MD06</Cd></Rsn></RtrInf>",
		`<Amt Ccy="GBP">12.34</Amt>`, "<Othr><Id>60161331926819</Id></Othr>",
	} {
		if !strings.Contains(stmt, want) {
			t.Errorf("the statement has no %s:\n%s", want, stmt)
		}
	}
	if res.StatusCode != http.StatusOK || strings.Count(stmt, "<RtrInf>") != 2 {
		t.Errorf("statement %d with %d returns", res.StatusCode, strings.Count(stmt, "<RtrInf>"))
	}
	// The other formats carry the EndToEndIdentification too.
	for format, want := range map[fakebank.StatementFormat]string{fakebank.FormatMT940: "/EREF/E2E-RET-1", fakebank.FormatBAI2: "E2E-RET-1", fakebank.FormatCamt054: "<EndToEndId>E2E-RET-2</EndToEndId>"} {
		out, err := ob.bank.RenderStatement(t0, format, 1)
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s: %v, no %s in:\n%s", format, err, want, out)
		}
	}
}

// TestOBIEMutualTLS: the bank served over TLS requiring a client
// certificate from the test's CA answers a client that presents one and
// refuses one that does not.
func TestOBIEMutualTLS(t *testing.T) {
	t.Parallel()
	pki := obietest.NewPKI(t)
	ob := setupOBTLS(t, fakebank.Options{TLS: pki.ServerTLS()}, pki.ClientTLS(true))
	if !strings.HasPrefix(ob.url, "https://") {
		t.Fatalf("url %s", ob.url)
	}
	cid := ob.mustConsent(t, "tls-1", "9.99")
	a := ob.postPayment(t, "p-tls-1", paymentBody(cid, "tls-1", "9.99"))
	if a.status != http.StatusCreated || !strings.HasPrefix(a.get(t, "Links", "Self"), "https://") {
		t.Fatalf("payment over mutual TLS: %d %s", a.status, a.body)
	}
	bare := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(false), DisableKeepAlives: true}}
	res, err := bare.Get(ob.url + obietest.BasePath + "/domestic-payments/" + a.get(t, "Data", "DomesticPaymentId"))
	if err == nil {
		res.Body.Close()
		t.Fatalf("a client without a certificate was answered %d", res.StatusCode)
	}

	// Bank.Start serves the same, for settle fakebank.
	bank, err := fakebank.New(fakebank.Options{Profile: "obie", TLS: pki.ServerTLS()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bank.Close() })
	url, err := bank.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(true), DisableKeepAlives: true}}
	res, err = withCert.Get(url + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if !strings.HasPrefix(url, "https://") || res.StatusCode != http.StatusOK {
		t.Errorf("Start over TLS: %s %d", url, res.StatusCode)
	}
	if res, err := bare.Get(url + "/admin/stats"); err == nil {
		res.Body.Close()
		t.Error("Start over TLS answered a client without a certificate")
	}
}

// TestOBIEStateFile: consents and their keys survive a restart.
func TestOBIEStateFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bank.json")
	ob := setupOB(t, fakebank.Options{StatePath: path})
	cid := ob.mustConsent(t, "st-1", "1.00")
	if a := ob.postPayment(t, "p-st-1", paymentBody(cid, "st-1", "1.00")); a.status != http.StatusCreated {
		t.Fatalf("payment: %d %s", a.status, a.body)
	}
	again, url := fakebanktest.NewServer(t, fakebank.Options{Profile: "obie", StatePath: path, Now: ob.clock.Now, JWSPublicKey: &ob.key.PublicKey})
	ob.bank, ob.url = again, url
	if g := ob.getConsent(t, cid); g.get(t, "Data", "Status") != "Consumed" {
		t.Errorf("consent after a restart: %s", g.body)
	}
	if r := ob.postConsent(t, "consent-st-1", consentBody("st-1", "1.00")); r.get(t, "Data", "ConsentId") != cid {
		t.Errorf("the consent key after a restart: %s", r.body)
	}
	if st, cs := again.Stats(), again.ConsentStats(); st.Payments != 1 || cs.Consents != 1 || cs.ConsentReplays != 1 {
		t.Errorf("after a restart: %+v %+v", st, cs)
	}
}

// TestOBIEValidatorCatchesViolations: an answer without the headers the
// document requires, or in settle's own error shape, or with a status the
// operation does not declare, fails validation, so the tests above would
// catch a bank that sent one.
func TestOBIEValidatorCatchesViolations(t *testing.T) {
	t.Parallel()
	doc := obietest.Spec(t)
	r, _ := http.NewRequest(http.MethodGet, "http://bank"+obietest.BasePath+"/domestic-payments/pay_1", nil)
	r.Header.Set("Authorization", "Bearer x")
	rt, params, err := obietest.Route(doc, r)
	if err != nil {
		t.Fatal(err)
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: rt,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		t.Fatalf("a plain GET: %v", err)
	}
	hdr := func(sig bool) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "X-Fapi-Interaction-Id": {"1"}}
		if sig {
			h.Set("x-jws-signature", "a..b")
		}
		return h
	}
	ok := `{"Code":"400 BadRequest","Message":"m","Errors":[{"ErrorCode":"UK.OBIE.Resource.NotFound","Message":"m"}]}`
	if err := obietest.ValidateResponse(in, http.StatusBadRequest, hdr(true), []byte(ok)); err != nil {
		t.Fatalf("a good error: %v", err)
	}
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		body   string
	}{
		{"no x-jws-signature", http.StatusBadRequest, hdr(false), ok},
		{"settle's error shape", http.StatusBadRequest, hdr(true), `{"error":"not_found"}`},
		{"an undeclared 404", http.StatusNotFound, hdr(true), ok},
		{"an unknown status", http.StatusOK, hdr(true), `{"Data":{"DomesticPaymentId":"p","ConsentId":"c","CreationDateTime":"2030-01-02T03:04:05Z","Status":"settled","StatusUpdateDateTime":"2030-01-02T03:04:05Z","Initiation":{}}}`},
	} {
		if err := obietest.ValidateResponse(in, tc.status, tc.header, []byte(tc.body)); err == nil {
			t.Errorf("%s passes validation", tc.name)
		}
	}
}

// FuzzOBIEBodies posts arbitrary bodies to both POSTs (the payment with the
// account holder's token of the seeds' consent): the bank answers 201,
// 400, or 403 for a payment under another consent than the token's, never
// a 5xx or a panic, and every answer validates against the document.
func FuzzOBIEBodies(f *testing.F) {
	good, _ := json.Marshal(consentBody("fz-1", "1.00"))
	pay, _ := json.Marshal(paymentBody("cns_000000000001", "fz-1", "1.00"))
	for _, s := range [][]byte{good, pay, []byte(`{}`), []byte(`{"Data":{"Initiation":null},"Risk":{}}`), []byte(`[]`), []byte(`{"Data":{"ConsentId":"cns_000000000001","Initiation":{"InstructedAmount":{"Amount":"99999999999999.99999","Currency":"BHD"}}},"Risk":{}}`), []byte("\x00")} {
		f.Add(s)
	}
	// A small signing key: every fuzzing worker makes its own, under
	// coverage instrumentation, and a 2048-bit one takes seconds there.
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		f.Fatal(err)
	}
	bank, err := fakebank.New(fakebank.Options{Profile: "obie", JWSSigningKey: key})
	if err != nil {
		f.Fatal(err)
	}
	h := bank.Handler()
	doc := obietest.Spec(f)
	// The consent the seeds name, and its account holder's token, so that
	// payment bodies are judged past the token.
	cr := httptest.NewRequest(http.MethodPost, "http://bank"+obietest.BasePath+"/domestic-payment-consents", strings.NewReader(string(good)))
	cr.Header.Set("Authorization", "Bearer x")
	cr.Header.Set("Content-Type", "application/json")
	cr.Header.Set("x-idempotency-key", "fz-consent")
	cr.Header.Set("x-jws-signature", "unverified..signature")
	cw := httptest.NewRecorder()
	h.ServeHTTP(cw, cr)
	tok, err := bank.IssueConsentToken("cns_000000000001")
	if cw.Code != http.StatusCreated || err != nil {
		f.Fatalf("the seeds' consent: %d %s, %v", cw.Code, cw.Body, err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/domestic-payment-consents", "/domestic-payments"} {
			r := httptest.NewRequest(http.MethodPost, "http://bank"+obietest.BasePath+path, strings.NewReader(string(body)))
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("x-idempotency-key", fmt.Sprintf("fz-%x", sha256.Sum256(append([]byte(path), body...)))[:40])
			r.Header.Set("x-jws-signature", "unverified..signature")
			in, _ := obietest.ValidateRequest(doc, r, body)
			if in == nil {
				t.Fatalf("no route for %s", path)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated && w.Code != http.StatusBadRequest && w.Code != http.StatusForbidden {
				t.Fatalf("POST %s %q: %d %s", path, body, w.Code, w.Body)
			}
			if err := obietest.ValidateResponse(in, w.Code, w.Result().Header, w.Body.Bytes()); err != nil {
				t.Fatalf("POST %s %q: %v", path, body, err)
			}
		}
	})
}
