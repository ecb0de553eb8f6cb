package settletest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Do sends one HTTP request with the given Authorization header (none when
// empty) and body (none when empty), and returns the status and body. It
// fails the test when no answer comes.
func Do(t testing.TB, method, url, auth, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// Get is Do for a GET without a body.
func Get(t testing.TB, url, auth string) (int, string) {
	t.Helper()
	return Do(t, http.MethodGet, url, auth, "")
}
