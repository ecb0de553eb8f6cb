package obie_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/fakebank/obietest"
)

// TestMutualTLS: against the obie profile behind a TLS server that
// requires a client certificate of its CA (tls.RequireAndVerifyClientCert),
// the connector presents SETTLE_BANK_CERT_FILE/KEY_FILE and trusts
// SETTLE_BANK_CA_FILE, and a whole consent, payment and status round
// works; without a certificate, with another CA's, or not trusting the
// bank's CA, the handshake fails, the bank serves nothing, and the answer
// is ambiguous, never a refusal.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	p, other := obietest.NewPKI(t), obietest.NewPKI(t)
	bank, u := fakebanktest.NewTLSServer(t, fakebank.Options{Profile: "obie", TLS: p.ServerTLS(), JWSPublicKey: &testKey().PublicKey})
	if !strings.HasPrefix(u, "https://") {
		t.Fatalf("the bank is at %s", u)
	}
	ctx := context.Background()
	c := newClient(t, u, bankclient.Options{CAFile: p.CAFile, CertFile: p.ClientCertFile, KeyFile: p.ClientKeyFile, Retry: oneAttempt})
	req := request("mtls-1")
	con, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor("mtls-1"), req)
	if err != nil {
		t.Fatalf("CreateConsent with the client certificate: %v", err)
	}
	req.ConsentID = con.ID
	req.Grant = grant(t, c, &http.Client{Transport: &http.Transport{TLSClientConfig: p.ClientTLS(true)}}, con.ID)
	res, err := c.Send(ctx, bankclient.KeyFor("mtls-1"), req)
	if err != nil {
		t.Fatalf("Send with the client certificate: %v", err)
	}
	if got, err := c.StatusByID(ctx, res.Payment.ID); err != nil || got.ID != res.Payment.ID {
		t.Fatalf("StatusByID with the client certificate: %+v, %v", got, err)
	}
	served := bank.Traffic().Requests
	for name, opts := range map[string]bankclient.Options{
		"no client certificate":    {CAFile: p.CAFile, Retry: oneAttempt},
		"another CA's certificate": {CAFile: p.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile, Retry: oneAttempt},
		"a bank we do not trust":   {CAFile: other.CAFile, CertFile: p.ClientCertFile, KeyFile: p.ClientKeyFile, Retry: oneAttempt},
	} {
		c := newClient(t, u, opts)
		if _, err := c.StatusByID(ctx, res.Payment.ID); !bankclient.IsAmbiguous(err) || bankclient.IsRejected(err) {
			t.Errorf("%s: %v, want ambiguous", name, err)
		}
		if _, err := c.Send(ctx, bankclient.KeyFor("mtls-1"), req); !bankclient.IsAmbiguous(err) || bankclient.IsRejected(err) {
			t.Errorf("%s, a payment: %v, want ambiguous", name, err)
		}
	}
	if n := bank.Traffic().Requests; n != served {
		t.Errorf("the bank served %d requests without a good certificate", n-served)
	}
	for name, opts := range map[string]bankclient.Options{
		"a certificate without its key": {CertFile: p.ClientCertFile, SigningKeyFile: keyFile(t), Token: "t"},
		"a key that is no certificate":  {CertFile: p.ClientKeyFile, KeyFile: p.ClientKeyFile, SigningKeyFile: keyFile(t), Token: "t"},
		"CAFile with HTTPClient":        {CAFile: p.CAFile, HTTPClient: http.DefaultClient, SigningKeyFile: keyFile(t), Token: "t"},
	} {
		if _, err := obie.New(u, opts, obie.Config{}); err == nil {
			t.Errorf("%s: New accepts it", name)
		}
	}
	if _, err := obie.New(strings.Replace(u, "https", "http", 1), bankclient.Options{CertFile: p.ClientCertFile, KeyFile: p.ClientKeyFile, SigningKeyFile: keyFile(t)}, obie.Config{}); err == nil {
		t.Error("a client certificate over plain http is accepted")
	}
}
