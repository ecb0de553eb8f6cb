package importer

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/settle/settle/ledger"
	"github.com/settle/settle/settlement"
)

// TestStatementCreditsNameLedgerAccounts: with a credit prefix, a credit
// line matched to no settlement whose reference is the prefix and an
// account id brings its amount into that ledger account, once however
// often the file is imported; a reserved account is refused and listed;
// a credit with return information, a debit, a line of another prefix and
// a line matched to a settlement credit nothing; without a prefix nothing
// is credited.
func TestStatementCreditsNameLedgerAccounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupSafety(t)
	b.seed(t, "fund:acc-paid", 700, "EUR", settlement.Confirmed)
	file := camt053("credits", tStmt{account: "acc-1", entries: []tEntry{
		{ref: "C1", amount: 50000, credit: true, txs: []tTx{{e2e: "fund:merchant-7", amount: 50000}}},
		{ref: "C2", amount: 1200, credit: true, txs: []tTx{{e2e: "fund:merchant-7", amount: 1200}, {e2e: "fund:merchant-8", amount: 0}}},
		{ref: "C3", amount: 300, credit: true, txs: []tTx{{e2e: "fund:settle:funding", amount: 300}}},
		returned("C4", "fund:merchant-9", 400, "AC04"),
		debit("D1", "fund:merchant-9", 500),
		{ref: "C5", amount: 600, credit: true, txs: []tTx{{e2e: "other:merchant-9", amount: 600}}},
		{ref: "C6", amount: 700, credit: true, txs: []tTx{{e2e: "fund:acc-paid", amount: 700}}},
	}})
	without := *b.im
	if res, err := without.Import(ctx, "other.xml", bytes.NewReader(camt053("none", tStmt{account: "acc-1", entries: []tEntry{
		{ref: "N1", amount: 100, credit: true, txs: []tTx{{e2e: "fund:merchant-7", amount: 100}}},
	}}))); err != nil || len(res.Credits) != 0 {
		t.Fatalf("import without a prefix: credits %+v, %v; want none", res.Credits, err)
	}
	b.im.CreditPrefix = "fund:"
	for run := range 2 {
		res, err := b.im.Import(ctx, "credits.xml", bytes.NewReader(file))
		if err != nil {
			t.Fatalf("import %d: %v", run, err)
		}
		var got []string
		for _, c := range res.Credits {
			note := "posted"
			switch {
			case c.Error != "":
				note = "refused"
			case c.Replayed:
				note = "replayed"
			}
			got = append(got, c.AccountID+" "+c.Currency+" "+note)
		}
		again := map[bool]string{false: "posted", true: "replayed"}[run > 0]
		want := []string{"merchant-7 EUR " + again, "merchant-7 EUR " + again, "settle:funding EUR refused"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("import %d: credits %q, want %q", run, got, want)
		}
	}
	bs, err := ledger.Balances(ctx, b.db.Pool, "merchant-7")
	if err != nil || len(bs) != 1 || bs[0].Posted != 51200 || bs[0].Available != 51200 {
		t.Errorf("merchant-7: %+v, %v; want 51,200 posted and available", bs, err)
	}
	for _, acc := range []string{"merchant-8", "merchant-9", "acc-paid"} {
		if bs, err := ledger.Balances(ctx, b.db.Pool, acc); err != nil || len(bs) != 0 && bs[0].Posted != 0 {
			t.Errorf("%s: %+v, %v; want nothing posted", acc, bs, err)
		}
	}
}
