package settle_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
)

// TestPlainHTTPToARemoteBank (issue 32, item 10): no connector talks plain
// http to a bank that is not on this machine (anyone on the path could
// answer "settled"), with or without a credential, unless the operator
// says so (--bank-insecure-http), and then only without a credential and
// with a loud line in the log. Loopback stays plain-http friendly (the
// fakebank), https is always fine.
func TestPlainHTTPToARemoteBank(t *testing.T) {
	t.Parallel()
	const token = "tok_0123456789abcdef"
	connectors := bankclient.Connectors{settle.Connector, stripe.Connector, obie.NewConnector(obie.Config{})}
	for _, name := range connectors.Names() {
		conn, err := connectors.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, url := range []string{"http://bank.example", "http://bank.example:8081/api", "http://10.1.2.3:8081", "http://[2001:db8::1]:80", "http://localhost.example", "http://127.0.0.1.nip.example"} {
			for _, opts := range []bankclient.Options{{}, {Token: token}, {Token: token, InsecureHTTP: true}} {
				_, err := conn.New(url, opts)
				if !errors.Is(err, bankhttp.ErrPlainHTTP) {
					t.Errorf("%s: New(%s, token %t, insecure %t) = %v, want %v", name, url, opts.Token != "", opts.InsecureHTTP, err, bankhttp.ErrPlainHTTP)
				} else if strings.Contains(err.Error(), token) {
					t.Errorf("%s: the credential is in the error: %v", name, err)
				}
			}
		}
	}
	// settle's protocol without a credential: only when told, and loudly.
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	if _, err := settle.New("http://bank.example:8081", bankclient.Options{InsecureHTTP: true, Logger: logger}); err != nil {
		t.Fatalf("--bank-insecure-http without a credential: %v", err)
	}
	if line := logs.String(); !strings.Contains(line, "level=WARN") || !strings.Contains(line, "INSECURE") || !strings.Contains(line, "bank.example") {
		t.Errorf("no loud line: %q", line)
	}
	for _, url := range []string{"http://127.0.0.1:8081", "http://localhost:8081", "http://[::1]:8081", "https://bank.example"} {
		logs.Reset()
		if _, err := settle.New(url, bankclient.Options{Logger: logger, InsecureHTTP: true}); err != nil {
			t.Errorf("New(%s): %v", url, err)
		}
		if logs.Len() != 0 {
			t.Errorf("New(%s) logged %q", url, logs.String())
		}
	}
}
