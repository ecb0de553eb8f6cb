package audit

import (
	"context"
	"testing"

	"github.com/settle/settle/settlement"
)

// TestBankReportPerBank: with several banks on one database, the report of
// one bank (BankReporter.BankName) holds its own settlements against its
// books and leaves the others' alone; a payment at it of another bank's
// settlement is missing_in_ledger there.
func TestBankReportPerBank(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	ctx := context.Background()
	b.Seed(t, "ours", 500, settlement.Confirmed, true)
	b.Pay(t, "ours", 500)
	b.Seed(t, "theirs", 700, settlement.Confirmed, true)
	if _, err := b.DB.Pool.Exec(ctx, "UPDATE settlements SET bank = 'stripe' WHERE settlement_id = 'theirs'"); err != nil {
		t.Fatal(err)
	}
	run := func(bank string) *BankReport {
		t.Helper()
		var rep BankReport
		if _, err := (&BankReporter{DB: b.DB.Pool, Bank: b.Client, BankName: bank}).Run(ctx, &rep); err != nil {
			t.Fatal(err)
		}
		return &rep
	}
	// Every bank at once: stripe's settlement is missing at settle's bank.
	if all := run(""); all.ByClass[ClassMatched] != 1 || all.ByClass[ClassMissingAtBank] != 1 {
		t.Fatalf("all banks: %v", all.ByClass)
	}
	own := run("settle")
	if own.ByClass[ClassMatched] != 1 || own.Discrepancies() != 0 || own.Settlements != 1 {
		t.Fatalf("settle's report: %d settlements, %v", own.Settlements, own.ByClass)
	}
	// Stripe's report against a bank that paid settle's settlement: it is
	// no settlement of stripe's.
	if wrong := run("stripe"); wrong.ByClass[ClassMissingInLedger] != 1 || wrong.ByClass[ClassMissingAtBank] != 1 {
		t.Fatalf("stripe's report against settle's books: %v", wrong.ByClass)
	}
}
