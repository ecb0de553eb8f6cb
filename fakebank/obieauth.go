package fakebank

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The obie profile's authorisation server: the account holder (the PSU)
// authorises a consent at the bank and the payment initiator (the TPP)
// gets a token for that consent, as the payment initiation profile's
// "Authorise Consent" step and its Grant Types say ("PISPs must use an
// authorization code grant using a redirect ... to obtain a token to make
// POST requests to the payment-order resource endpoints"):
//
//   - GET /authorize: the authorization request of RFC 6749 section 4.1.1
//     with PKCE (RFC 7636, S256 only): response_type=code, client_id,
//     redirect_uri, scope (with payments), state, code_challenge,
//     code_challenge_method=S256, and the consent to authorise as
//     openbanking_intent_id (a real ASPSP takes it in a signed request
//     object's claims). A request the bank cannot send back (no client, a
//     redirect URI that is not an absolute http(s) URL) is answered with a
//     page; any other error goes back to the redirect URI as
//     error=invalid_request. Then the account holder decides. With
//     Options.ManualAuthorisation the page shows the payment with Approve
//     and Reject (a form POST to /authorize); otherwise the account holder
//     is automatic: the page waits until consent_delay_ms after the
//     consent was created and applies the decision drawn then (Rejected
//     at consent_reject_rate), so demos and tests need no human. Approve
//     marks the consent Authorised and redirects to the redirect URI with
//     a one-time code and the state; Reject marks it Rejected and
//     redirects with error=access_denied. An Authorised consent not yet
//     consumed may be authorised again (a new code: the TPP lost the
//     first); a Consumed or Rejected one may not ("The ASPSP must not
//     permit any authorisation code grants to be initiated with such a
//     consent").
//   - POST /token (form-encoded, RFC 6749 sections 4.1.3, 4.4 and 6):
//     grant_type=client_credentials (a token for the consent endpoints and
//     the GETs), authorization_code (the code once, within ten minutes,
//     with the client_id and redirect_uri of its request and the PKCE
//     code_verifier whose S256 is its code_challenge: an access token bound
//     to the consent, valid Options.TokenTTL, and a refresh token) and
//     refresh_token (a new access token for the same consent). Errors are
//     RFC 6749 section 5.2's JSON. token_error_rate answers 500 before
//     anything is done; token_drop_rate loses the answer after the token
//     was issued (the TPP must authorise again: the code is spent). The
//     payment faults do not touch it.
//
// POST /domestic-payments takes only an access token issued by the code
// flow for the payment's own consent, not expired: a token the bank never
// issued, or one that expired, is 401 without a body ("When the TPP uses
// an expired access token, the ASPSP must return a 401 (Unauthorized)
// without any error response"); a client-credentials token, or one of
// another consent, is 403 with an OBErrorResponse1 ("Token has incorrect
// scope or a security policy was violated"). Nothing is created either
// way. The other endpoints take any bearer token, as before.
//
// Codes and tokens are kept in the books (in the state file) by their
// SHA-256, never as issued.

// The authorisation server's parameters.
const (
	// authCodeTTL is how long a code may be exchanged: RFC 6749 section
	// 4.1.2 recommends at most ten minutes.
	authCodeTTL = 10 * time.Minute
	// DefaultTokenTTL is how long an access token lives unless
	// Options.TokenTTL says otherwise (expires_in).
	DefaultTokenTTL = time.Hour
	// scopePayments is the scope of the Payment APIs' tokens.
	scopePayments = "payments"
)

// The kinds of token the bank issues.
const (
	tokenClient  = "client_credentials" // an access token of the client credentials grant
	tokenConsent = "consent"            // an access token of the code flow, bound to a consent
	tokenRefresh = "refresh"            // a refresh token, bound to a consent
)

// authCode is a code the bank issued, kept by its hash until exchanged or
// expired.
type authCode struct {
	Hash          string    `json:"hash"`
	ConsentSeq    int64     `json:"consent_seq"`
	ClientID      string    `json:"client_id"`
	RedirectURI   string    `json:"redirect_uri"`
	CodeChallenge string    `json:"code_challenge"`
	ExpiresAt     time.Time `json:"expires_at"`
	Used          bool      `json:"used,omitempty"`
}

// issuedToken is an access or refresh token the bank issued, kept by its
// hash.
type issuedToken struct {
	Hash       string    `json:"hash"`
	Kind       string    `json:"kind"`
	ClientID   string    `json:"client_id"`
	ConsentSeq int64     `json:"consent_seq,omitempty"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"` // zero: never (refresh tokens)
}

// secretHash is how the books keep a code or token.
func secretHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// newSecret is a fresh code or token: 32 random bytes, base64url.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// S256 is the PKCE code challenge of a code verifier (RFC 7636 section
// 4.2): BASE64URL(SHA256(verifier)).
func S256(verifier string) string {
	h := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// obieAuthRoutes registers the authorisation server on mux.
func (b *Bank) obieAuthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /authorize", b.handleAuthorize)
	mux.HandleFunc("POST /authorize", b.handleAuthorizeDecision)
	mux.HandleFunc("POST /token", b.handleToken)
}

// authRequest is an authorization request, checked.
type authRequest struct {
	ClientID, RedirectURI, State, Challenge, ConsentID, Scope string
}

// redirectable reports whether an error can go back to the redirect URI.
type authError struct {
	code, desc string
	redirect   bool // the redirect URI is known good: send it back there
}

func (e *authError) Error() string { return e.code + ": " + e.desc }

// parseAuthRequest checks the parameters of an authorization request.
func parseAuthRequest(q url.Values) (authRequest, *authError) {
	ar := authRequest{
		ClientID: q.Get("client_id"), RedirectURI: q.Get("redirect_uri"), State: q.Get("state"),
		Challenge: q.Get("code_challenge"), ConsentID: q.Get("openbanking_intent_id"), Scope: q.Get("scope"),
	}
	if ar.ClientID == "" {
		return ar, &authError{code: "invalid_request", desc: "client_id is missing"}
	}
	u, err := url.Parse(ar.RedirectURI)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
		return ar, &authError{code: "invalid_request", desc: "redirect_uri must be an absolute http or https URL without a fragment"}
	}
	bad := func(format string, args ...any) (authRequest, *authError) {
		return ar, &authError{code: "invalid_request", desc: fmt.Sprintf(format, args...), redirect: true}
	}
	switch {
	case q.Get("response_type") != "code":
		return ar, &authError{code: "unsupported_response_type", desc: "only response_type=code is served", redirect: true}
	case !hasScope(ar.Scope, scopePayments):
		return ar, &authError{code: "invalid_scope", desc: "the scope must include payments", redirect: true}
	case ar.State == "":
		return bad("state is missing")
	case q.Get("code_challenge_method") != "S256":
		return bad("PKCE is required with code_challenge_method=S256")
	case len(ar.Challenge) != 43 || strings.Trim(ar.Challenge, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "":
		return bad("code_challenge must be the 43 characters of a base64url SHA-256")
	case ar.ConsentID == "":
		return bad("openbanking_intent_id (the ConsentId to authorise) is missing")
	}
	return ar, nil
}

// hasScope reports whether a space-separated scope holds want.
func hasScope(scope, want string) bool {
	for s := range strings.FieldsSeq(scope) {
		if s == want {
			return true
		}
	}
	return false
}

// redirectBack sends the browser back to the TPP with params and state.
func redirectBack(w http.ResponseWriter, r *http.Request, redirectURI, state string, params url.Values) {
	u, _ := url.Parse(redirectURI) // checked by parseAuthRequest
	q := u.Query()
	for k, vs := range params {
		q[k] = vs
	}
	if state != "" {
		q.Set("state", state)
	}
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// authFail answers an authorization request the bank refuses: back to
// the TPP when it can, else a page.
func (b *Bank) authFail(w http.ResponseWriter, r *http.Request, ar authRequest, e *authError) {
	b.log.Debug("fakebank: authorization request refused", "consent", sanitizeID(ar.ConsentID), "error", e.code, "description", e.desc)
	if e.redirect {
		redirectBack(w, r, ar.RedirectURI, ar.State, url.Values{"error": {e.code}, "error_description": {e.desc}})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusBadRequest)
	_ = authPage.Execute(w, authView{Error: e.desc})
}

// authorisable checks the consent of an authorization request: it exists,
// and is awaiting authorisation or authorised but not consumed. It
// returns the consent's payment for the page.
func (b *Bank) authorisable(ar authRequest) (authView, *authError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.books.consentByID(ar.ConsentID)
	if c == nil {
		return authView{}, &authError{code: "invalid_request", desc: "no such consent", redirect: true}
	}
	switch st, _ := c.statusAt(b.books, b.now().UTC()); st {
	case ConsentRejected:
		// The account holder said no (on this page, in their banking
		// app, or as drawn for the automatic one).
		return authView{}, &authError{code: "access_denied", desc: "the account holder rejected the payment", redirect: true}
	case ConsentAwaitingAuthorisation, ConsentAuthorised:
	default:
		return authView{}, &authError{code: "invalid_request", desc: "the consent is " + string(st) + ": it cannot be authorised", redirect: true}
	}
	v := authView{ConsentID: c.ID}
	var req obConsentRequest
	if err := json.Unmarshal([]byte(c.Body), &req); err == nil && req.Data.Initiation != nil {
		in := req.Data.Initiation
		v.Amount = in.InstructedAmount.Amount + " " + in.InstructedAmount.Currency
		v.Creditor = in.CreditorAccount.Name + " (" + in.CreditorAccount.Identification + ")"
		v.Reference = in.EndToEndIdentification
	}
	return v, nil
}

func (b *Bank) handleAuthorize(w http.ResponseWriter, r *http.Request) {
	ar, aerr := parseAuthRequest(r.URL.Query())
	if aerr != nil {
		b.authFail(w, r, ar, aerr)
		return
	}
	view, aerr := b.authorisable(ar)
	if aerr != nil {
		b.authFail(w, r, ar, aerr)
		return
	}
	if b.manualAuth {
		view.Params = r.URL.Query()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_ = authPage.Execute(w, view)
		return
	}
	// The automatic account holder decides consent_delay_ms after the
	// consent was created, as drawn then.
	approve, err := b.autoDecision(r.Context(), ar.ConsentID)
	if err != nil {
		http.Error(w, "the account holder did not decide: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	b.decide(w, r, ar, approve)
}

func (b *Bank) handleAuthorizeDecision(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read", http.StatusBadRequest)
		return
	}
	ar, aerr := parseAuthRequest(r.PostForm)
	if aerr != nil {
		b.authFail(w, r, ar, aerr)
		return
	}
	if _, aerr := b.authorisable(ar); aerr != nil {
		b.authFail(w, r, ar, aerr)
		return
	}
	switch r.PostForm.Get("decision") {
	case "approve":
		b.decide(w, r, ar, true)
	case "reject":
		b.decide(w, r, ar, false)
	default:
		http.Error(w, "decision must be approve or reject", http.StatusBadRequest)
	}
}

// autoDecision waits until the consent's drawn decision is due (its
// DecideAt, or an admin decision) and returns it.
func (b *Bank) autoDecision(ctx context.Context, id string) (bool, error) {
	for {
		b.mu.Lock()
		c := b.books.consentByID(id)
		if c == nil {
			b.mu.Unlock()
			return false, ErrNoSuchConsent
		}
		now := b.now().UTC()
		wait := c.DecideAt.Sub(now)
		switch {
		case !c.RejectedAt.IsZero():
			b.mu.Unlock()
			return false, nil
		case !c.AuthorisedAt.IsZero():
			b.mu.Unlock()
			return true, nil
		case wait <= 0:
			b.mu.Unlock()
			return !c.Rejected, nil
		}
		b.mu.Unlock()
		// The clock may be a test's: look again every little while.
		if !b.sleep(ctx, min(wait, 50*time.Millisecond)) {
			return false, errors.New("the request ended first")
		}
	}
}

// decide applies the account holder's decision on the consent of ar and
// sends the browser back: a code, or access_denied.
func (b *Bank) decide(w http.ResponseWriter, r *http.Request, ar authRequest, approve bool) {
	code := newSecret()
	b.mu.Lock()
	now := b.now().UTC()
	c := b.books.consentByID(ar.ConsentID)
	st, _ := c.statusAt(b.books, now)
	if approve && st != ConsentAwaitingAuthorisation && st != ConsentAuthorised {
		b.mu.Unlock()
		b.authFail(w, r, ar, &authError{code: "invalid_request", desc: "the consent is " + string(st) + ": it cannot be authorised", redirect: true})
		return
	}
	if approve {
		if c.AuthorisedAt.IsZero() {
			c.AuthorisedAt = now
		}
		b.books.codes[secretHash(code)] = &authCode{Hash: secretHash(code), ConsentSeq: c.Seq, ClientID: ar.ClientID,
			RedirectURI: ar.RedirectURI, CodeChallenge: ar.Challenge, ExpiresAt: now.Add(authCodeTTL)}
	} else if st == ConsentAwaitingAuthorisation {
		// "When a PSU does not complete the consent-authorisation flow,
		// the ASPSP must mark the consent as Rejected."
		c.RejectedAt = now
	}
	b.books.pruneCodes(now)
	b.version++
	v := b.version
	b.mu.Unlock()
	if err := b.persist(v); err != nil {
		b.log.Error("fakebank: error writing state", "error", err)
		http.Error(w, "could not record the decision", http.StatusInternalServerError)
		return
	}
	b.log.Info("fakebank: consent authorisation", "id", ar.ConsentID, "approved", approve)
	if !approve {
		redirectBack(w, r, ar.RedirectURI, ar.State, url.Values{"error": {"access_denied"}, "error_description": {"the account holder rejected the payment"}})
		return
	}
	redirectBack(w, r, ar.RedirectURI, ar.State, url.Values{"code": {code}})
}

// pruneCodes forgets codes that can no longer be exchanged.
func (bk *books) pruneCodes(now time.Time) {
	for h, c := range bk.codes {
		if !now.Before(c.ExpiresAt) {
			delete(bk.codes, h)
		}
	}
}

// tokenResponse is RFC 6749 section 5.1's answer.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token,omitempty"`
	Scope        string `json:"scope,omitempty"`
}

// tokenError is RFC 6749 section 5.2's.
type tokenError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

func writeTokenError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, tokenError{Error: code, Description: desc})
}

func (b *Bank) handleToken(w http.ResponseWriter, r *http.Request) {
	f := b.Faults()
	if !b.sleep(r.Context(), b.latency(f.LatencyMinMS, f.LatencyMaxMS)) {
		writeTokenError(w, http.StatusInternalServerError, "server_error", "request cancelled")
		return
	}
	if b.chance(f.TokenErrorRate) {
		writeTokenError(w, http.StatusInternalServerError, "server_error", "simulated by token_error_rate")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	if err := r.ParseForm(); err != nil {
		writeTokenError(w, http.StatusBadRequest, "invalid_request", "the form could not be read")
		return
	}
	form := r.PostForm
	clientID := form.Get("client_id")
	if u, _, ok := r.BasicAuth(); ok && clientID == "" {
		clientID, _ = url.QueryUnescape(u)
	}
	if clientID == "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="fakebank"`)
		writeTokenError(w, http.StatusUnauthorized, "invalid_client", "client_id is missing")
		return
	}
	resp, status, terr := b.grant(form, clientID)
	if terr != nil {
		b.log.Debug("fakebank: token refused", "grant_type", form.Get("grant_type"), "error", terr.Error, "description", terr.Description)
		writeTokenError(w, status, terr.Error, terr.Description)
		return
	}
	if err := b.flush(); err != nil {
		b.log.Error("fakebank: error writing state", "error", err)
		writeTokenError(w, http.StatusInternalServerError, "server_error", "could not record the token")
		return
	}
	if b.chance(f.TokenDropRate) {
		if !b.hangUp(w, "token") {
			writeTokenError(w, http.StatusInternalServerError, "server_error", "simulated by token_drop_rate")
		}
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, resp)
}

// grant decides a token request of clientID.
func (b *Bank) grant(form url.Values, clientID string) (tokenResponse, int, *tokenError) {
	bad := func(code, desc string) (tokenResponse, int, *tokenError) {
		return tokenResponse{}, http.StatusBadRequest, &tokenError{Error: code, Description: desc}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now().UTC()
	bk := b.books
	switch form.Get("grant_type") {
	case "client_credentials":
		if s := form.Get("scope"); s != "" && !hasScope(s, scopePayments) {
			return bad("invalid_scope", "the scope must be payments")
		}
		access := bk.issue(tokenClient, clientID, 0, now.Add(b.tokenTTL))
		b.version++
		return tokenResponse{AccessToken: access, TokenType: "Bearer", ExpiresIn: int64(b.tokenTTL / time.Second), Scope: scopePayments}, 0, nil
	case "authorization_code":
		code := form.Get("code")
		c := bk.codes[secretHash(code)]
		switch {
		case code == "" || c == nil || !now.Before(c.ExpiresAt):
			return bad("invalid_grant", "the code is unknown or expired")
		case c.Used:
			return bad("invalid_grant", "the code was used already")
		case c.ClientID != clientID:
			return bad("invalid_grant", "the code was issued to another client")
		case c.RedirectURI != form.Get("redirect_uri"):
			return bad("invalid_grant", "redirect_uri is not the authorization request's")
		case form.Get("code_verifier") == "":
			return bad("invalid_request", "code_verifier is missing (PKCE)")
		case subtle.ConstantTimeCompare([]byte(S256(form.Get("code_verifier"))), []byte(c.CodeChallenge)) != 1:
			return bad("invalid_grant", "code_verifier does not match the code_challenge")
		}
		c.Used = true
		cons := bk.consents[c.ConsentSeq-1]
		if st, _ := cons.statusAt(bk, now); st != ConsentAuthorised {
			b.version++
			return bad("invalid_grant", "the consent is "+string(st))
		}
		access := bk.issue(tokenConsent, clientID, c.ConsentSeq, now.Add(b.tokenTTL))
		refresh := bk.issue(tokenRefresh, clientID, c.ConsentSeq, time.Time{})
		b.version++
		return tokenResponse{AccessToken: access, TokenType: "Bearer", ExpiresIn: int64(b.tokenTTL / time.Second),
			RefreshToken: refresh, Scope: "openid " + scopePayments}, 0, nil
	case "refresh_token":
		t := bk.tokens[secretHash(form.Get("refresh_token"))]
		if t == nil || t.Kind != tokenRefresh || t.ClientID != clientID {
			return bad("invalid_grant", "the refresh token is unknown")
		}
		access := bk.issue(tokenConsent, clientID, t.ConsentSeq, now.Add(b.tokenTTL))
		b.version++
		return tokenResponse{AccessToken: access, TokenType: "Bearer", ExpiresIn: int64(b.tokenTTL / time.Second), Scope: "openid " + scopePayments}, 0, nil
	case "":
		return bad("invalid_request", "grant_type is missing")
	default:
		return bad("unsupported_grant_type", "grant_type must be client_credentials, authorization_code or refresh_token")
	}
}

// issue makes a token of kind and records it by its hash.
func (bk *books) issue(kind, clientID string, consentSeq int64, expires time.Time) string {
	tok := newSecret()
	h := secretHash(tok)
	bk.tokens[h] = &issuedToken{Hash: h, Kind: kind, ClientID: clientID, ConsentSeq: consentSeq, ExpiresAt: expires}
	return tok
}

// IssueConsentToken issues an access token for consent id as the code flow
// does once its account holder authorised it, without the flow: for
// in-process tests of the payment endpoint that are not about the
// authorisation. It is not served over HTTP.
func (b *Bank) IssueConsentToken(id string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.books.consentByID(id)
	if c == nil {
		return "", fmt.Errorf("consent %q: %w", id, ErrNoSuchConsent)
	}
	tok := b.books.issue(tokenConsent, "test", c.Seq, b.now().UTC().Add(b.tokenTTL))
	b.version++
	return tok, nil
}

// errTokenRefused is a payment POST's token refusal: status 401 (no body)
// or 403 (with obError).
type errTokenRefused struct {
	status int
	obErr  OBError
}

func (e *errTokenRefused) Error() string { return fmt.Sprintf("%d %s", e.status, e.obErr.Message) }

// checkPaymentToken decides whether the bearer token of a payment POST
// may initiate a payment under consent c at now (see the comment at the
// top). The caller holds b.mu.
func (b *Bank) checkPaymentToken(bearer string, c *consent, now time.Time) *errTokenRefused {
	t := b.books.tokens[secretHash(bearer)]
	switch {
	case t == nil || t.Kind == tokenRefresh:
		return &errTokenRefused{status: http.StatusUnauthorized, obErr: OBError{Message: "the access token is not one the bank issued"}}
	case !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt):
		return &errTokenRefused{status: http.StatusUnauthorized, obErr: OBError{Message: "the access token expired"}}
	case t.Kind != tokenConsent:
		return &errTokenRefused{status: http.StatusForbidden, obErr: OBError{ErrorCode: OBReauthenticate, Path: "Authorization",
			Message: "a payment needs the access token of the account holder's authorisation of its consent (authorization code grant), not a client credentials token"}}
	case c == nil:
		return nil // the consent it names does not exist: refused as such
	case t.ConsentSeq != c.Seq:
		return &errTokenRefused{status: http.StatusForbidden, obErr: OBError{ErrorCode: OBResourceConsentMismatch, Path: "Data.ConsentId",
			Message: "the access token was issued for another consent"}}
	}
	return nil
}

// bearerToken is the token of an Authorization: Bearer header.
func bearerToken(r *http.Request) string {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(tok)
}

// authView is what the authorisation page shows.
type authView struct {
	Error                                  string
	ConsentID, Amount, Creditor, Reference string
	Params                                 url.Values
}

// authPage is the bank's authorisation page: what the account holder sees.
var authPage = template.Must(template.New("authorize").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><title>fakebank: authorise a payment</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:32rem;margin:2rem auto;padding:0 1rem}dt{font-weight:600}button{font-size:1rem;padding:.5rem 1.5rem;margin-right:1rem}</style>
</head><body>
<h1>fakebank</h1>
{{if .Error}}<p role="alert">This authorisation request cannot be served: {{.Error}}.</p>{{else}}
<p>A payment service asks you to authorise this payment from your account:</p>
<dl><dt>Amount</dt><dd id="amount">{{.Amount}}</dd><dt>To</dt><dd id="creditor">{{.Creditor}}</dd><dt>Reference</dt><dd id="reference">{{.Reference}}</dd><dt>Consent</dt><dd id="consent">{{.ConsentID}}</dd></dl>
<form method="post" action="/authorize">
{{range $k, $vs := .Params}}{{range $vs}}<input type="hidden" name="{{$k}}" value="{{.}}">{{end}}{{end}}
<button type="submit" name="decision" value="approve" id="approve">Approve</button>
<button type="submit" name="decision" value="reject" id="reject">Reject</button>
</form>{{end}}
</body></html>
`))
