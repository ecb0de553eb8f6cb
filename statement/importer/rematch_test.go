package importer

import (
	"bytes"
	"context"
	"testing"

	"github.com/settle/settle/internal/testsupport/camttest"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
)

// TestRematchLinesImportedBeforeTheirSettlement: statement lines imported
// before their settlements existed are unmatched at import; once the
// settlements appear, a run of the Rematcher matches each by its
// reference and books it as the import would have (the debit pays the
// settlement whose outcome was unknown, the credit with return
// information returns the confirmed one), exactly once however many runs;
// a line of nobody's reference stays unmatched; with Suggest, a line
// without a reference gets a suggestion once a settlement of its amount
// appears, ranked by its counterparty, which import stored.
func TestRematchLinesImportedBeforeTheirSettlement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupSafety(t)
	file := camttest.Camt053("early", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{
		camttest.Debit("E1", "late-paid", 1234),
		camttest.Returned("E2", "late-returned", 5000, "AC04"),
		camttest.Debit("E3", "nobody", 777),
		{Ref: "E4", Amount: 4321, Txs: []camttest.Tx{{Amount: 4321, Party: "Ada Lovelace"}}},
	}})
	res, err := b.im.Import(ctx, "early.xml", bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 0 || res.Unmatched != 4 || res.Suggested != 0 {
		t.Fatalf("import before the settlements: matched %d, unmatched %d, suggested %d; want 0, 4, 0", res.Matched, res.Unmatched, res.Suggested)
	}
	var party string
	if err := b.db.Pool.QueryRow(ctx, `SELECT coalesce(counterparty, '') FROM bank_statement_entries WHERE entry_ref = 'E4'`).Scan(&party); err != nil || party != "Ada Lovelace" {
		t.Fatalf("stored counterparty %q, %v; want Ada Lovelace", party, err)
	}

	// Nothing to match yet: a run changes nothing.
	rm := &Rematcher{DB: b.db.Pool, Returns: &reconcile.Resolver{DB: b.db.Pool}, Suggest: true}
	got, err := rm.Run(ctx)
	if err != nil || got != (RematchResult{Examined: 4}) {
		t.Fatalf("run before the settlements: %+v, %v; want 4 examined, nothing else", got, err)
	}

	b.seed(t, "late-paid", 1234, "EUR", settlement.Sent)
	b.seed(t, "late-returned", 5000, "EUR", settlement.Confirmed)
	b.seed(t, "same-amount", 4321, "EUR", settlement.Sent)
	if _, err := b.db.Pool.Exec(ctx, `UPDATE settlements SET beneficiary = 'ada lovelace ' WHERE settlement_id = 'same-amount'`); err != nil {
		t.Fatal(err)
	}
	for run := range 3 {
		got, err := rm.Run(ctx)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		want := RematchResult{Examined: 4, Matched: 2, Suggested: 1}
		if run > 0 {
			want = RematchResult{Examined: 2}
		}
		if got != want {
			t.Fatalf("run %d: %+v, want %+v", run, got, want)
		}
	}
	for id, w := range map[string]after{
		"late-paid":     {state: settlement.Confirmed, movements: "payout"},
		"late-returned": {state: settlement.Returned, movements: "payout+reversal"},
		"same-amount":   {state: settlement.Sent},
	} {
		a := b.after(t, id)
		if a.state != w.state || a.movements != w.movements || a.flag != "" {
			t.Errorf("%s: %+v, want state %s, movements %q, no flag", id, a, w.state, w.movements)
		}
	}
	rows, err := b.db.Pool.Query(ctx, `SELECT entry_ref, match, coalesce(settlement_id, ''), coalesce(suggested_settlement_id, ''), coalesce(suggestion, '')
		FROM bank_statement_entries ORDER BY entry_ref`)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var ref, match, sid, sug, why string
		if err := rows.Scan(&ref, &match, &sid, &sug, &why); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, ref+" "+match+" "+sid+sug+" "+why)
	}
	want := []string{
		"E1 reference late-paid ",
		"E2 reference late-returned ",
		"E3 none  ",
		"E4 suggested same-amount the only settlement with this amount and currency around this date, and its beneficiary is the counterparty",
	}
	if len(lines) != len(want) {
		t.Fatalf("lines %q, want %q", lines, want)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, lines[i], want[i])
		}
	}

	// The import's own report of the file is unchanged; importing it
	// again stores nothing and books nothing twice.
	again, err := b.im.Import(ctx, "early.xml", bytes.NewReader(file))
	if err != nil || again.Imported {
		t.Fatalf("import again: %+v, %v; want the earlier import", again, err)
	}
	if a := b.after(t, "late-returned"); a.movements != "payout+reversal" {
		t.Errorf("late-returned after importing again: movements %q", a.movements)
	}
}
