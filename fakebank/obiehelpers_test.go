package fakebank_test

import (
	"bytes"
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"syscall"
	"testing"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/fakebank/obietest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// obBundle is an obie bank on an httptest server with a manual clock, the
// TPP's signing key (the bank verifies with its public half) and a client
// whose every request and answer is validated against Open Banking's
// OpenAPI document.
type obBundle struct {
	bank *fakebank.Bank
	// bankKey verifies the bank's answers (default: bank's signing key).
	bankKey *rsa.PublicKey
	// clientTLS is the TLS configuration of the clients (nil: plain HTTP).
	clientTLS *tls.Config
	url       string
	clock     *settletest.ManualClock
	key       *rsa.PrivateKey
	v         *obietest.Validator
	http      *http.Client
}

// noVerify as Options.JWSPublicKey makes setupOB start a bank that does
// not verify signatures.
var noVerify = &rsa.PublicKey{}

func setupOB(t *testing.T, opts fakebank.Options) *obBundle {
	t.Helper()
	return setupOBTLS(t, opts, nil)
}

// setupOBTLS is setupOB over TLS when opts.TLS is set, the client
// speaking with clientTLS.
func setupOBTLS(t *testing.T, opts fakebank.Options, clientTLS *tls.Config) *obBundle {
	t.Helper()
	clock := settletest.NewManualClock(t0)
	opts.Profile = "obie"
	if opts.Now == nil {
		opts.Now = clock.Now
	}
	key, _, _ := obietest.SigningKey(t)
	switch opts.JWSPublicKey {
	case nil:
		opts.JWSPublicKey = &key.PublicKey
	case noVerify:
		opts.JWSPublicKey = nil
	}
	var bank *fakebank.Bank
	var url string
	if opts.TLS != nil {
		bank, url = fakebanktest.NewTLSServer(t, opts)
	} else {
		bank, url = fakebanktest.NewServer(t, opts)
	}
	// No connection reuse: net/http would resend a POST by itself after a
	// dropped answer.
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: clientTLS}
	t.Cleanup(tr.CloseIdleConnections)
	v := obietest.NewValidator(t, tr)
	return &obBundle{bank: bank, url: url, clock: clock, key: key, v: v, http: &http.Client{Transport: v}, clientTLS: clientTLS}
}

// obAnswer is one answer of the bank; dropped when the connection closed
// without one.
type obAnswer struct {
	status  int
	header  http.Header
	body    []byte
	dropped bool
}

// get returns the string at a path of the answer's JSON ("" if none).
func (a obAnswer) get(t *testing.T, path ...string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(a.body, &v); err != nil {
		t.Fatalf("answer %d %q: %v", a.status, a.body, err)
	}
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			if len(x) == 0 {
				return ""
			}
			v = x[0]
			if m, ok := v.(map[string]any); ok {
				v = m[p]
			}
		default:
			return ""
		}
	}
	s, _ := v.(string)
	return s
}

// errorCode is the first ErrorCode of an OBErrorResponse1.
func (a obAnswer) errorCode(t *testing.T) string {
	t.Helper()
	var e fakebank.OBErrorResponse
	if err := json.Unmarshal(a.body, &e); err != nil || len(e.Errors) == 0 {
		t.Fatalf("answer %d %q is no OBErrorResponse1: %v", a.status, a.body, err)
	}
	return e.Errors[0].ErrorCode
}

// request is one request to the bank; its zero headers are the defaults
// of a well-behaved TPP.
type request struct {
	method, path, key string
	body              any
	raw               []byte // the body as is, instead of body
	sig               string // x-jws-signature instead of a signature of the body
	noAuth, noSig     bool
	header            map[string]string
}

func (ob *obBundle) do(t *testing.T, c *http.Client, rq request) obAnswer {
	t.Helper()
	data := rq.raw
	if data == nil && rq.body != nil {
		var err error
		if data, err = json.Marshal(rq.body); err != nil {
			t.Fatal(err)
		}
	}
	var rd io.Reader
	if data != nil {
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(rq.method, ob.url+obietest.BasePath+rq.path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if !rq.noAuth {
		req.Header.Set("Authorization", "Bearer "+ob.tokenFor(t, rq, data))
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("x-fapi-interaction-id", "93bac548-d2de-4546-b106-880a5018460d")
	if rq.method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		if rq.key != "" {
			req.Header.Set("x-idempotency-key", rq.key)
		}
		sig := rq.sig
		if sig == "" && !rq.noSig {
			if sig, err = fakebank.SignDetachedJWS(ob.key, "tpp-kid-1", "0015800001041RHAAY/HQuZPIt3ipkh33Uxytox1E", ob.clock.Now(), data); err != nil {
				t.Fatal(err)
			}
		}
		if sig != "" {
			req.Header.Set("x-jws-signature", sig)
		}
	}
	for k, v := range rq.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := c.Do(req)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return obAnswer{dropped: true}
		}
		t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := obAnswer{status: res.StatusCode, header: res.Header, body: body}
	if got := res.Header.Get("x-fapi-interaction-id"); got != req.Header.Get("x-fapi-interaction-id") {
		t.Errorf("%s %s: x-fapi-interaction-id %q, want %q played back", rq.method, rq.path, got, req.Header.Get("x-fapi-interaction-id"))
	}
	if len(body) > 0 {
		sig := res.Header.Get("x-jws-signature")
		pub := ob.bankKey
		if pub == nil {
			pub = ob.bank.JWSSigningPublicKey()
		}
		if err := fakebank.VerifyDetachedJWS(sig, body, pub, ob.clock.Now()); err != nil {
			t.Errorf("%s %s: the answer's signature: %v", rq.method, rq.path, err)
		}
	}
	return a
}

// tokenFor is the bearer token of a request: for a payment, the account
// holder's token of the consent it names (issued without the flow when
// the bank is in process: these tests are not about it; obieauth_test.go
// is), else the TPP's.
func (ob *obBundle) tokenFor(t *testing.T, rq request, body []byte) string {
	if rq.method != http.MethodPost || rq.path != "/domestic-payments" {
		return "tpp-access-token"
	}
	var p struct{ Data struct{ ConsentId string } } //nolint:revive // the field is the document's
	if json.Unmarshal(body, &p) != nil {
		return "tpp-access-token"
	}
	if ob.bank == nil {
		return ob.flowToken(t, p.Data.ConsentId)
	}
	tok, err := ob.bank.IssueConsentToken(p.Data.ConsentId)
	if err != nil {
		return "tpp-access-token"
	}
	return tok
}

// flowToken runs the authorisation of consent cid through the bank's
// pages over HTTP (the automatic account holder must decide at once) and
// returns the access token.
func (ob *obBundle) flowToken(t *testing.T, cid string) string {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: ob.clientTLS}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	q := redirected(t, func() (*http.Response, error) { return c.Get(ob.authorizeURL(cid, "flow-"+cid)) })
	res, err := c.PostForm(ob.url+"/token", url.Values{"grant_type": {"authorization_code"}, "code": {q.Get("code")},
		"client_id": {tppClient}, "redirect_uri": {tppRedirect}, "code_verifier": {tppVerifier}})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || v.AccessToken == "" {
		t.Fatalf("token of consent %s: %d %v", cid, res.StatusCode, err)
	}
	return v.AccessToken
}

func (ob *obBundle) postConsent(t *testing.T, key string, body any) obAnswer {
	t.Helper()
	return ob.do(t, ob.http, request{method: http.MethodPost, path: "/domestic-payment-consents", key: key, body: body})
}

func (ob *obBundle) postPayment(t *testing.T, key string, body any) obAnswer {
	t.Helper()
	return ob.do(t, ob.http, request{method: http.MethodPost, path: "/domestic-payments", key: key, body: body})
}

func (ob *obBundle) getConsent(t *testing.T, id string) obAnswer {
	t.Helper()
	return ob.do(t, ob.http, request{method: http.MethodGet, path: "/domestic-payment-consents/" + id})
}

func (ob *obBundle) getPayment(t *testing.T, id string) obAnswer {
	t.Helper()
	return ob.do(t, ob.http, request{method: http.MethodGet, path: "/domestic-payments/" + id})
}

// invalidClient is a client for requests that break the document on
// purpose: their answers are still validated.
func (ob *obBundle) invalidClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: ob.clientTLS}
	t.Cleanup(tr.CloseIdleConnections)
	v := obietest.NewValidator(t, tr)
	v.InvalidRequests = true
	return &http.Client{Transport: v}
}

// mustConsent creates a consent for ref and returns its id.
func (ob *obBundle) mustConsent(t *testing.T, ref, amount string) string {
	t.Helper()
	a := ob.postConsent(t, "consent-"+ref, consentBody(ref, amount))
	if a.status != http.StatusCreated {
		t.Fatalf("consent %s: %d %s", ref, a.status, a.body)
	}
	return a.get(t, "Data", "ConsentId")
}

type obj = map[string]any

func initiation(ref, amount string) obj {
	return obj{
		"InstructionIdentification": "instr-" + ref,
		"EndToEndIdentification":    ref,
		"InstructedAmount":          obj{"Amount": amount, "Currency": "GBP"},
		"CreditorAccount": obj{
			"SchemeName":     "UK.OBIE.SortCodeAccountNumber",
			"Identification": "08080021325698",
			"Name":           "ACME Ltd",
		},
		"RemittanceInformation": obj{"Reference": "settle"},
	}
}

func consentBody(ref, amount string) obj {
	return obj{"Data": obj{"Initiation": initiation(ref, amount)}, "Risk": obj{"PaymentContextCode": "TransferToThirdParty"}}
}

func paymentBody(consentID, ref, amount string) obj {
	return obj{"Data": obj{"ConsentId": consentID, "Initiation": initiation(ref, amount)}, "Risk": obj{"PaymentContextCode": "TransferToThirdParty"}}
}

// adminStats reads GET /admin/stats.
func adminStats(t *testing.T, c *http.Client, url string) map[string]float64 {
	t.Helper()
	res, err := c.Get(url + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got map[string]float64
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	return got
}
