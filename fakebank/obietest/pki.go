package obietest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// signingKey is the TPP's throwaway signing key, made once per test
// binary (an RSA key takes a while to make).
var signingKey = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

// SigningKey returns a throwaway RSA key for PS256 message signing (the
// same one for the whole test binary) and the PEM files of its private
// and public halves in a temporary directory of t.
func SigningKey(t testing.TB) (key *rsa.PrivateKey, privateFile, publicFile string) {
	t.Helper()
	key, err := signingKey()
	if err != nil {
		t.Fatalf("obietest: making a signing key: %v", err)
	}
	dir := t.TempDir()
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	privateFile = writePEM(t, filepath.Join(dir, "signing.key"), "PRIVATE KEY", mustPKCS8(t, key))
	publicFile = writePEM(t, filepath.Join(dir, "signing.pub"), "PUBLIC KEY", pub)
	return key, privateFile, publicFile
}

// PKI is a throwaway certificate authority with a server certificate (for
// 127.0.0.1, ::1 and localhost) and a client certificate it issued, for
// mutual TLS in a test. Its files are PEM in a temporary directory.
type PKI struct {
	CAPool *x509.CertPool
	Server tls.Certificate
	Client tls.Certificate

	CAFile, ServerCertFile, ServerKeyFile, ClientCertFile, ClientKeyFile string
}

// ServerTLS is the bank's side of mutual TLS: its certificate, and a
// client certificate from the CA required.
func (p *PKI) ServerTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.Server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.CAPool,
		MinVersion:   tls.VersionTLS12,
	}
}

// ClientTLS is the TPP's side: the CA trusted, and, with cert, the
// client certificate presented.
func (p *PKI) ClientTLS(cert bool) *tls.Config {
	c := &tls.Config{RootCAs: p.CAPool, MinVersion: tls.VersionTLS12}
	if cert {
		c.Certificates = []tls.Certificate{p.Client}
	}
	return c
}

// NewPKI makes a throwaway CA and the two certificates it issues.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey := newECKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "settle test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{CAPool: x509.NewCertPool()}
	p.CAPool.AddCert(ca)
	p.CAFile = writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER)
	issue := func(serial int64, name string, usage x509.ExtKeyUsage, server bool) (tls.Certificate, string, string) {
		key := newECKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if server {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile := writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
		keyFile := writePEM(t, filepath.Join(dir, name+".key"), "PRIVATE KEY", keyDER)
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return cert, certFile, keyFile
	}
	p.Server, p.ServerCertFile, p.ServerKeyFile = issue(2, "server", x509.ExtKeyUsageServerAuth, true)
	p.Client, p.ClientCertFile, p.ClientKeyFile = issue(3, "client", x509.ExtKeyUsageClientAuth, false)
	return p
}

func newECKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustPKCS8(t testing.TB, key any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t testing.TB, path, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
