package obie_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
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

// bankKey is the bank's signing key of the tests.
var bankKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// signAs signs body as an ASPSP does its answers.
func signAs(t *testing.T, key *rsa.PrivateKey, body string, crit ...string) string {
	t.Helper()
	if crit == nil {
		crit = []string{obie.HeaderIAT, obie.HeaderISS, obie.HeaderTAN}
	}
	opts := (&jose.SignerOptions{}).WithType("JOSE").
		WithHeader(jose.HeaderKey("kid"), "bank-1").WithHeader(obie.HeaderIAT, time.Now().Unix()).
		WithHeader(obie.HeaderISS, "bank-org").WithHeader(obie.HeaderTAN, "openbanking.org.uk").WithCritical(crit...)
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.PS256, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Sign([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	sig, err := obj.DetachedCompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// TestAnswerSignatures: with the bank's public key configured, an answer
// is acted on only when its x-jws-signature verifies over its body with
// that key; otherwise it is ambiguous, a refusal included.
func TestAnswerSignatures(t *testing.T) {
	t.Parallel()
	pubDER, err := x509.MarshalPKIXPublicKey(&bankKey().PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubFile := writePEM(t, "bank.pem", "PUBLIC KEY", pubDER)
	created := paymentJSON("AcceptedSettlementInProcess")
	refusal := obErr("UK.OBIE.Field.Invalid", "Data.Initiation.InstructedAmount")
	for _, tc := range []struct {
		name   string
		status int
		body   string
		sig    string
		check  func(error) bool
	}{
		{"a signed payment", 201, created, signAs(t, bankKey(), created), func(err error) bool { return err == nil }},
		{"a signed refusal", 400, refusal, signAs(t, bankKey(), refusal), bankclient.IsRejected},
		{"an unsigned payment", 201, created, "", func(err error) bool { return errors.Is(err, bankclient.ErrMalformedResponse) }},
		{"an unsigned refusal", 400, refusal, "", func(err error) bool { return bankclient.IsAmbiguous(err) && !bankclient.IsRejected(err) }},
		{"a signature over another body", 201, created, signAs(t, bankKey(), strings.Replace(created, "12.34", "12.35", 1)), func(err error) bool {
			return errors.Is(err, bankclient.ErrMalformedResponse)
		}},
		{"another key's signature", 201, created, signAs(t, testKey(), created), func(err error) bool { return errors.Is(err, bankclient.ErrMalformedResponse) }},
		{"crit without tan", 201, created, signAs(t, bankKey(), created, obie.HeaderIAT, obie.HeaderISS), func(err error) bool {
			return errors.Is(err, bankclient.ErrMalformedResponse)
		}},
		{"a 500 needs no signature", 500, ``, "", func(err error) bool {
			return bankclient.IsAmbiguous(err) && !errors.Is(err, bankclient.ErrMalformedResponse)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.sig != "" {
					w.Header().Set("x-jws-signature", tc.sig)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			c, err := obie.New(srv.URL, bankclient.Options{SigningKeyFile: keyFile(t), Retry: oneAttempt}, obie.Config{BankKeyFile: pubFile, TokenKey: testTokenKey})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Send(context.Background(), bankclient.KeyFor("r-1"), sentRequest()); !tc.check(err) {
				t.Errorf("%d %s signed %q: %v", tc.status, tc.body, tc.sig, err)
			}
		})
	}
	if _, err := obie.New("http://127.0.0.1:1", bankclient.Options{SigningKeyFile: keyFile(t)}, obie.Config{BankKeyFile: keyFile(t)}); err == nil || !strings.Contains(err.Error(), obie.EnvBankKeyFile) {
		t.Errorf("a private key as the bank's public key: %v", err)
	}
}
