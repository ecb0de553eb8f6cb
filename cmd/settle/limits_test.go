package main

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// TestWorkerBankTransportAndCeilings (issue 32, items 4 and 10): a worker
// refuses to start against a bank that is not on this machine over plain
// http, unless --bank-insecure-http (here SETTLE_BANK_INSECURE_HTTP) says
// so, and then says it loudly; SETTLE_MAX_AMOUNT sets the operator's
// ceilings, which intake enforces with 422 naming amount_cents.
func TestWorkerBankTransportAndCeilings(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	db := dbtest.New(t)
	const remote = "http://bank.example:8081"

	cmd := exec.Command(bin, "worker", "--listen", "127.0.0.1:0", "--bank-url", remote)
	cmd.Env = append(envWithout("DATABASE_URL", "SETTLE_"), "DATABASE_URL="+db.URL)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitError || !strings.Contains(string(out), "plain http") || !strings.Contains(string(out), "--bank-insecure-http") {
		t.Fatalf("a worker with a plain-http remote bank: %v\n%s\nwant exit %d naming --bank-insecure-http", err, out, exitError)
	}

	w := workertest.StartT(t, "worker", db.URL, []string{"SETTLE_BANK_INSECURE_HTTP=true", "SETTLE_MAX_AMOUNT=EUR=500,JPY=70", "SETTLE_API_TOKEN=tok-0123456789abcdef"},
		"--listen", "127.0.0.1:0", "--bank-url", remote, "--log-format", "json")
	log, err := os.ReadFile(w.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "INSECURE") || !strings.Contains(string(log), "bank.example") {
		t.Errorf("no loud line about plain http in the log:\n%s", log)
	}
	for _, tc := range []struct {
		id, currency string
		amount       int
		status       int
	}{
		{"c-eur-500", "EUR", 500, 201}, {"c-eur-501", "EUR", 501, 422},
		{"c-jpy-71", "JPY", 71, 422}, {"c-usd-501", "USD", 501, 201},
	} {
		body := `{"settlement_id":"` + tc.id + `","account_id":"a","amount_cents":` + strconv.Itoa(tc.amount) + `,"currency":"` + tc.currency + `","beneficiary":"b"}`
		code, resp := settletest.Do(t, http.MethodPost, w.URL()+"/v1/settlements", "Bearer tok-0123456789abcdef", body)
		if code != tc.status || (tc.status == 422 && !strings.Contains(resp, "amount_cents")) {
			t.Errorf("%s: %d %s, want %d", tc.id, code, resp, tc.status)
		}
	}
	if err := w.Stop(30 * time.Second); err != nil {
		t.Errorf("worker did not stop: %v", err)
	}
}
