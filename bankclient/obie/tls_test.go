package obie_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
)

// pki is a throwaway certificate authority with a server certificate for
// 127.0.0.1 and a client certificate, as PEM files.
type pki struct {
	pool                      *x509.CertPool
	server                    tls.Certificate
	caFile, certFile, keyFile string
	otherCert, otherKey       string // a client certificate of another CA
}

func newPKI(t *testing.T) pki {
	t.Helper()
	ca, caKey, caDER := issue(t, "settle test CA", nil, nil, true, nil)
	srvTmpl := []net.IP{net.ParseIP("127.0.0.1")}
	_, srvKey, srvDER := issue(t, "bank.test", ca, caKey, false, srvTmpl)
	_, cliKey, cliDER := issue(t, "settle client", ca, caKey, false, nil)
	other, otherKey, _ := issue(t, "another CA", nil, nil, true, nil)
	_, oKey, oDER := issue(t, "settle client of another CA", other, otherKey, false, nil)
	p := pki{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.caFile = writePEM(t, "ca.pem", "CERTIFICATE", caDER)
	p.certFile = writePEM(t, "client.pem", "CERTIFICATE", cliDER)
	p.keyFile = writePEM(t, "client-key.pem", "PRIVATE KEY", pkcs8(t, cliKey))
	p.otherCert = writePEM(t, "other.pem", "CERTIFICATE", oDER)
	p.otherKey = writePEM(t, "other-key.pem", "PRIVATE KEY", pkcs8(t, oKey))
	p.server = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
	return p
}

func pkcs8(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// issue makes a certificate for cn signed by parent (self-signed when nil).
func issue(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool, ips []net.IP) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        isCA, BasicConstraintsValid: true, IPAddresses: ips,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, der
}

// TestMutualTLS: against a bank that requires a client certificate of its
// CA, the connector presents SETTLE_BANK_CERT_FILE/KEY_FILE and trusts
// SETTLE_BANK_CA_FILE; without a certificate, or with another CA's, the
// handshake fails, the bank never sees the request, and the answer is
// ambiguous, never a refusal.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	var reached atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if len(r.TLS.PeerCertificates) == 0 {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-fapi-interaction-id", r.Header.Get("x-fapi-interaction-id"))
		_, _ = w.Write([]byte(`{"Data":{"DomesticPaymentId":"pay-1","ConsentId":"c-1","Status":"AcceptedCreditSettlementCompleted","CreationDateTime":"2026-01-02T03:04:05+00:00","StatusUpdateDateTime":"2026-01-02T03:04:05+00:00","Initiation":{"InstructionIdentification":"r-1","EndToEndIdentification":"r-1","InstructedAmount":{"Amount":"12.34","Currency":"GBP"},"CreditorAccount":{"SchemeName":"UK.OBIE.SortCodeAccountNumber","Identification":"08080021325698","Name":"ACME Ltd"}}},"Links":{"Self":"https://bank.test/x"},"Meta":{}}`))
	}))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool, Certificates: []tls.Certificate{p.server}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx := context.Background()

	c := newClient(t, srv.URL, bankclient.Options{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile, Retry: oneAttempt})
	got, err := c.StatusByID(ctx, "pay-1")
	if err != nil || got.ID != "pay-1" || got.Status != bankclient.StatusSettled || got.AmountCents != 1234 {
		t.Fatalf("with the client certificate: %+v, %v", got, err)
	}
	if reached.Load() != 1 {
		t.Fatalf("the bank saw %d requests, want 1", reached.Load())
	}
	for name, opts := range map[string]bankclient.Options{
		"no client certificate":       {CAFile: p.caFile, Retry: oneAttempt},
		"another CA's certificate":    {CAFile: p.caFile, CertFile: p.otherCert, KeyFile: p.otherKey, Retry: oneAttempt},
		"a bank we do not trust (CA)": {CertFile: p.certFile, KeyFile: p.keyFile, Retry: oneAttempt},
	} {
		c := newClient(t, srv.URL, opts)
		_, err := c.StatusByID(ctx, "pay-1")
		if !bankclient.IsAmbiguous(err) || bankclient.IsRejected(err) {
			t.Errorf("%s: %v, want ambiguous", name, err)
		}
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("the bank saw %d requests, want only the one with the certificate", n)
	}
	for name, opts := range map[string]bankclient.Options{
		"a certificate without its key": {CertFile: p.certFile, SigningKeyFile: keyFile(t), Token: "t"},
		"a key that is no certificate":  {CertFile: p.keyFile, KeyFile: p.keyFile, SigningKeyFile: keyFile(t), Token: "t"},
		"CAFile with HTTPClient":        {CAFile: p.caFile, HTTPClient: http.DefaultClient, SigningKeyFile: keyFile(t), Token: "t"},
	} {
		if _, err := obie.New(srv.URL, opts, obie.Config{}); err == nil {
			t.Errorf("%s: New accepts it", name)
		}
	}
	if _, err := obie.New(strings.Replace(srv.URL, "https", "http", 1), bankclient.Options{CertFile: p.certFile, KeyFile: p.keyFile, SigningKeyFile: keyFile(t)}, obie.Config{}); err == nil {
		t.Error("a client certificate over plain http is accepted")
	}
}
