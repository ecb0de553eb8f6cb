package importer

import (
	"context"
	"fmt"
	"testing"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/testsupport/camttest"
	"github.com/settle/settle/settlement"
)

func TestOverviewShowsTheLastStatementImports(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "paid-1", 1000, settlement.Confirmed, true)
	b.Seed(t, "paid-2", 2000, settlement.Confirmed, true)
	in := &inspect.Inspector{DB: b.DB.Pool}
	ov, err := in.Overview(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ov.Statements == nil || len(ov.Statements.Recent) != 0 {
		t.Fatalf("before any import: %+v", ov.Statements)
	}
	wrong := int64(1)
	b.importBytes(t, "day1.xml", camttest.Camt053("day1", camttest.Stmt{Account: "acc-1", Opening: 10_000, Entries: []camttest.Entry{
		camttest.Debit("E1", "paid-1", 1000), camttest.Debit("E2", "stranger", 500), camttest.Returned("R1", "paid-2", 2000, "AC04"),
	}}))
	b.importBytes(t, "day2.xml", camttest.Camt053("day2", camttest.Stmt{Account: "acc-2", Opening: 5000, Closing: &wrong, Entries: []camttest.Entry{
		camttest.Debit("E3", "paid-2", 2000),
	}}))
	if ov, err = in.Overview(context.Background()); err != nil {
		t.Fatal(err)
	}
	si := ov.Statements
	if si == nil || len(si.Recent) != 2 {
		t.Fatalf("statements = %+v", si)
	}
	last, first := si.Recent[0], si.Recent[1]
	if last.Account != "acc-2" || last.Balanced == nil || *last.Balanced || last.Entries != 1 || last.Unmatched != 0 {
		t.Errorf("last import = %+v", last)
	}
	if first.Account != "acc-1" || first.Format != "camt.053" || first.Balanced == nil || !*first.Balanced ||
		first.Entries != 3 || first.Unmatched != 1 || first.Returns != 1 {
		t.Errorf("first import = %+v", first)
	}
	if si.Unbalanced != (inspect.Count{N: 1, Exact: true}) || si.Unmatched != (inspect.Count{N: 1, Exact: true}) {
		t.Errorf("breaks: unbalanced %+v, unmatched %+v", si.Unbalanced, si.Unmatched)
	}
}

func TestUnmatchedLinesPageNewestFirst(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	b.Seed(t, "paid-1", 1000, settlement.Confirmed, true)
	b.importBytes(t, "day1.xml", camttest.Camt053("day1", camttest.Stmt{Account: "acc-1", Opening: 10_000, Entries: []camttest.Entry{
		camttest.Debit("E1", "paid-1", 1000), camttest.Debit("E2", "stranger-1", 500), camttest.Debit("E3", "stranger-2", 600),
	}}))
	b.importBytes(t, "day2.xml", camttest.Camt053("day2", camttest.Stmt{Account: "acc-1", Opening: 8_900, Entries: []camttest.Entry{
		camttest.Batch("B1", camttest.Tx{E2E: "stranger-3", Amount: 100}, camttest.Tx{E2E: "paid-1", Amount: 1000}, camttest.Tx{E2E: "stranger-4", Amount: 200}),
	}}))
	in := &inspect.Inspector{DB: b.DB.Pool}
	var got []string
	var after inspect.LineCursor
	for pages := 0; pages < 10; pages++ {
		p, err := in.UnmatchedLines(context.Background(), after, 1)
		if err != nil || !p.Available {
			t.Fatalf("page: %+v %v", p, err)
		}
		for _, l := range p.Lines {
			got = append(got, *l.EndToEndID)
		}
		if p.Next.IsZero() {
			break
		}
		if after, err = inspect.ParseLineCursor(p.Next.String()); err != nil || after != p.Next {
			t.Fatalf("cursor %q: %+v %v", p.Next.String(), after, err)
		}
	}
	if want := []string{"stranger-4", "stranger-3", "stranger-2", "stranger-1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("unmatched = %v, want %v", got, want)
	}
	for _, s := range []string{"1", "1.2", "a.b.c", "0.1.1", "1.1.1.1"} {
		if _, err := inspect.ParseLineCursor(s); err == nil {
			t.Errorf("ParseLineCursor(%q) accepted", s)
		}
	}
}
