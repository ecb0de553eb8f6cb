package importer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/testsupport/camttest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statement"
)

func refs(ls []inspect.StatementLine) []string {
	var out []string
	for _, l := range ls {
		s := fmt.Sprintf("%d.%d", l.Position, l.TxIndex)
		if l.EndToEndID != nil {
			s += " " + *l.EndToEndID
		}
		if l.SuggestedSettlementID != "" {
			s += " ~" + l.SuggestedSettlementID
		}
		out = append(out, s)
	}
	return out
}

func TestImportStatementMatchesThroughBatches(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "paid-1", 1000, settlement.Confirmed, true)
	b.Seed(t, "paid-2", 2000, settlement.Confirmed, true)
	b.Seed(t, "paid-3", 3000, settlement.Confirmed, true)
	b.Seed(t, "in-flight", 777, settlement.Sent, false)
	file := camttest.Camt053("m1",
		camttest.Stmt{Account: "acc-1", Opening: 100_000, Entries: []camttest.Entry{
			camttest.Batch("B1", camttest.Tx{E2E: "paid-1", Amount: 1000}, camttest.Tx{E2E: "paid-2", Amount: 2000}, camttest.Tx{E2E: "stranger", Amount: 500}),
			camttest.Debit("E2", "paid-3", 3000),
			camttest.Debit("E3", "", 777),       // no reference: a suggestion, not a match
			{Ref: "FEE", Amount: 150, Txs: nil}, // no details at all
		}},
		camttest.Stmt{Account: "acc-2", Opening: 5000})

	res := b.importBytes(t, "day1.xml", file)
	if !res.Imported || res.Format != statement.FormatCamt053 || !strings.HasPrefix(res.Digest, "sha256:") {
		t.Fatalf("result %+v", res)
	}
	if res.Statements != 2 || res.Entries != 4 || res.Lines != 6 || res.Matched != 3 || res.Suggested != 1 ||
		res.Unmatched != 3 || res.Returns != 0 || res.Unbalanced != 0 {
		t.Fatalf("counts: %d statements, %d entries, %d lines, %d matched, %d suggested, %d unmatched, %d returns, %d unbalanced",
			res.Statements, res.Entries, res.Lines, res.Matched, res.Suggested, res.Unmatched, res.Returns, res.Unbalanced)
	}
	want := []string{"1.3 stranger", "3.1 ~in-flight", "4.1"}
	if got := refs(res.UnmatchedEntries); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("unmatched %v, want %v", got, want)
	}
	if l := res.UnmatchedEntries[1]; l.SettlementID != nil || l.Suggestion == "" {
		t.Errorf("a suggestion counted as a match, or without a reason: %+v", l)
	}
	if l := res.UnmatchedEntries[2]; l.TxCount != 0 || l.AmountMinor == nil || *l.AmountMinor != 150 || *l.EntryRef != "FEE" {
		t.Errorf("entry without details: %+v", l)
	}

	// The batch's details are matched one by one, each with the batch's
	// own facts repeated.
	rows, err := b.DB.Pool.Query(context.Background(), `SELECT e.position, e.tx_index, e.tx_count, e.entry_ref, e.entry_amount_minor,
		e.amount_minor, e.end_to_end_id, coalesce(e.settlement_id, ''), e.match, st.account, st.digest
		FROM bank_statement_entries e JOIN bank_statements st ON st.id = e.statement_id WHERE e.position = 1 ORDER BY e.tx_index`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var pos, idx, n int
		var ref, e2e, sid, match, account, digest string
		var entryAmt, amt int64
		if err := rows.Scan(&pos, &idx, &n, &ref, &entryAmt, &amt, &e2e, &sid, &match, &account, &digest); err != nil {
			t.Fatal(err)
		}
		if digest != res.Digest+"/1" {
			t.Errorf("statement digest %s, want %s/1", digest, res.Digest)
		}
		got = append(got, fmt.Sprintf("%d.%d/%d %s %d %d %s %s %s %s", pos, idx, n, ref, entryAmt, amt, e2e, sid, match, account))
	}
	want = []string{
		"1.1/3 B1 3500 1000 paid-1 paid-1 reference acc-1",
		"1.2/3 B1 3500 2000 paid-2 paid-2 reference acc-1",
		"1.3/3 B1 3500 500 stranger  none acc-1",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("batch rows:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestImportStatementSuggestsByCounterparty: of two settlements with the
// line's amount and currency, the one whose beneficiary is the line's
// counterparty is suggested, and still not matched.
func TestImportStatementSuggestsByCounterparty(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "cand-a", 777, settlement.Sent, false)
	b.Seed(t, "cand-b", 777, settlement.Uncertain, false)
	b.Seed(t, "paid", 777, settlement.Confirmed, true)
	if _, err := b.DB.Pool.Exec(context.Background(), `UPDATE settlements SET beneficiary = 'Ada Lovelace' WHERE settlement_id = 'cand-b'`); err != nil {
		t.Fatal(err)
	}
	res := b.importBytes(t, "day.xml", camttest.Camt053("party", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{
		camttest.Debit("E1", "paid", 777),
		{Ref: "E2", Amount: 777, Txs: []camttest.Tx{{Amount: 777, Party: "ADA LOVELACE "}}},
		{Ref: "E3", Amount: 777, Txs: []camttest.Tx{{Amount: 777}}},
	}}))
	if res.Matched != 1 || res.Suggested != 2 || len(res.UnmatchedEntries) != 2 {
		t.Fatalf("matched %d, suggested %d: %v", res.Matched, res.Suggested, refs(res.UnmatchedEntries))
	}
	withParty, without := res.UnmatchedEntries[0], res.UnmatchedEntries[1]
	if withParty.SuggestedSettlementID != "cand-b" || !strings.Contains(withParty.Suggestion, "one of 2") ||
		!strings.Contains(withParty.Suggestion, "counterparty") || withParty.SettlementID != nil {
		t.Errorf("with a counterparty: %+v", withParty)
	}
	// Without one, the smallest id of the two (paid is matched already).
	if without.SuggestedSettlementID != "cand-a" || strings.Contains(without.Suggestion, "counterparty") {
		t.Errorf("without a counterparty: %+v", without)
	}
}

func TestImportStatementAgainChangesNothing(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "paid-1", 1000, settlement.Confirmed, true)
	file := camttest.Camt053("again", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Debit("E1", "paid-1", 1000), camttest.Debit("E2", "other", 5)}})
	first := b.importBytes(t, "first.xml", file)
	files, stmts, lines := b.stored(t)

	for _, name := range []string{"first.xml", "renamed.xml"} {
		again := b.importBytes(t, name, file)
		if again.Imported || again.ImportedAs != "first.xml" || again.File != name || !again.ImportedAt.Equal(first.ImportedAt) {
			t.Fatalf("import again as %s: %+v", name, again)
		}
		if again.Lines != first.Lines || again.Matched != first.Matched || again.Unmatched != first.Unmatched ||
			len(again.UnmatchedEntries) != 1 || again.Digest != first.Digest {
			t.Errorf("figures of the earlier import differ: %+v vs %+v", again, first)
		}
		if f, s, l := b.stored(t); f != files || s != stmts || l != lines {
			t.Fatalf("import again stored more: %d/%d/%d files/statements/lines, was %d/%d/%d", f, s, l, files, stmts, lines)
		}
	}
	// Other bytes are another file, even with the same statements.
	if other := b.importBytes(t, "first.xml", camttest.Camt053("again-resent", camttest.Stmt{Account: "acc-1"})); !other.Imported {
		t.Fatalf("another file was taken for the first: %+v", other)
	}
}

func TestImportStatementConcurrentlyStoresOnce(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	var entries []camttest.Entry
	for i := range 3000 {
		entries = append(entries, camttest.Debit(fmt.Sprintf("E%d", i), fmt.Sprintf("ref-%d", i), int64(100+i)))
	}
	file := camttest.Camt053("big", camttest.Stmt{Account: "acc-1", Opening: 1 << 40, Entries: entries})

	const n = 6
	results := make([]ImportResult, n)
	errs := make([]error, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			results[i], errs[i] = b.im.Import(context.Background(), fmt.Sprintf("copy-%d.xml", i), bytes.NewReader(file))
		}()
	}
	start.Done()
	done.Wait()
	imported := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("import %d: %v", i, errs[i])
		}
		if results[i].Imported {
			imported++
		}
		if results[i].Lines != 3000 || results[i].Unmatched != 3000 {
			t.Errorf("import %d reports %d lines, %d unmatched", i, results[i].Lines, results[i].Unmatched)
		}
		if len(results[i].UnmatchedEntries) != DefaultMaxListed {
			t.Errorf("import %d lists %d unmatched lines, want the first %d", i, len(results[i].UnmatchedEntries), DefaultMaxListed)
		}
	}
	if imported != 1 {
		t.Fatalf("%d of %d concurrent imports stored the file, want exactly 1", imported, n)
	}
	if f, s, l := b.stored(t); f != 1 || s != 1 || l != 3000 {
		t.Fatalf("stored %d files, %d statements, %d lines; want 1, 1, 3000", f, s, l)
	}
}

func TestImportStatementRefusedStoresNothing(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "paid-1", 1000, settlement.Confirmed, true)
	valid := string(camttest.Camt053("ok", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Debit("E1", "paid-1", 1000)}}))

	bai2, mt940 := testdataFile(t, "bai2_terminated.bai"), testdataFile(t, "mt940_dutch.sta")
	// A file that fails in its second statement, after the first statement
	// and more than one COPY batch of lines were written in the transaction.
	var many []camttest.Entry
	for i := range 2500 {
		many = append(many, camttest.Debit(fmt.Sprintf("E%d", i), "paid-1", 1000))
	}
	late := string(camttest.Camt053("late", camttest.Stmt{Account: "acc-1", Entries: many},
		camttest.Stmt{Account: "acc-2", Entries: []camttest.Entry{camttest.Debit("X", "x", 12345)}}))
	i := strings.LastIndex(late, ">123.45<")
	late = late[:i] + ">123.456<" + late[i+len(">123.45<"):]

	cases := map[string]string{
		"empty":              "",
		"not a statement":    "hello, this is not a bank statement\n",
		"pdf":                "%PDF-1.7\n%âãÏÓ\n1 0 obj\n",
		"truncated":          valid[:len(valid)/2],
		"entity expansion":   `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]><Document><BkToCstmrStmt>&lol2;</BkToCstmrStmt></Document>`,
		"external entity":    `<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]><Document><BkToCstmrStmt>&x;</BkToCstmrStmt></Document>`,
		"inexact amount":     strings.Replace(valid, ">10.00<", ">10.001<", 1),
		"date that is not":   dateNot(valid),
		"unknown currency":   strings.ReplaceAll(valid, `Ccy="EUR"`, `Ccy="XQQ"`),
		"50 MB on one line":  valid[:strings.Index(valid, "<MsgId>")+7] + strings.Repeat("A", 50<<20) + "</MsgId>",
		"fails in statement": late,
		"another XML":        `<?xml version="1.0"?><html><body>hi</body></html>`,
		// Line formats that fail after a statement ended: BAI2 without its
		// 99 trailer, MT940 whose second message has no closing balance.
		"bai2 truncated":  bai2[:strings.Index(bai2, "\n99,")],
		"mt940 truncated": mt940[:strings.LastIndex(mt940, ":62F:")],
	}
	for name, data := range cases {
		_, err := b.im.Import(context.Background(), name+".xml", strings.NewReader(data))
		var se *statement.Error
		if !errors.As(err, &se) || se.File != name+".xml" {
			t.Errorf("%s: error %v, want a *statement.Error naming the file", name, err)
		}
	}
	if f, s, l := b.stored(t); f != 0 || s != 0 || l != 0 {
		t.Fatalf("refused files left %d files, %d statements, %d lines behind", f, s, l)
	}
	// The valid file still imports afterwards.
	if res := b.importBytes(t, "ok.xml", []byte(valid)); !res.Imported || res.Matched != 1 {
		t.Fatalf("valid file after the refusals: %+v", res)
	}
}

func TestImportStatementListsReturnsAndBalanceBreaks(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "back-1", 1000, settlement.Confirmed, true)
	b.Seed(t, "back-2", 2000, settlement.Confirmed, true)
	wrong := int64(-1)
	file := camttest.Camt053("returns",
		camttest.Stmt{Account: "acc-1", Opening: 10_000, Entries: []camttest.Entry{
			camttest.Debit("E1", "back-1", 1000),
			camttest.Returned("R1", "back-1", 1000, "AC04"),
			{Ref: "V1", Amount: 2000, Credit: true, Reversal: true, Txs: []camttest.Tx{{E2E: "back-2", Amount: 2000}}},
		}},
		camttest.Stmt{Account: "acc-2", Opening: 500, Closing: &wrong, Entries: []camttest.Entry{camttest.Debit("E9", "nobody", 100)}})
	res := b.importBytes(t, "returns.xml", file)
	if res.Returns != 2 || len(res.Returned) != 2 || res.Unbalanced != 1 || len(res.BalanceBreaks) != 1 {
		t.Fatalf("returns %d %v, unbalanced %d %+v", res.Returns, refs(res.Returned), res.Unbalanced, res.BalanceBreaks)
	}
	r1, r2 := res.Returned[0], res.Returned[1]
	if *r1.SettlementID != "back-1" || *r1.ReturnReason != "AC04" || r1.Reversal || *r2.SettlementID != "back-2" || !r2.Reversal {
		t.Errorf("returned lines %+v, %+v", r1, r2)
	}
	bb := res.BalanceBreaks[0]
	if bb.SettlementID != nil || *bb.Account != "acc-2" || bb.OpeningMinor != 500 || bb.ClosingMinor != -1 ||
		bb.DebitsMinor != 100 || bb.DifferenceMinor == nil || *bb.DifferenceMinor != -1-(500-100) {
		t.Errorf("balance break %+v", bb)
	}
	// Listing a return changes no settlement: the return flow is not built yet.
	var state string
	if err := b.DB.Pool.QueryRow(context.Background(), "SELECT state FROM settlements WHERE settlement_id = 'back-1'").Scan(&state); err != nil || state != "confirmed" {
		t.Errorf("back-1 is %s (%v), want still confirmed", state, err)
	}
}

// dateNot replaces the first booking date of a camt file with 30 February.
func dateNot(camt string) string {
	i := strings.Index(camt, "<BookgDt><Dt>") + len("<BookgDt><Dt>")
	return camt[:i] + "2030-02-30" + camt[i+len("2030-01-01"):]
}

// testdataFile reads a file of the statement package's test data.
func testdataFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
