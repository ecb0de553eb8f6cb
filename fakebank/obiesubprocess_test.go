package fakebank_test

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/fakebank/obietest"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// TestOBIEProcess runs `settle fakebank --profile obie` with a signing
// key to verify, its own signing key and mutual TLS, and walks a consent
// and its payment through it, every exchange validated against the
// document; a request signed wrongly creates nothing.
func TestOBIEProcess(t *testing.T) {
	t.Parallel()
	key, priv, pub := obietest.SigningKey(t)
	pki := obietest.NewPKI(t)
	bp := startBankProcess(t, "--profile", "obie", "--jws-public-key", pub, "--jws-signing-key", priv,
		"--tls-cert", pki.ServerCertFile, "--tls-key", pki.ServerKeyFile, "--client-ca", pki.CAFile,
		"--faults", `{"consent_delay_ms":0}`, "--settle-delay", "0")
	if !strings.HasPrefix(bp.url, "https://") {
		t.Fatalf("url %s", bp.url)
	}
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: pki.ClientTLS(true)}
	t.Cleanup(tr.CloseIdleConnections)
	v := obietest.NewValidator(t, tr)
	ob := &obBundle{url: bp.url, bankKey: &key.PublicKey, clock: settletest.NewManualClock(time.Now()), key: key, v: v,
		http: &http.Client{Transport: v}, clientTLS: pki.ClientTLS(true)}

	cid := ob.mustConsent(t, "proc-1", "20.00")
	a := ob.postPayment(t, "p-proc-1", paymentBody(cid, "proc-1", "20.00"))
	if a.status != http.StatusCreated || a.get(t, "Data", "Status") != "AcceptedCreditSettlementCompleted" {
		t.Fatalf("payment: %d %s", a.status, a.body)
	}
	c := ob.invalidClient(t)
	if a := ob.do(t, c, request{method: http.MethodPost, path: "/domestic-payment-consents", key: "c-bad", body: consentBody("proc-2", "1.00"), sig: "eyJhbGciOiJQUzI1NiJ9..c2ln"}); a.status != http.StatusBadRequest {
		t.Fatalf("a bad signature: %d %s", a.status, a.body)
	}
	stats := adminStats(t, &http.Client{Transport: tr}, bp.url)
	if stats["consents"] != 1 || stats["payments"] != 1 || stats["max_payments_per_reference"] != 1 {
		t.Errorf("/admin/stats %v", stats)
	}
}

// TestOBIEProcessHelpAndBadFlags: --help documents the profile and that
// without --jws-public-key nothing is verified; inconsistent flags are
// refused.
func TestOBIEProcessHelpAndBadFlags(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	out, err := exec.Command(bin, "fakebank", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, want := range []string{"--jws-public-key", "NOT verified", "/open-banking/v3.1/pisp", "consent_delay_ms", "--client-ca", "UK.OBIE.Header.Invalid"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--help has no %q", want)
		}
	}
	for _, args := range [][]string{
		{"--profile", "settle", "--jws-public-key", "x.pem"},
		{"--profile", "obie", "--jws-public-key", "/nonexistent.pem"},
		{"--profile", "obie", "--tls-cert", "c.pem"},
		{"--profile", "obie", "--client-ca", "ca.pem"},
	} {
		out, err := exec.Command(bin, append([]string{"fakebank", "--listen", "127.0.0.1:0"}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "settle fakebank:") {
			t.Errorf("%v: %v %s", args, err, out)
		}
	}
}
