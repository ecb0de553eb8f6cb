package intake_test

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
	"github.com/settle/settle/intake"
)

// TestConnectorAmountLimits (issue 32, item 4): every connector declares the
// largest amount its bank takes, and intake refuses more with 422 naming
// amount_cents, storing nothing: exactly the limit is taken, one minor
// unit more is not, in every currency whatever its exponent.
func TestConnectorAmountLimits(t *testing.T) {
	t.Parallel()
	const sortCode = "SortCodeAccountNumber:08080021325698:ACME Ltd"
	for _, tc := range []struct {
		conn                  bankclient.Connector
		currency, beneficiary string
		limit                 int64
	}{
		// settle's protocol: 2^53-1, the largest integer every JSON
		// receiver reads exactly (RFC 7493, I-JSON).
		{settle.Connector, "USD", "b", 1<<53 - 1},
		{settle.Connector, "JPY", "b", 1<<53 - 1},
		{settle.Connector, "KWD", "b", 1<<53 - 1},
		// Stripe: "up to eight digits" in minor units, whatever the currency.
		{stripe.Connector, "USD", "ba_1Limit", 99_999_999},
		{stripe.Connector, "JPY", "ba_1Limit", 99_999_999},
		{stripe.Connector, "KRW", "ba_1Limit", 99_999_999},
		// Faster Payments: £1,000,000 a payment.
		{obie.NewConnector(obie.Config{}), "GBP", sortCode, 100_000_000},
	} {
		t.Run(tc.conn.Name+"-"+tc.currency, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{bank: tc.conn})
			event := func(id string, amount int64) string {
				return fmt.Sprintf(`{"settlement_id":%q,"account_id":"acc","amount_cents":%d,"currency":%q,"beneficiary":%q}`, id, amount, tc.currency, tc.beneficiary)
			}
			if r := b.post(t, event("at-limit", tc.limit)); r.status != http.StatusCreated {
				t.Fatalf("exactly the limit %d: %d %s, want 201", tc.limit, r.status, r.raw)
			}
			for _, amount := range []int64{tc.limit + 1, tc.limit * 10, math.MaxInt64} {
				r := b.post(t, event("over-"+strconv.FormatInt(amount, 10), amount))
				if r.status != http.StatusUnprocessableEntity || r.body["field"] != "amount_cents" {
					t.Errorf("%d over the limit %d: %d %s, want 422 naming amount_cents", amount, tc.limit, r.status, r.raw)
				}
			}
			wantCounts(t, b.db, map[string]int{"settlement_receipts": 1, "settlements": 1, "settlement_transitions": 1, "river_job": 1})
		})
	}
}

// TestOperatorAmountCeilings: --max-amount CCY=N refuses more than N minor
// units of CCY at intake (422 naming amount_cents, nothing stored); other
// currencies keep the connector's limit alone, and a ceiling above the
// connector's limit does not raise it.
func TestOperatorAmountCeilings(t *testing.T) {
	t.Parallel()
	var ceilings intake.MaxAmounts
	if err := ceilings.Set("EUR=500000,JPY=70000"); err != nil {
		t.Fatal(err)
	}
	if err := ceilings.Set("USD=100000000000000000"); err != nil {
		t.Fatal(err)
	}
	b := setup(t, setupOpts{maxAmounts: ceilings})
	post := func(id string, amount int64, currency string) response {
		return b.post(t, fmt.Sprintf(`{"settlement_id":%q,"account_id":"acc","amount_cents":%d,"currency":%q,"beneficiary":"b"}`, id, amount, currency))
	}
	for _, tc := range []struct {
		amount   int64
		currency string
		status   int
	}{
		{500000, "EUR", 201}, {500001, "EUR", 422}, {70000, "JPY", 201}, {70001, "JPY", 422},
		{1 << 40, "GBP", 201}, {1<<53 - 1, "USD", 201}, {1 << 53, "USD", 422}, {math.MaxInt64, "USD", 422},
	} {
		id := fmt.Sprintf("op-%s-%d", tc.currency, tc.amount)
		r := post(id, tc.amount, tc.currency)
		if r.status != tc.status || (tc.status == 422 && r.body["field"] != "amount_cents") {
			t.Errorf("%d %s: %d %s, want %d", tc.amount, tc.currency, r.status, r.raw, tc.status)
		}
	}
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 4, "settlements": 4, "settlement_transitions": 4, "river_job": 4})
}

// TestMaxAmountsSet: the flag's syntax, CCY=N[,CCY=N…], repeatable, each
// currency once, N positive minor units, CCY one a payout can be made in.
func TestMaxAmountsSet(t *testing.T) {
	t.Parallel()
	var m intake.MaxAmounts
	if err := m.Set(" EUR=100 , JPY=5"); err != nil {
		t.Fatal(err)
	}
	if err := m.Set("KWD=1000"); err != nil {
		t.Fatal(err)
	}
	if m["EUR"] != 100 || m["JPY"] != 5 || m["KWD"] != 1000 || len(m) != 3 || m.String() != "EUR=100,JPY=5,KWD=1000" {
		t.Fatalf("got %v (%s)", m, m.String())
	}
	for _, bad := range []string{"", "EUR", "EUR=", "=5", "EUR=0", "EUR=-1", "EUR=1.5", "EUR=1e3", "EUR=+5", "EUR=0x10",
		"eur=5", "XAU=5", "HRK=5", "CLF=5", "EUR=9223372036854775808", "EUR=5,EUR=6", "JPY=7", "GBP=1,,USD=2"} {
		var m2 intake.MaxAmounts
		_ = m2.Set("JPY=1")
		if err := m2.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted: %v", bad, m2)
		}
	}
}
