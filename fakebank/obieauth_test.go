package fakebank_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
)

// The TPP of these tests: its client id, redirect URI and PKCE verifier.
const (
	tppClient   = "tpp-client-1"
	tppRedirect = "https://tpp.example/callback"
	tppVerifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk" // RFC 7636 appendix B
)

// noRedirects is a client that shows the bank's redirects instead of
// following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// authorizeURL is the authorization request for consent cid.
func (ob *obBundle) authorizeURL(cid, state string) string {
	q := url.Values{
		"response_type": {"code"}, "client_id": {tppClient}, "redirect_uri": {tppRedirect},
		"scope": {"openid payments"}, "state": {state}, "code_challenge": {fakebank.S256(tppVerifier)},
		"code_challenge_method": {"S256"}, "openbanking_intent_id": {cid},
	}
	return ob.url + "/authorize?" + q.Encode()
}

// redirected follows the account holder to the bank's page and returns
// the query the bank sent them back to the TPP with.
func redirected(t *testing.T, do func() (*http.Response, error)) url.Values {
	t.Helper()
	res, err := do()
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("authorize: %d %s, want a redirect", res.StatusCode, body)
	}
	loc, err := url.Parse(res.Header.Get("Location"))
	if err != nil || !strings.HasPrefix(loc.String(), tppRedirect+"?") {
		t.Fatalf("redirected to %q, want %s", res.Header.Get("Location"), tppRedirect)
	}
	return loc.Query()
}

// token posts a token request and returns its status and JSON.
func (ob *obBundle) token(t *testing.T, form url.Values) (int, map[string]any) {
	t.Helper()
	res, err := http.PostForm(ob.url+"/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatalf("token answer %d: %v", res.StatusCode, err)
	}
	return res.StatusCode, v
}

// exchange trades code for tokens under the test TPP's parameters.
func (ob *obBundle) exchange(t *testing.T, code, verifier string) (int, map[string]any) {
	t.Helper()
	return ob.token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "client_id": {tppClient},
		"redirect_uri": {tppRedirect}, "code_verifier": {verifier}})
}

// payWith posts a payment under consent cid with bearer token tok.
func (ob *obBundle) payWith(t *testing.T, key, tok, cid, ref string) obAnswer {
	t.Helper()
	return ob.do(t, ob.http, request{method: http.MethodPost, path: "/domestic-payments", key: key,
		body: paymentBody(cid, ref, "10.00"), header: map[string]string{"Authorization": "Bearer " + tok}})
}

// TestOBIEAuthorisationCodeFlow walks the account holder's authorisation
// (automatic after consent_delay_ms) and the token grants, and the payment
// POST's refusal of every token but the code flow's for its own consent.
func TestOBIEAuthorisationCodeFlow(t *testing.T) {
	t.Parallel()
	ob := setupOB(t, fakebank.Options{Faults: fakebank.Faults{ConsentDelayMS: 1000}, TokenTTL: time.Minute})
	cid := ob.mustConsent(t, "ref-a", "10.00")
	other := ob.mustConsent(t, "ref-b", "10.00")

	// The page waits for the automatic account holder: the clock moves
	// while the request waits.
	go func() { ob.clock.Advance(time.Second) }()
	q := redirected(t, func() (*http.Response, error) { return noRedirects.Get(ob.authorizeURL(cid, "st-1")) })
	if q.Get("state") != "st-1" || q.Get("code") == "" {
		t.Fatalf("redirect query %v, want the state and a code", q)
	}
	code := q.Get("code")
	if g := ob.getConsent(t, cid); g.get(t, "Data", "Status") != "Authorised" {
		t.Fatalf("consent after approval: %s", g.body)
	}

	// PKCE: another verifier is refused, and does not spend the code.
	if st, v := ob.exchange(t, code, strings.Repeat("x", 43)); st != http.StatusBadRequest || v["error"] != "invalid_grant" {
		t.Fatalf("wrong verifier: %d %v", st, v)
	}
	if st, v := ob.token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "client_id": {tppClient},
		"redirect_uri": {"https://elsewhere.example/cb"}, "code_verifier": {tppVerifier}}); st != http.StatusBadRequest || v["error"] != "invalid_grant" {
		t.Fatalf("another redirect_uri: %d %v", st, v)
	}
	st, v := ob.exchange(t, code, tppVerifier)
	if st != http.StatusOK || v["token_type"] != "Bearer" || v["expires_in"] != float64(60) || v["refresh_token"] == "" {
		t.Fatalf("exchange: %d %v", st, v)
	}
	access, refresh := v["access_token"].(string), v["refresh_token"].(string)
	if st, v := ob.exchange(t, code, tppVerifier); st != http.StatusBadRequest || v["error"] != "invalid_grant" {
		t.Fatalf("the code again: %d %v", st, v)
	}

	// Tokens the payment refuses, nothing made.
	st, v = ob.token(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {tppClient}, "scope": {"payments"}})
	if st != http.StatusOK {
		t.Fatalf("client credentials: %d %v", st, v)
	}
	cc := v["access_token"].(string)
	if p := ob.payWith(t, "pk-1", cc, cid, "ref-a"); p.status != http.StatusForbidden || p.errorCode(t) != fakebank.OBReauthenticate {
		t.Fatalf("payment with a client credentials token: %d %s", p.status, p.body)
	}
	if p := ob.payWith(t, "pk-1", "never-issued", cid, "ref-a"); p.status != http.StatusUnauthorized || len(p.body) != 0 {
		t.Fatalf("payment with a token never issued: %d %s", p.status, p.body)
	}
	if p := ob.payWith(t, "pk-2", access, other, "ref-b"); p.status != http.StatusForbidden || p.errorCode(t) != fakebank.OBResourceConsentMismatch {
		t.Fatalf("payment under another consent: %d %s", p.status, p.body)
	}
	if s := ob.bank.Stats(); s.Payments != 0 {
		t.Fatalf("refused payments were made: %+v", s)
	}
	if p := ob.payWith(t, "pk-1", access, cid, "ref-a"); p.status != http.StatusCreated {
		t.Fatalf("payment with the consent's token: %d %s", p.status, p.body)
	}

	// Expired: 401; a refreshed token replays the payment.
	ob.clock.Advance(time.Minute)
	if p := ob.payWith(t, "pk-1", access, cid, "ref-a"); p.status != http.StatusUnauthorized {
		t.Fatalf("payment with an expired token: %d %s", p.status, p.body)
	}
	st, v = ob.token(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}, "client_id": {tppClient}})
	if st != http.StatusOK {
		t.Fatalf("refresh: %d %v", st, v)
	}
	if p := ob.payWith(t, "pk-1", v["access_token"].(string), cid, "ref-a"); p.status != http.StatusCreated {
		t.Fatalf("replay with the refreshed token: %d %s", p.status, p.body)
	}
	if s := ob.bank.Stats(); s.Payments != 1 || s.MaxPaymentsPerReference != 1 {
		t.Fatalf("stats %+v, want one payment", s)
	}

	// A consumed consent cannot be authorised again.
	if q := redirected(t, func() (*http.Response, error) { return noRedirects.Get(ob.authorizeURL(cid, "st-2")) }); q.Get("error") != "invalid_request" || q.Get("state") != "st-2" {
		t.Fatalf("authorising a consumed consent: %v", q)
	}
	// A request the bank cannot send back is answered with a page.
	res, err := noRedirects.Get(ob.url + "/authorize?response_type=code&client_id=x&redirect_uri=javascript:alert(1)")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad redirect_uri: %d, want 400 and no redirect", res.StatusCode)
	}
}

// TestOBIEAuthorisationPage is the account holder deciding by hand
// (Options.ManualAuthorisation): the page shows the payment; Reject sends
// access_denied back and the consent is Rejected; a lost code can be
// replaced by authorising an authorised consent again.
func TestOBIEAuthorisationPage(t *testing.T) {
	t.Parallel()
	ob := setupOB(t, fakebank.Options{ManualAuthorisation: true})
	rejected := ob.mustConsent(t, "ref-r", "12.34")
	approved := ob.mustConsent(t, "ref-p", "10.00")

	res, err := http.Get(ob.authorizeURL(rejected, "st-r"))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{"12.34 GBP", "ACME Ltd", "ref-r", `value="approve"`, `value="reject"`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	if g := ob.getConsent(t, rejected); g.get(t, "Data", "Status") != "AwaitingAuthorisation" {
		t.Fatalf("consent before the decision: %s", g.body)
	}
	decide := func(cid, state, decision string) url.Values {
		u, _ := url.Parse(ob.authorizeURL(cid, state))
		form := u.Query()
		form.Set("decision", decision)
		return redirected(t, func() (*http.Response, error) { return noRedirects.PostForm(ob.url+"/authorize", form) })
	}
	if q := decide(rejected, "st-r", "reject"); q.Get("error") != "access_denied" || q.Get("state") != "st-r" {
		t.Fatalf("reject: %v", q)
	}
	if g := ob.getConsent(t, rejected); g.get(t, "Data", "Status") != "Rejected" {
		t.Fatalf("consent after reject: %s", g.body)
	}

	first := decide(approved, "st-p", "approve").Get("code")
	second := decide(approved, "st-p", "approve").Get("code")
	if first == "" || second == "" || first == second {
		t.Fatalf("codes %q and %q, want two", first, second)
	}
	if st, v := ob.exchange(t, second, tppVerifier); st != http.StatusOK {
		t.Fatalf("exchange of the second code: %d %v", st, v)
	}
}
