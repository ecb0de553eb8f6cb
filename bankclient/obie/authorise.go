package obie

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
)

// The account holder's authorisation (payment initiation profile, Grant
// Types: "PISPs must use an authorization code grant using a redirect ...
// to obtain a token to make POST requests to the payment-order resource
// endpoints"): the connector builds the link the account holder opens at
// their bank (an authorization request with PKCE, RFC 7636 S256, naming
// the consent as openbanking_intent_id), exchanges the code the redirect
// brings back at the bank's token endpoint, refreshes the access token
// when it expires, and sends the payment with it.
//
// The tokens never leave the connector in clear: a Grant is sealed with
// AES-256-GCM (crypto/cipher) under a key derived from the token key
// (SETTLE_TOKEN_KEY or SETTLE_TOKEN_KEY_FILE), a fresh random nonce each
// time, and the consent id as additional data, so a sealed grant moved to
// another consent's row does not open. The PKCE verifier is derived from
// the token key too (HMAC-SHA256 of the consent id and the state), so
// nothing secret is stored for it: only whoever holds the key can finish
// an authorisation settle started.

// SealPrefix starts every sealed grant (the format's version).
const SealPrefix = "v1."

// TokenKeyLen is the length of the token key: 32 bytes (AES-256).
const TokenKeyLen = 32

// RefreshSkew is how long before its expiry an access token is refreshed.
const RefreshSkew = time.Minute

// ErrNoTokenKey is matched by New's refusal to start without a token key.
var ErrNoTokenKey = errors.New("the obie connector needs a token key to keep the account holders' tokens encrypted: set " +
	EnvTokenKey + " (32 random bytes, base64; e.g. `openssl rand -base64 32`) or " + EnvTokenKeyFile + " (a file holding it)")

// ErrGrantSealed is matched when a sealed grant does not open with the
// token key (another key, another consent's grant, or tampered with).
var ErrGrantSealed = errors.New("the sealed grant does not open with the token key")

// readTokenKey reads the token key from cfg: base64 (standard or URL, with
// or without padding) of 32 bytes, given inline or in a file.
func readTokenKey(cfg Config) ([]byte, error) {
	raw, from := cfg.TokenKey, EnvTokenKey
	if raw == "" && cfg.TokenKeyFile != "" {
		data, err := os.ReadFile(cfg.TokenKeyFile)
		if err != nil {
			return nil, fmt.Errorf("error reading the token key (%s): %w", EnvTokenKeyFile, err)
		}
		raw, from = string(data), EnvTokenKeyFile
	}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, ErrNoTokenKey
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(raw); err == nil && len(k) == TokenKeyLen {
			return k, nil
		}
	}
	return nil, fmt.Errorf("error reading the token key (%s): it must be the base64 of %d random bytes", from, TokenKeyLen)
}

// keys are the keys derived from the token key, one per use.
type keys struct {
	seal cipher.AEAD
	pkce []byte
}

func deriveKeys(tokenKey []byte) (*keys, error) {
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, tokenKey)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	block, err := aes.NewCipher(derive("settle obie grant seal v1"))
	if err != nil {
		return nil, fmt.Errorf("error making the grant cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("error making the grant cipher: %w", err)
	}
	return &keys{seal: aead, pkce: derive("settle obie pkce v1")}, nil
}

// verifier is the PKCE code verifier of an authorisation of consentID
// under state: 43 characters of base64url (RFC 7636 section 4.1).
func (k *keys) verifier(consentID, state string) string {
	m := hmac.New(sha256.New, k.pkce)
	m.Write([]byte(consentID + "\x00" + state))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// challenge is the S256 code challenge of a verifier.
func challenge(verifier string) string {
	h := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// tokens are what a sealed grant holds.
type tokens struct {
	Access  string `json:"a"`
	Refresh string `json:"r,omitempty"`
}

func grantAAD(consentID string) []byte { return []byte("settle obie grant\x00" + consentID) }

// sealGrant seals t for consentID.
func (k *keys) sealGrant(consentID string, t tokens, expires time.Time) (bankclient.Grant, error) {
	plain, err := json.Marshal(t)
	if err != nil {
		return bankclient.Grant{}, fmt.Errorf("error sealing the grant: %w", err)
	}
	nonce := make([]byte, k.seal.NonceSize())
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	sealed := k.seal.Seal(nonce, nonce, plain, grantAAD(consentID))
	return bankclient.Grant{Sealed: SealPrefix + base64.RawURLEncoding.EncodeToString(sealed), ExpiresAt: expires, Refreshable: t.Refresh != ""}, nil
}

// openGrant opens a sealed grant of consentID.
func (k *keys) openGrant(consentID, sealed string) (tokens, error) {
	enc, ok := strings.CutPrefix(sealed, SealPrefix)
	if !ok {
		return tokens{}, ErrGrantSealed
	}
	data, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(data) < k.seal.NonceSize() {
		return tokens{}, ErrGrantSealed
	}
	plain, err := k.seal.Open(nil, data[:k.seal.NonceSize()], data[k.seal.NonceSize():], grantAAD(consentID))
	if err != nil {
		return tokens{}, ErrGrantSealed
	}
	var t tokens
	if err := json.Unmarshal(plain, &t); err != nil || t.Access == "" {
		return tokens{}, ErrGrantSealed
	}
	return t, nil
}

var _ bankclient.Authoriser = (*Client)(nil)

// AuthorisationURL implements bankclient.Authoriser: the bank's
// authorization endpoint with response_type=code, client_id,
// redirect_uri, scope "openid payments", state, the PKCE S256 challenge and
// openbanking_intent_id.
func (c *Client) AuthorisationURL(consentID, state, redirectURI string) (string, error) {
	if consentID == "" || state == "" || redirectURI == "" {
		return "", errors.New("error building the authorisation link: consent, state and redirect URI are required")
	}
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {c.clientID},
		"redirect_uri":          {redirectURI},
		"scope":                 {"openid payments"},
		"state":                 {state},
		"code_challenge":        {challenge(c.keys.verifier(consentID, state))},
		"code_challenge_method": {"S256"},
		"openbanking_intent_id": {consentID},
	}
	sep := "?"
	if strings.Contains(c.authorizeURL, "?") {
		sep = "&"
	}
	return c.authorizeURL + sep + q.Encode(), nil
}

// ExchangeCode implements bankclient.Authoriser: POST the token endpoint
// with grant_type=authorization_code and the PKCE verifier.
func (c *Client) ExchangeCode(ctx context.Context, consentID, state, code, redirectURI string) (bankclient.Grant, error) {
	if consentID == "" || code == "" {
		return bankclient.Grant{}, errors.New("error exchanging the authorisation code: consent and code are required")
	}
	t, exp, err := c.tokenRequest(ctx, bankclient.OpToken, url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {redirectURI},
		"client_id":     {c.clientID},
		"code_verifier": {c.keys.verifier(consentID, state)},
	})
	if err != nil {
		return bankclient.Grant{}, fmt.Errorf("error exchanging the authorisation code of consent %s: %w", bankclient.Sanitize(consentID), err)
	}
	return c.keys.sealGrant(consentID, t, exp)
}

// RefreshGrant implements bankclient.Authoriser: POST the token endpoint
// with grant_type=refresh_token; the refresh token is kept when the bank
// issues no new one.
func (c *Client) RefreshGrant(ctx context.Context, consentID string, g bankclient.Grant) (bankclient.Grant, error) {
	old, err := c.keys.openGrant(consentID, g.Sealed)
	if err != nil {
		return bankclient.Grant{}, fmt.Errorf("error refreshing the grant of consent %s: %w", bankclient.Sanitize(consentID), err)
	}
	if old.Refresh == "" {
		return bankclient.Grant{}, fmt.Errorf("error refreshing the grant of consent %s: %w", bankclient.Sanitize(consentID),
			&bankclient.RejectedError{Code: "no_refresh_token", Reason: "the bank issued no refresh token: the account holder must authorise again"})
	}
	t, exp, err := c.tokenRequest(ctx, bankclient.OpTokenRefresh, url.Values{
		"grant_type":    {"refresh_token"},
		"refresh_token": {old.Refresh},
		"client_id":     {c.clientID},
	})
	if err != nil {
		return bankclient.Grant{}, fmt.Errorf("error refreshing the grant of consent %s: %w", bankclient.Sanitize(consentID), err)
	}
	if t.Refresh == "" {
		t.Refresh = old.Refresh
	}
	return c.keys.sealGrant(consentID, t, exp)
}

// bearer is the Authorization header of a payment request: the access
// token of its grant, else the configured token.
func (c *Client) bearer(req bankclient.PaymentRequest) (bankclient.Secret, error) {
	if req.Grant == "" {
		return c.auth, nil
	}
	t, err := c.keys.openGrant(req.ConsentID, req.Grant)
	if err != nil {
		return "", err
	}
	return bankclient.Secret("Bearer " + t.Access), nil
}

// tokenAnswer is the token endpoint's answer (RFC 6749 sections 5.1, 5.2).
type tokenAnswer struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Error        string `json:"error"`
	Description  string `json:"error_description"`
}

// tokenRequest posts form to the token endpoint once (a code is spent by
// its first use: repeating it could only be refused) and reads the tokens
// and the access token's expiry.
func (c *Client) tokenRequest(ctx context.Context, op string, form url.Values) (tokens, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	outcome := bankclient.OutcomeAmbiguous
	defer func() {
		if c.observe != nil {
			c.observe(op, outcome, time.Since(start))
		}
	}()
	if c.limiter != nil {
		if err := c.limiter.Wait(ctx); err != nil {
			return tokens{}, time.Time{}, &bankclient.AmbiguousError{Op: op, Err: fmt.Errorf("error waiting for the bank rate limit: %w", err)}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return tokens{}, time.Time{}, fmt.Errorf("error building the token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "settle-bankclient-obie/1")
	res, err := c.hc.Do(req)
	if err != nil {
		return tokens{}, time.Time{}, &bankclient.AmbiguousError{Op: op, Attempts: 1, Err: err}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, c.maxBody))
	if err != nil {
		return tokens{}, time.Time{}, &bankclient.AmbiguousError{Op: op, StatusCode: res.StatusCode, Attempts: 1, Err: fmt.Errorf("error reading the token answer: %w", err)}
	}
	var a tokenAnswer
	jerr := json.NewDecoder(bytes.NewReader(body)).Decode(&a)
	switch {
	case res.StatusCode == http.StatusOK && jerr == nil && a.AccessToken != "" && strings.EqualFold(a.TokenType, "bearer"):
		outcome = bankclient.OutcomeAccepted
		var exp time.Time
		if a.ExpiresIn > 0 {
			exp = c.now().Add(time.Duration(a.ExpiresIn) * time.Second)
		}
		if err := bankhttp.CheckToken(a.AccessToken, "the access token"); err != nil {
			outcome = bankclient.OutcomeAmbiguous
			return tokens{}, time.Time{}, &bankclient.AmbiguousError{Op: op, StatusCode: res.StatusCode, Attempts: 1, Err: fmt.Errorf("%w: %w", bankclient.ErrMalformedResponse, err)}
		}
		return tokens{Access: a.AccessToken, Refresh: a.RefreshToken}, exp, nil
	case (res.StatusCode == http.StatusBadRequest || res.StatusCode == http.StatusUnauthorized) && jerr == nil && a.Error != "":
		// RFC 6749 section 5.2: the request was refused; a code it named
		// is spent or void either way.
		outcome = bankclient.OutcomeRejected
		return tokens{}, time.Time{}, &bankclient.RejectedError{StatusCode: res.StatusCode, Code: bankclient.Sanitize(a.Error), Reason: bankclient.Sanitize(a.Description)}
	}
	return tokens{}, time.Time{}, &bankclient.AmbiguousError{Op: op, StatusCode: res.StatusCode, Attempts: 1,
		Err: fmt.Errorf("the token endpoint answered %d", res.StatusCode)}
}
