package importer

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/settle/settle/internal/testsupport/camttest"
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
	file := camttest.Camt053("credits", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{
		{Ref: "C1", Amount: 50000, Credit: true, Txs: []camttest.Tx{{E2E: "fund:merchant-7", Amount: 50000}}},
		{Ref: "C2", Amount: 1200, Credit: true, Txs: []camttest.Tx{{E2E: "fund:merchant-7", Amount: 1200}, {E2E: "fund:merchant-8", Amount: 0}}},
		{Ref: "C3", Amount: 300, Credit: true, Txs: []camttest.Tx{{E2E: "fund:settle:funding", Amount: 300}}},
		camttest.Returned("C4", "fund:merchant-9", 400, "AC04"),
		camttest.Debit("D1", "fund:merchant-9", 500),
		{Ref: "C5", Amount: 600, Credit: true, Txs: []camttest.Tx{{E2E: "other:merchant-9", Amount: 600}}},
		{Ref: "C6", Amount: 700, Credit: true, Txs: []camttest.Tx{{E2E: "fund:acc-paid", Amount: 700}}},
	}})
	without := *b.im
	if res, err := without.Import(ctx, "other.xml", bytes.NewReader(camttest.Camt053("none", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{
		{Ref: "N1", Amount: 100, Credit: true, Txs: []camttest.Tx{{E2E: "fund:merchant-7", Amount: 100}}},
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
