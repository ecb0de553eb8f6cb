package fakebank_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	bintest.Cleanup()
	os.Exit(code)
}

// t0 is where every manual clock of these tests starts.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// testBundle is a bank on an httptest server with a manual clock and a
// client that never reuses connections (net/http would otherwise retry a
// request carrying an Idempotency-Key by itself after a dropped answer).
type testBundle struct {
	bank  *fakebank.Bank
	url   string
	clock *settletest.ManualClock
	http  *http.Client
}

func setup(t *testing.T, opts fakebank.Options) *testBundle {
	t.Helper()
	clock := settletest.NewManualClock(t0)
	if opts.Now == nil {
		opts.Now = clock.Now
	}
	bank, url := fakebanktest.NewServer(t, opts)
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &testBundle{bank: bank, url: url, clock: clock, http: &http.Client{Transport: tr}}
}

// answer is one answer of the bank; dropped when the connection closed
// without one.
type answer struct {
	status   int
	replayed bool
	body     []byte
	dropped  bool
}

func (a answer) payment(t *testing.T) bankclient.Payment {
	t.Helper()
	var p bankclient.Payment
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("error decoding payment %q: %v", a.body, err)
	}
	return p
}

func (a answer) errorCode(t *testing.T) string {
	t.Helper()
	var e settle.ErrorBody
	if err := json.Unmarshal(a.body, &e); err != nil {
		t.Fatalf("error decoding error body %q: %v", a.body, err)
	}
	return e.Error
}

func (tb *testBundle) do(t *testing.T, method, path, key string, body any) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, tb.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := tb.http.Do(req)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return answer{dropped: true}
		}
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed") == "true", body: data}
}

func (tb *testBundle) post(t *testing.T, key string, req bankclient.PaymentRequest) answer {
	t.Helper()
	return tb.do(t, http.MethodPost, "/v1/payments", key, req)
}

func (tb *testBundle) byKey(t *testing.T, key string) answer {
	t.Helper()
	return tb.do(t, http.MethodGet, "/v1/payments/by-key/"+key, "", nil)
}

func (tb *testBundle) mustByKey(t *testing.T, key string) bankclient.Payment {
	t.Helper()
	a := tb.byKey(t, key)
	if a.status != http.StatusOK {
		t.Fatalf("by-key %s: want 200, got %d %s", key, a.status, a.body)
	}
	return a.payment(t)
}

func (tb *testBundle) statement(t *testing.T) []bankclient.Payment {
	t.Helper()
	a := tb.do(t, http.MethodGet, "/v1/statement?limit=1000", "", nil)
	if a.status != http.StatusOK {
		t.Fatalf("statement: %d %s", a.status, a.body)
	}
	var pg bankclient.StatementPage
	if err := json.Unmarshal(a.body, &pg); err != nil {
		t.Fatal(err)
	}
	return pg.Payments
}

func (tb *testBundle) setFaults(t *testing.T, f fakebank.Faults) {
	t.Helper()
	if err := tb.bank.SetFaults(f); err != nil {
		t.Fatal(err)
	}
}

// paymentReq returns a valid request for reference ref.
func paymentReq(ref string) bankclient.PaymentRequest {
	return bankclient.PaymentRequest{
		AmountCents:     2500,
		Currency:        "EUR",
		DebtorAccount:   "debtor-1",
		CreditorAccount: "creditor-1",
		Reference:       ref,
	}
}
