package settletest

import (
	"bytes"
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
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
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

// RoundTripBodies sends r with next, showing both ends of the exchange to
// check with their bodies read whole (and put back for whoever reads them
// next): check sees r and its body before it leaves, and returns what sees
// the answer and its body once it comes (nil: nothing does). It is the
// RoundTrip of a transport that validates what passes through it.
func RoundTripBodies(next http.RoundTripper, r *http.Request, check func(r *http.Request, body []byte) func(resp *http.Response, body []byte)) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		_ = r.Body.Close()
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	answer := check(r, body)
	resp, err := next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	if answer != nil {
		answer(resp, data)
	}
	return resp, nil
}
