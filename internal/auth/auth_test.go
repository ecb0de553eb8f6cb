package auth_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/settle/settle/internal/auth"
)

func TestRequireTokenAcceptsBasicPasswordForBrowsers(t *testing.T) {
	t.Parallel()
	h := auth.NewToken("tok").Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/riverui/", nil)
	req.SetBasicAuth("anyone", "tok")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("basic auth with the token as password = %d, want 200", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/riverui/", nil))
	if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic") {
		t.Errorf("no credentials = %d %q, want 401 with a Basic challenge", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tok := auth.NewToken("s3cret")
	for _, tc := range []struct {
		name, header string
		basicUser    string
		basicPass    string
		want         bool
	}{
		{"bearer", "Bearer s3cret", "", "", true},
		{"bearer lower case", "bearer s3cret", "", "", true},
		{"bearer wrong", "Bearer nope", "", "", false},
		{"bearer prefix of the token", "Bearer s3cre", "", "", false},
		{"other scheme", "Token s3cret", "", "", false},
		{"nothing", "", "", "", false},
		{"basic", "", "ada", "s3cret", true},
		{"basic wrong", "", "ada", "nope", false},
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		if tc.basicPass != "" {
			req.SetBasicAuth(tc.basicUser, tc.basicPass)
		}
		user, ok := tok.Check(req)
		if ok != tc.want || (ok && user != tc.basicUser) {
			t.Errorf("%s: Check = %q, %v; want %q, %v", tc.name, user, ok, tc.basicUser, tc.want)
		}
	}
	if _, ok := auth.NewToken("").Check(httptest.NewRequest(http.MethodGet, "/", nil)); !ok {
		t.Error("no token configured refuses a request")
	}
}
