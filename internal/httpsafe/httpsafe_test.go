package httpsafe

import (
	"testing"
	"time"
)

func TestHosts(t *testing.T) {
	t.Parallel()
	h, err := NewHosts([]string{"settle.example.com", "api.example.com:8443", "[2001:db8::1]"}, "10.0.0.5:8080")
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"localhost": true, "localhost:8080": true, "LocalHost.:1": true, "127.0.0.1:8080": true, "127.9.9.9": true,
		"[::1]:8080": true, "::1": true, "settle.example.com": true, "settle.example.com:443": true,
		"api.example.com:8443": true, "api.example.com": false, "api.example.com:443": false,
		"10.0.0.5:8080": true, "[2001:db8::1]:443": true, "10.0.0.6": false,
		"": false, "evil.example": false, "localhost.evil.example": false, "127.0.0.1.nip.io": false, "settle.example.com.evil": false,
	} {
		if got := h.Allowed(host); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", host, got, want)
		}
	}
	for _, bad := range []string{"https://settle.example.com", "settle.example.com/path", "user@host", ":443", " "} {
		if _, err := NewHosts([]string{bad}, ""); err == nil {
			t.Errorf("NewHosts(%q) took it", bad)
		}
	}
}

func TestIsJSON(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/json": true, "application/json; charset=utf-8": true, "APPLICATION/JSON": true,
		"application/x-ndjson": true, "application/problem+json": true, "": false, "text/plain": false,
		"text/plain;charset=UTF-8": false, "application/x-www-form-urlencoded": false, "multipart/form-data": false,
		"application/jsonx": false, "text/json+plain": false, "application/json;;": false,
	} {
		if got := IsJSON(ct); got != want {
			t.Errorf("IsJSON(%q) = %v, want %v", ct, got, want)
		}
	}
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	l := &Limiter{Every: 10 * time.Second, Now: func() time.Time { return now }}
	if ok, n := l.Allow("a"); !ok || n != 0 {
		t.Fatalf("first: %v %d", ok, n)
	}
	for range 5 {
		if ok, _ := l.Allow("a"); ok {
			t.Fatal("a second line within the interval")
		}
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another kind was held back")
	}
	now = now.Add(10 * time.Second)
	if ok, n := l.Allow("a"); !ok || n != 5 {
		t.Fatalf("after the interval: %v, %d left out, want 5", ok, n)
	}
}
