// Package fakebanktest starts a fakebank for a test: in process, on an
// httptest server, closed when the test ends. It is test support: nothing
// in settle's binaries may import it.
package fakebanktest

import (
	"net/http/httptest"
	"testing"

	"github.com/settle/settle/fakebank"
)

// NewServer starts a bank configured by opts on an httptest server and
// returns it with its base URL. The server and the bank are closed when the
// test ends.
func NewServer(t testing.TB, opts fakebank.Options) (*fakebank.Bank, string) {
	t.Helper()
	b, err := fakebank.New(opts)
	if err != nil {
		t.Fatalf("fakebanktest.NewServer: %v", err)
	}
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(func() {
		// Close the bank first: it ends requests sleeping on latency, so
		// that the server's Close, which waits for them, returns at once.
		if err := b.Close(); err != nil {
			t.Errorf("fakebanktest.NewServer: error closing bank: %v", err)
		}
		srv.Close()
	})
	return b, srv.URL
}

// NewTLSServer is NewServer over TLS with opts.TLS (its certificate, and
// ClientAuth/ClientCAs to require mutual TLS): the base URL is https.
func NewTLSServer(t testing.TB, opts fakebank.Options) (*fakebank.Bank, string) {
	t.Helper()
	if opts.TLS == nil {
		t.Fatal("fakebanktest.NewTLSServer: opts.TLS is nil")
	}
	b, err := fakebank.New(opts)
	if err != nil {
		t.Fatalf("fakebanktest.NewTLSServer: %v", err)
	}
	srv := httptest.NewUnstartedServer(b.Handler())
	srv.TLS = opts.TLS.Clone()
	srv.StartTLS()
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("fakebanktest.NewTLSServer: error closing bank: %v", err)
		}
		srv.Close()
	})
	return b, srv.URL
}
