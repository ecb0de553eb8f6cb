package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/ledger"
	"github.com/settle/settle/settlement"
)

// TestAccountsPage: the accounts page lists every account's posted, held
// and available balance; an account's page shows its open holds (a payout
// in flight) and its postings (a credit, a confirmed payout), each linked
// to its settlement.
func TestAccountsPage(t *testing.T) {
	t.Parallel()
	b := setup(t, "", fakebank.Faults{}, nil)
	if r := b.request(t, http.MethodGet, "/console/accounts", nil, nil); r.code != http.StatusOK || !strings.Contains(r.body, `id="empty"`) {
		t.Fatalf("accounts before any = %d:\n%.3000s", r.code, r.body)
	}
	if _, err := ledger.Credit(t.Context(), b.db.Pool, ledger.CreditRequest{AccountID: "merchant-7", AmountMinor: 100_000, Currency: "EUR", Ref: "wire-7"}); err != nil {
		t.Fatal(err)
	}
	b.submit(t, "acct-paid", "merchant-7", 12_345)
	b.waitState(t, "acct-paid", settlement.Confirmed)
	// A payout in flight (pending, its hold taken), written as intake
	// writes it.
	if _, err := b.db.Pool.Exec(t.Context(), `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		VALUES ('acct-held', 'merchant-7', 'b', 500, 'EUR', 'pending', 'k-acct-held', 'sha256:00');
		INSERT INTO ledger_holds (settlement_id, account_id, currency, amount_minor, state) VALUES ('acct-held', 'merchant-7', 'EUR', 500, 'held');
		UPDATE ledger_balances SET held_minor = held_minor + 500 WHERE account_id = 'merchant-7' AND shard = (SELECT min(shard) FROM ledger_balances WHERE account_id = 'merchant-7')`); err != nil {
		t.Fatal(err)
	}

	r := b.request(t, http.MethodGet, "/console/accounts", nil, nil)
	for _, want := range []string{`id="balances"`, "merchant-7", "876.55 EUR", "5.00 EUR", "871.55 EUR", "settle:clearing:settle", "settle:funding", "-1,000.00 EUR"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("accounts page lacks %q:\n%.5000s", want, r.body)
		}
	}
	r = b.request(t, http.MethodGet, "/console/accounts?account=merchant-7", nil, nil)
	for _, want := range []string{"Account merchant-7", `id="holds"`, "acct-held", `id="postings"`, "wire-7", "acct-paid", "123.45 EUR", "1,000.00 EUR"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("account page lacks %q:\n%.6000s", want, r.body)
		}
	}
	if r := b.request(t, http.MethodGet, "/console/accounts?account=nobody", nil, nil); r.code != http.StatusNotFound {
		t.Errorf("unknown account = %d", r.code)
	}
	if r := b.request(t, http.MethodGet, "/console/accounts?account=merchant-7&after=x", nil, nil); r.code != http.StatusBadRequest {
		t.Errorf("bad cursor = %d", r.code)
	}
}
