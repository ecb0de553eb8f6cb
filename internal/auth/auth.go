// Package auth is the one check of settle's API token, shared by the
// intake API, /metrics, the River UI and the console. A request presents
// the token as "Authorization: Bearer <token>" or as the password of HTTP
// Basic credentials (which lets a browser in; the user name then names the
// operator).
//
// Tokens are compared in constant time, over their SHA-256 so the length
// does not leak either, and are never logged.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Token is a configured API token. Its zero value (and NewToken("")) is
// "no token": every request passes.
type Token struct {
	hash [sha256.Size]byte
	set  bool
}

// NewToken returns the token; an empty string disables the check.
func NewToken(token string) Token {
	if token == "" {
		return Token{}
	}
	return Token{hash: sha256.Sum256([]byte(token)), set: true}
}

// Set reports whether a token is configured.
func (t Token) Set() bool { return t.set }

// Check reports whether r may pass: no token is configured, or r presents
// it. user is the Basic user name when r used Basic credentials.
func (t Token) Check(r *http.Request) (user string, ok bool) {
	if !t.set {
		return "", true
	}
	user, got, presented := credentials(r)
	if !presented {
		return "", false
	}
	sum := sha256.Sum256([]byte(got))
	return user, subtle.ConstantTimeCompare(sum[:], t.hash[:]) == 1
}

// Require returns h guarded by the token: a request that does not present
// it gets 401 with a Basic challenge (so a browser asks for it) and a
// problem+json body. With no token it returns h itself.
func (t Token) Require(h http.Handler) http.Handler {
	if !t.set {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := t.Check(r); ok {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="settle", charset="UTF-8"`)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"type":"about:blank","title":"Unauthorized","status":401,"detail":"missing or bad API token"}` + "\n"))
	})
}

// credentials returns what a request presents: the Basic user name and
// password, or a Bearer token.
func credentials(r *http.Request) (user, token string, ok bool) {
	if u, pass, ok := r.BasicAuth(); ok {
		return u, pass, true
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", "", false
	}
	return "", strings.TrimSpace(tok), true
}
