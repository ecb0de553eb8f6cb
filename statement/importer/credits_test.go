package importer

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/settle/settle/audit"
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

// TestStatementCreditIsOneBookingAcrossFiles: a credit line taken into a
// ledger account is no unmatched line (the import's counts and list, and
// settle reconcile bank --statements), and a booking that another file
// shows again (an intraday report and the day's statement, a statement
// sent again) is credited once; a line credited under the ref of before
// (the line's place) is not credited again.
func TestStatementCreditIsOneBookingAcrossFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupSafety(t)
	b.im.CreditPrefix = "fund:"
	stmt := camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{
		{Ref: "B1", Amount: 900, Credit: true, Booked: "2030-01-02", Txs: []camttest.Tx{{E2E: "fund:merchant-1", Amount: 900}}},
		{Ref: "B2", Amount: 40, Credit: true, Booked: "2030-01-02", Txs: []camttest.Tx{{E2E: "nobody", Amount: 40}}},
	}}
	first, err := b.im.Import(ctx, "intraday.xml", bytes.NewReader(camttest.Camt053("intraday", stmt)))
	if err != nil {
		t.Fatal(err)
	}
	if first.Credited != 1 || first.Unmatched != 1 || len(first.UnmatchedEntries) != 1 || first.UnmatchedEntries[0].EndToEndID == nil ||
		*first.UnmatchedEntries[0].EndToEndID != "nobody" {
		t.Errorf("first import: credited %d, unmatched %d %+v; want the credit credited and only the other line unmatched",
			first.Credited, first.Unmatched, first.UnmatchedEntries)
	}
	// The day's statement shows the same bookings again, in a file of its
	// own.
	second, err := b.im.Import(ctx, "day.xml", bytes.NewReader(camttest.Camt053("day", stmt)))
	if err != nil {
		t.Fatal(err)
	}
	if !second.Imported || len(second.Credits) != 1 || !second.Credits[0].Replayed || second.Credits[0].Ref != first.Credits[0].Ref {
		t.Errorf("second file: credits %+v; want the booking's credit replayed under %s", second.Credits, first.Credits[0].Ref)
	}
	if second.Credited != 1 || second.Unmatched != 1 {
		t.Errorf("second file: credited %d, unmatched %d; want 1 and 1", second.Credited, second.Unmatched)
	}
	if bs, err := ledger.Balances(ctx, b.db.Pool, "merchant-1"); err != nil || len(bs) != 1 || bs[0].Posted != 900 {
		t.Errorf("merchant-1: %+v, %v; want 900 posted once", bs, err)
	}
	var rep audit.BankReport
	if _, err := (&audit.StatementReporter{DB: b.db.Pool}).Run(ctx, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Unmatched) != 1 || rep.Unmatched[0].EndToEndID == nil || *rep.Unmatched[0].EndToEndID != "nobody" {
		t.Errorf("settle reconcile bank --statements: unmatched %+v; want only the line nobody explains", rep.Unmatched)
	}

	// A file imported without a prefix, whose credit was then posted under
	// the line's ref of before: imported again with the prefix, nothing
	// is posted twice.
	old := camttest.Camt053("old", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{
		{Ref: "B3", Amount: 500, Credit: true, Booked: "2030-01-03", Txs: []camttest.Tx{{E2E: "fund:merchant-2", Amount: 500}}},
	}})
	without := *b.im
	without.CreditPrefix = ""
	if _, err := without.Import(ctx, "old.xml", bytes.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	var digest string
	if err := b.db.Pool.QueryRow(ctx, `SELECT st.digest FROM bank_statements st JOIN bank_statement_files f ON f.id = st.file_id
		WHERE f.file_name = 'old.xml'`).Scan(&digest); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.Credit(ctx, b.db.Pool, ledger.CreditRequest{AccountID: "merchant-2", AmountMinor: 500, Currency: "EUR",
		Ref: "statement:" + digest + " entry 1 detail 1"}); err != nil {
		t.Fatal(err)
	}
	again, err := b.im.Import(ctx, "old.xml", bytes.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Credits) != 1 || !again.Credits[0].Replayed || again.Credited != 1 || again.Unmatched != 0 {
		t.Errorf("a line credited under the ref of before: credits %+v, credited %d, unmatched %d; want replayed, 1, 0",
			again.Credits, again.Credited, again.Unmatched)
	}
	if bs, err := ledger.Balances(ctx, b.db.Pool, "merchant-2"); err != nil || len(bs) != 1 || bs[0].Posted != 500 {
		t.Errorf("merchant-2: %+v, %v; want 500 posted once", bs, err)
	}
}
