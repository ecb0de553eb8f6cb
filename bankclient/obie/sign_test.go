package obie_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
)

// TestSignatureVerifies: the x-jws-signature of a POST is a detached JWS
// over the exact body bytes that verifies with our public key (RSASSA-PSS
// SHA-256 over base64url(header) "." base64url(body)), its header holds
// exactly the profile's claims, and it does not verify over another body.
func TestSignatureVerifies(t *testing.T) {
	t.Parallel()
	b, u := newTestBank(t)
	c := newClient(t, u, bankclient.Options{Retry: oneAttempt})
	before := time.Now().Unix()
	if _, err := c.CreateConsent(context.Background(), bankclient.ConsentKeyFor("sig-1"), request("sig-1")); err != nil {
		t.Fatal(err)
	}
	after := time.Now().Unix()
	reqs := b.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	sig := r.Header.Get("x-jws-signature")
	h, err := verifyJWSHeader(sig, r.Body, &testKey().PublicKey)
	if err != nil {
		t.Fatalf("the signature of %s: %v", r.Body, err)
	}
	tp, err := (&jose.JSONWebKey{Key: &testKey().PublicKey}).Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	iat, _ := h[obie.HeaderIAT].(float64)
	crit, _ := h["crit"].([]any)
	switch {
	case h["alg"] != "PS256":
		t.Errorf("alg %v", h["alg"])
	case h["kid"] != base64.RawURLEncoding.EncodeToString(tp):
		t.Errorf("kid %v, want the RFC 7638 thumbprint", h["kid"])
	case int64(iat) < before || int64(iat) > after:
		t.Errorf("iat %v (a JSON number), want between %d and %d", h[obie.HeaderIAT], before, after)
	case h[obie.HeaderISS] != "0015800001041RHAAY/HQuZPIt3ipkh33Uxytox1E":
		t.Errorf("iss %v", h[obie.HeaderISS])
	case h[obie.HeaderTAN] != obie.DefaultTAN:
		t.Errorf("tan %v", h[obie.HeaderTAN])
	case len(crit) != 3 || crit[0] != obie.HeaderIAT || crit[1] != obie.HeaderISS || crit[2] != obie.HeaderTAN:
		t.Errorf("crit %v", h["crit"])
	case len(h) != 6:
		t.Errorf("header %v: want only alg, kid, the three claims and crit", h)
	}
	other := append([]byte(nil), r.Body...)
	other[len(other)/2] ^= 1
	if _, err := verifyJWSHeader(sig, other, &testKey().PublicKey); err == nil {
		t.Error("the signature verifies over another body")
	}
	// go-jose reads it as a detached JWS too (its verifier refuses the
	// Open Banking critical claims it does not know, so the check above
	// is crypto/rsa's).
	parts := strings.Split(sig, ".")
	obj, err := jose.ParseDetached(sig, r.Body, []jose.SignatureAlgorithm{jose.PS256})
	if err != nil || len(parts) != 3 || obj.Signatures[0].Protected.KeyID != h["kid"] {
		t.Errorf("go-jose parses %v (%v)", obj, err)
	}
}

// TestConfiguredClaims: SETTLE_OBIE_ISS, _TAN and _KID end up in the
// header; missing ones take their defaults, except the issuer of a bank
// that is not on this machine.
func TestConfiguredClaims(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sigs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sigs = append(sigs, r.Header.Get("x-jws-signature"))
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{obie.EnvISS: "org/ssa", obie.EnvTAN: "anchor.example", obie.EnvKID: "kid-7", obie.EnvTokenKey: testTokenKey}
	cfg := obie.ConfigFromEnv(func(k string) string { return env[k] })
	c, err := obie.New(srv.URL, bankclient.Options{SigningKeyFile: keyFile(t), Retry: oneAttempt}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	body := request("claims-1")
	if _, err := c.CreateConsent(context.Background(), bankclient.ConsentKeyFor("claims-1"), body); !bankclient.IsAmbiguous(err) {
		t.Fatalf("a 500: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	obj, err := jose.ParseDetached(sigs[0], []byte("{}"), []jose.SignatureAlgorithm{jose.PS256})
	if err != nil {
		t.Fatal(err)
	}
	hd := obj.Signatures[0].Protected
	if hd.KeyID != "kid-7" || hd.ExtraHeaders[obie.HeaderISS] != "org/ssa" || hd.ExtraHeaders[obie.HeaderTAN] != "anchor.example" {
		t.Errorf("header %+v", hd)
	}
	if _, err := obie.New("https://bank.example", bankclient.Options{Token: "t", SigningKeyFile: keyFile(t)}, obie.Config{}); err == nil || !strings.Contains(err.Error(), obie.EnvISS) {
		t.Errorf("a remote bank without an issuer: %v, want an error naming %s", err, obie.EnvISS)
	}
}

// TestNoSigningKeyNoStart: without a usable signing key the connector
// refuses to start, naming the variable, and never prints the key.
func TestNoSigningKeyNoStart(t *testing.T) {
	t.Parallel()
	pkcs1 := writePEM(t, "pkcs1.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(testKey()))
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	small, err := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // G403: a key too small, to be refused
	if err != nil {
		t.Fatal(err)
	}
	smallDER, _ := x509.MarshalPKCS8PrivateKey(small)
	for _, tc := range []struct {
		name, file string
		ok         bool
	}{
		{"PKCS#8 RSA", keyFile(t), true},
		{"PKCS#1 RSA", pkcs1, true},
		{"no key", "", false},
		{"a missing file", t.TempDir() + "/none.pem", false},
		{"an EC key", writePEM(t, "ec.pem", "PRIVATE KEY", ecDER), false},
		{"a 1024-bit key", writePEM(t, "small.pem", "PRIVATE KEY", smallDER), false},
		{"a certificate", writePEM(t, "cert.pem", "CERTIFICATE", []byte{1, 2, 3}), false},
	} {
		_, err := obie.New("http://127.0.0.1:1", bankclient.Options{SigningKeyFile: tc.file}, obie.Config{TokenKey: testTokenKey})
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), bankclient.EnvSigningKeyFile)):
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, bankclient.EnvSigningKeyFile)
		case err != nil && strings.Contains(err.Error(), "BEGIN"):
			t.Errorf("%s: the error shows the key: %v", tc.name, err)
		}
	}
	c := obie.NewConnector(obie.Config{})
	if _, err := c.New("http://127.0.0.1:1", bankclient.Options{}); err == nil || !strings.Contains(err.Error(), bankclient.EnvSigningKeyFile) {
		t.Errorf("the connector without a key: %v", err)
	}
}
