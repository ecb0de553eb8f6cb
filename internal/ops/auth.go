package ops

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// RequireToken returns h guarded by token: a request must carry
// "Authorization: Bearer <token>", or HTTP basic credentials whose password
// is the token (any user name), which lets a browser open the River UI. A
// request without them gets 401 with a Basic challenge. An empty token
// disables the check and returns h itself.
//
// Tokens are compared in constant time (over their SHA-256, so the length
// of the token does not leak either) and never logged.
func RequireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got, ok := presented(r); ok {
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
				h.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="settle", charset="UTF-8"`)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"type":"about:blank","title":"Unauthorized","status":401,"detail":"missing or bad API token"}` + "\n"))
	})
}

// presented returns the token a request carries, from a Bearer
// Authorization header or the password of basic credentials.
func presented(r *http.Request) (string, bool) {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass, true
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}
