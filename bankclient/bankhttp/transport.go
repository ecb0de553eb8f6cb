package bankhttp

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"

	"github.com/settle/settle/bankclient"
)

// NewTransport is the transport of a client of our own: a clone of
// http.DefaultTransport keeping up to 32 idle connections to the bank,
// TLS 1.2 at least, trusting the certificate authorities of the PEM bundle
// caFile, or the system's when it is empty.
func NewTransport(caFile string) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadCAs(caFile)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return tr, nil
}

// Transport is NewTransport(o.CAFile) keeping o.Conns idle connections to
// the bank when that is more than 32.
func Transport(o bankclient.Options) (*http.Transport, error) {
	tr, err := NewTransport(o.CAFile)
	if err != nil {
		return nil, err
	}
	tr.MaxIdleConnsPerHost = max(tr.MaxIdleConnsPerHost, o.Conns)
	tr.MaxIdleConns = max(tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	return tr, nil
}

// loadCAs reads a PEM bundle of certificate authorities.
func loadCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("error reading CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}
