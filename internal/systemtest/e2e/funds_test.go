package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/ledger"
)

// TestFundsCheckTwoWorkers: 40 payouts at once from one account whose
// balance covers 20, delivered to two worker processes with --funds-check:
// exactly 20 are accepted and paid, 20 refused with 422 insufficient-funds
// (a redelivery of one gets the same answer), and once all are confirmed the
// account's balance is zero, nothing is held, and the ledger passes the
// checker's rules.
func TestFundsCheckTwoWorkers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-process end-to-end test")
	}
	ctx := context.Background()
	db := dbtest.New(t)
	b := startBank(t, 7, fakebank.Faults{SettleDelayMS: 50})
	flags := append(workerFlags(b.url), "--funds-check")
	urls := []string{startWorker(t, "w0", db.URL, nil, flags...).URL(), startWorker(t, "w1", db.URL, []string{"SETTLE_FUNDS_CHECK=true"}, workerFlags(b.url)...).URL()}
	if _, err := ledger.Credit(ctx, db.Pool, ledger.CreditRequest{AccountID: "hot", AmountMinor: 20 * 1000, Currency: "EUR", Ref: "wire-1"}); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		status int
		typ    string
	}
	submit := func(url string, ev intake.Event) answer {
		body, _ := json.Marshal(ev)
		resp, err := httpClient.Post(url+"/v1/settlements", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Error(err)
			return answer{}
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var p struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(raw, &p)
		return answer{resp.StatusCode, p.Type}
	}
	evs := make([]intake.Event, 40)
	answers := make([]answer, 40)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range evs {
		evs[i] = intake.Event{SettlementID: fmt.Sprintf("pay-%02d", i), AccountID: "hot", AmountCents: 1000, Currency: "EUR", Beneficiary: "bene-1"}
		wg.Go(func() {
			<-start
			answers[i] = submit(urls[i%2], evs[i])
		})
	}
	close(start)
	wg.Wait()
	want := map[string]int64{}
	created, refused := 0, 0
	var refusedEv intake.Event
	for i, a := range answers {
		switch {
		case a.status == http.StatusCreated:
			created++
			want[evs[i].SettlementID] = evs[i].AmountCents
		case a.status == http.StatusUnprocessableEntity && strings.HasSuffix(a.typ, "insufficient-funds"):
			refused++
			refusedEv = evs[i]
		default:
			t.Errorf("%s: %+v", evs[i].SettlementID, a)
		}
	}
	if created != 20 || refused != 20 {
		t.Fatalf("%d accepted, %d refused; want 20 and 20", created, refused)
	}
	for _, url := range urls {
		if a := submit(url, refusedEv); a.status != http.StatusUnprocessableEntity || !strings.HasSuffix(a.typ, "insufficient-funds") {
			t.Fatalf("redelivery of refused %s: %+v", refusedEv.SettlementID, a)
		}
	}

	waitAllTerminal(t, db, 20)
	checkInvariants(t, db, b, want)
	bs, err := ledger.Balances(ctx, db.Pool, "hot")
	if err != nil || len(bs) != 1 || bs[0].Posted != 0 || bs[0].Held != 0 {
		t.Fatalf("balance of hot %+v, %v; want 0 posted, 0 held", bs, err)
	}
}
