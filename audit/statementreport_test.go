package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/settle/settle/internal/testsupport/camttest"
	"github.com/settle/settle/settlement"
)

// stmtReport runs the report against the imported statements, checks that
// what it streamed agrees with what it counted, and returns it.
func (b *importBundle) stmtReport(t *testing.T) *BankReport {
	t.Helper()
	var rep BankReport
	counts, err := (&StatementReporter{DB: b.DB.Pool}).Run(context.Background(), &rep)
	if err != nil {
		t.Fatalf("statement report: %v", err)
	}
	if counts.Discrepancies() != rep.Discrepancies() || rep.Source != SourceStatements {
		t.Fatalf("returned counts differ from streamed counts, or source %q", rep.Source)
	}
	for _, cl := range StatementBreakClasses {
		if int64(len(rep.Breaks[cl])) != rep.ByClass[cl] {
			t.Errorf("%s: %d listed, %d counted", cl, len(rep.Breaks[cl]), rep.ByClass[cl])
		}
	}
	if int64(len(rep.Unmatched)) != rep.ByClass[ClassUnmatchedEntries] || int64(len(rep.BalanceBreaks)) != rep.ByClass[ClassBalanceBreaks] {
		t.Errorf("unmatched %d listed, %d counted; balance breaks %d listed, %d counted", len(rep.Unmatched),
			rep.ByClass[ClassUnmatchedEntries], len(rep.BalanceBreaks), rep.ByClass[ClassBalanceBreaks])
	}
	return &rep
}

// returnedSettlement seeds a settlement already returned by the return flow:
// payout and reversal movements.
func (b *importBundle) returnedSettlement(t *testing.T, id string, amount int64) {
	t.Helper()
	b.Seed(t, id, amount, settlement.Returned, true)
	if _, err := b.DB.Pool.Exec(context.Background(), `INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency)
		VALUES ($1, 'reversal', 'acc-1', $2, 'EUR')`, id, amount); err != nil {
		t.Fatal(err)
	}
}

func TestStatementReportNeedsStatements(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "ok", 100, settlement.Confirmed, true)
	var rep BankReport
	if _, err := (&StatementReporter{DB: b.DB.Pool}).Run(context.Background(), &rep); !errors.Is(err, ErrNoStatements) {
		t.Fatalf("report without statements: %v, want ErrNoStatements", err)
	}
	if rep.Breaks != nil {
		t.Errorf("sink received a report: %+v", rep)
	}
}

func TestStatementReportClean(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "paid-1", 1000, settlement.Confirmed, true)
	b.Seed(t, "paid-2", 2000, settlement.Confirmed, true)
	b.Seed(t, "paid-3", 3000, settlement.Confirmed, true)
	b.Seed(t, "rejected", 50, settlement.Failed, false)
	b.Seed(t, "failed-then-back", 70, settlement.Failed, false) // paid and returned before we knew: net zero
	b.returnedSettlement(t, "came-back", 400)
	b.Seed(t, "waiting", 10, settlement.Pending, false)
	stmt := camttest.Stmt{Account: "acc-1", Opening: 1_000_000, Entries: []camttest.Entry{
		camttest.Batch("B1", camttest.Tx{E2E: "paid-1", Amount: 1000}, camttest.Tx{E2E: "paid-2", Amount: 2000}),
		camttest.Debit("E3", "paid-3", 3000),
		camttest.Debit("E4", "failed-then-back", 70),
		camttest.Returned("R4", "failed-then-back", 70, "AC04"),
		camttest.Debit("E5", "came-back", 400),
		camttest.Returned("R5", "came-back", 400, "MD06"),
	}}
	b.importBytes(t, "day.053.xml", camttest.Camt053("053", stmt))
	// The same bookings again, in another file (the day's notification):
	// each counts once.
	b.importBytes(t, "day.054.xml", camttest.Camt053("054", stmt))

	rep := b.stmtReport(t)
	if rep.Discrepancies() != 0 {
		t.Fatalf("discrepancies on a clean ledger: %+v %+v %+v", rep.Breaks, rep.Unmatched, rep.BalanceBreaks)
	}
	if rep.ByClass[ClassMatched] != 3 || rep.ByClass[ClassFailedAgreed] != 2 || rep.ByClass[ClassReturnedAgreed] != 1 {
		t.Errorf("matched %d, failed_agreed %d, returned_agreed %d; want 3, 2, 1",
			rep.ByClass[ClassMatched], rep.ByClass[ClassFailedAgreed], rep.ByClass[ClassReturnedAgreed])
	}
	if un := rep.Breaks[ClassUnresolved]; len(un) != 1 || un[0].SettlementID != "waiting" || un[0].Since == nil {
		t.Errorf("unresolved %+v", un)
	}
	if rep.StatementFiles != 2 || rep.Statements != 2 || rep.StatementLines != 14 || rep.Settlements != 7 {
		t.Errorf("files %d, statements %d, lines %d, settlements %d", rep.StatementFiles, rep.Statements, rep.StatementLines, rep.Settlements)
	}
}

// TestStatementReportFindsEveryClass induces each discrepancy class of
// `settle reconcile bank --statements` on purpose, beside a matched
// settlement, and checks that the report finds exactly that one.
func TestStatementReportFindsEveryClass(t *testing.T) {
	t.Parallel()
	wrong := int64(42)
	cases := []struct {
		class Class
		id    string // the settlement listed; "" for the lists of lines and statements
		setup func(t *testing.T, b *importBundle) camttest.Stmt
	}{
		{ClassMissingInLedger, "no-movement", func(t *testing.T, b *importBundle) camttest.Stmt {
			b.Seed(t, "no-movement", 500, settlement.Confirmed, false)
			return camttest.Stmt{Entries: []camttest.Entry{camttest.Debit("E1", "no-movement", 500)}}
		}},
		{ClassMissingAtBank, "never-booked", func(t *testing.T, b *importBundle) camttest.Stmt {
			b.Seed(t, "never-booked", 500, settlement.Confirmed, true)
			return camttest.Stmt{}
		}},
		{ClassAmountMismatch, "short-paid", func(t *testing.T, b *importBundle) camttest.Stmt {
			b.Seed(t, "short-paid", 500, settlement.Confirmed, true)
			return camttest.Stmt{Entries: []camttest.Entry{camttest.Debit("E1", "short-paid", 499)}}
		}},
		{ClassStatusMismatch, "failed-but-paid", func(t *testing.T, b *importBundle) camttest.Stmt {
			b.Seed(t, "failed-but-paid", 500, settlement.Failed, false)
			return camttest.Stmt{Entries: []camttest.Entry{camttest.Batch("B1", camttest.Tx{E2E: "failed-but-paid", Amount: 500}, camttest.Tx{E2E: "ok", Amount: 100})}}
		}},
		{ClassDuplicateAtBank, "twice", func(t *testing.T, b *importBundle) camttest.Stmt {
			b.Seed(t, "twice", 500, settlement.Confirmed, true)
			return camttest.Stmt{Entries: []camttest.Entry{camttest.Debit("E1", "twice", 500), camttest.Debit("E2", "twice", 500)}}
		}},
		{ClassReturned, "bounced", func(t *testing.T, b *importBundle) camttest.Stmt {
			b.Seed(t, "bounced", 500, settlement.Confirmed, true)
			return camttest.Stmt{Entries: []camttest.Entry{camttest.Debit("E1", "bounced", 500), camttest.Returned("R1", "bounced", 500, "AC04")}}
		}},
		{ClassReturned, "reversed", func(t *testing.T, b *importBundle) camttest.Stmt {
			b.Seed(t, "reversed", 500, settlement.Confirmed, true)
			return camttest.Stmt{Entries: []camttest.Entry{camttest.Debit("E1", "reversed", 500),
				{Ref: "V1", Amount: 500, Credit: true, Reversal: true, Txs: []camttest.Tx{{E2E: "reversed", Amount: 500}}}}}
		}},
		{ClassUnmatchedEntries, "", func(*testing.T, *importBundle) camttest.Stmt {
			return camttest.Stmt{Entries: []camttest.Entry{camttest.Debit("E1", "nobody-we-know", 500)}}
		}},
		{ClassBalanceBreaks, "", func(*testing.T, *importBundle) camttest.Stmt {
			return camttest.Stmt{Closing: &wrong}
		}},
	}
	for _, c := range cases {
		t.Run(string(c.class)+"/"+c.id, func(t *testing.T) {
			t.Parallel()
			b := setupImport(t)
			b.Seed(t, "ok", 100, settlement.Confirmed, true)
			st := c.setup(t, b)
			st.Account, st.Opening = "acc-1", 1_000_000
			if len(st.Entries) == 0 || st.Entries[0].Ref != "B1" {
				st.Entries = append(st.Entries, camttest.Debit("OK", "ok", 100))
			}
			b.importBytes(t, "day.xml", camttest.Camt053("day", st))

			rep := b.stmtReport(t)
			if got := rep.Discrepancies(); got != 1 || rep.ByClass[c.class] != 1 {
				t.Fatalf("discrepancies %d, %s %d; want exactly one of it: %+v unmatched %+v balance %+v",
					got, c.class, rep.ByClass[c.class], rep.Breaks, rep.Unmatched, rep.BalanceBreaks)
			}
			if rep.ByClass[ClassMatched] != 1 {
				t.Errorf("matched = %d, want 1 (ok)", rep.ByClass[ClassMatched])
			}
			switch c.class {
			case ClassUnmatchedEntries:
				if l := rep.Unmatched[0]; l.SettlementID != nil || *l.EndToEndID != "nobody-we-know" || *l.EntryRef != "E1" {
					t.Errorf("unmatched %+v", l)
				}
			case ClassBalanceBreaks:
				if bb := rep.BalanceBreaks[0]; bb.ClosingMinor != 42 || bb.DifferenceMinor == nil || *bb.DifferenceMinor != 42-(1_000_000-100) {
					t.Errorf("balance break %+v", bb)
				}
			default:
				br := rep.Breaks[c.class][0]
				if br.SettlementID != c.id || br.Reason == "" || br.StatementEntries == nil || br.BankPayments != nil {
					t.Errorf("break %+v", br)
				}
			}
		})
	}
}

func TestStatementReportUnresolvedUntilOnAStatement(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "ok", 100, settlement.Confirmed, true)
	b.importBytes(t, "day1.xml", camttest.Camt053("day1", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Debit("E1", "ok", 100)}}))
	// Confirmed after the last import: no statement can show it yet.
	b.Seed(t, "tomorrow", 200, settlement.Confirmed, true)
	rep := b.stmtReport(t)
	un := rep.Breaks[ClassUnresolved]
	if rep.Discrepancies() != 0 || len(un) != 1 || un[0].SettlementID != "tomorrow" {
		t.Fatalf("discrepancies %d, unresolved %+v", rep.Discrepancies(), un)
	}
	// The next day's statement shows it: matched.
	b.importBytes(t, "day2.xml", camttest.Camt053("day2", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Debit("E2", "tomorrow", 200)}}))
	if rep := b.stmtReport(t); rep.Discrepancies() != 0 || rep.ByClass[ClassMatched] != 2 || rep.ByClass[ClassUnresolved] != 0 {
		t.Fatalf("after day 2: %+v", rep.ByClass)
	}
}

// TestStatementReportJSON checks the contract's shape: the counts, then the
// lists of --statements, each holding objects with settlement_id.
func TestStatementReportJSON(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "ok", 100, settlement.Confirmed, true)
	b.Seed(t, "bounced", 500, settlement.Confirmed, true)
	wrong := int64(1)
	b.importBytes(t, "day.xml", camttest.Camt053("day",
		camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Debit("E1", "ok", 100), camttest.Debit("E2", "bounced", 500),
			camttest.Returned("R1", "bounced", 500, "AC04"), camttest.Debit("E3", "stranger", 1)}},
		camttest.Stmt{Account: "acc-2", Closing: &wrong}))
	var buf bytes.Buffer
	sink := NewBankJSON(&buf)
	if _, err := (&StatementReporter{DB: b.DB.Pool}).Run(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	if err := sink.Finish(); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	for _, k := range []string{"missing_in_ledger", "missing_at_bank", "amount_mismatch", "status_mismatch",
		"duplicate_at_bank", "unresolved", "returned", "unmatched_entries", "balance_breaks"} {
		l, ok := m[k].([]any)
		if !ok {
			t.Fatalf("%s missing or not a list:\n%s", k, buf.String())
		}
		for _, item := range l {
			if _, ok := item.(map[string]any)["settlement_id"]; !ok {
				t.Errorf("%s item without settlement_id: %v", k, item)
			}
		}
	}
	if m["matched"] != 1.0 || m["discrepancies"] != 3.0 || m["source"] != "statements" {
		t.Errorf("head: %s", buf.String())
	}
	ret := m["returned"].([]any)[0].(map[string]any)
	if ret["settlement_id"] != "bounced" || len(ret["statement_entries"].([]any)) != 2 {
		t.Errorf("returned: %v", ret)
	}
	if _, has := ret["bank_payments"]; has {
		t.Errorf("a statement break carries bank_payments: %v", ret)
	}
	if un := m["unmatched_entries"].([]any)[0].(map[string]any); un["settlement_id"] != nil || un["end_to_end_id"] != "stranger" {
		t.Errorf("unmatched: %v", un)
	}
}
