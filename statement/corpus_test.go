package statement

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// corpusDir is the shared corpus of published statement files, beside the
// repository (../shared from the module root).
const corpusDir = "../../shared/corpus/statements"

// corpusFile is one file's hand-checked expectations (SOURCES.md in the
// corpus says what each figure means). A nil field is not checked.
type corpusFile struct {
	Format       Format           `json:"format"`
	Statements   []corpusExpected `json:"statements"`
	AmountErrors []any            `json:"amount_errors"`
}

type corpusExpected struct {
	Account      *string          `json:"account"`
	Currency     *string          `json:"currency"`
	Entries      *int             `json:"entries"`
	Transactions *int             `json:"transactions"`
	CreditMinor  map[string]int64 `json:"credit_minor"`
	DebitMinor   map[string]int64 `json:"debit_minor"`
	Reversals    *int             `json:"reversals"`
	Returns      *int             `json:"returns"`
	OpeningMinor *int64           `json:"opening_minor"`
	ClosingMinor *int64           `json:"closing_minor"`
	Balanced     *bool            `json:"balanced"`
	References   []string         `json:"references"`
}

// corpus returns the corpus directory and its expectations, skipping the
// test when the corpus is absent, unless CI=true, where that fails.
func corpus(t *testing.T) (string, map[string]corpusFile) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(corpusDir, "expected.json"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the shared statement corpus must be present in CI: %v", err)
		}
		t.Skipf("shared statement corpus not found (%v); set CI=true to make this a failure", err)
	}
	var want map[string]corpusFile
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("expected.json: %v", err)
	}
	return corpusDir, want
}

func TestCorpusEveryFileHasExpectations(t *testing.T) {
	t.Parallel()
	dir, want := corpus(t)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || name == "expected.json" || name == "SOURCES.md" {
			continue
		}
		n++
		if _, ok := want[name]; !ok {
			t.Errorf("%s: no expectation in expected.json", name)
		}
	}
	for name := range want {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("expected.json names %s: %v", name, err)
		}
	}
	if n == 0 {
		t.Fatal("no statement files in the corpus")
	}
}

func TestCorpus(t *testing.T) {
	t.Parallel()
	dir, want := corpus(t)
	for _, name := range slices.Sorted(maps.Keys(want)) {
		exp := want[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f, err := os.Open(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := Parse(name, f)
			if len(exp.AmountErrors) > 0 {
				if !errors.Is(err, ErrInexactAmount) {
					t.Fatalf("Parse = %v, want an inexact-amount error (%v)", err, exp.AmountErrors)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got.Format != exp.Format {
				t.Errorf("format %q, want %q", got.Format, exp.Format)
			}
			if len(got.Statements) != len(exp.Statements) {
				t.Fatalf("%d statements, want %d", len(got.Statements), len(exp.Statements))
			}
			for i, w := range exp.Statements {
				checkCorpusStatement(t, i, &got.Statements[i], &w)
			}
		})
	}
}

func checkCorpusStatement(t *testing.T, i int, st *Statement, w *corpusExpected) {
	t.Helper()
	fig := figures(st)
	errorf := func(what string, got, want any) {
		t.Helper()
		t.Errorf("statement %d (%s): %s = %v, want %v", i+1, st.Account, what, got, want)
	}
	if w.Account != nil && st.Account != *w.Account {
		errorf("account", st.Account, *w.Account)
	}
	if w.Currency != nil && st.Currency != *w.Currency {
		errorf("currency", st.Currency, *w.Currency)
	}
	if w.Entries != nil && len(st.Entries) != *w.Entries {
		errorf("entries", len(st.Entries), *w.Entries)
	}
	if w.Transactions != nil && fig.transactions != *w.Transactions {
		errorf("transactions", fig.transactions, *w.Transactions)
	}
	if w.CreditMinor != nil && !maps.Equal(fig.credit, w.CreditMinor) {
		errorf("credit_minor", fig.credit, w.CreditMinor)
	}
	if w.DebitMinor != nil && !maps.Equal(fig.debit, w.DebitMinor) {
		errorf("debit_minor", fig.debit, w.DebitMinor)
	}
	if w.Reversals != nil && fig.reversals != *w.Reversals {
		errorf("reversals", fig.reversals, *w.Reversals)
	}
	if w.Returns != nil && fig.returns != *w.Returns {
		errorf("returns", fig.returns, *w.Returns)
	}
	if w.OpeningMinor != nil && !equalPtr(st.OpeningMinor, w.OpeningMinor) {
		errorf("opening_minor", show(st.OpeningMinor), *w.OpeningMinor)
	}
	if w.ClosingMinor != nil && !equalPtr(st.ClosingMinor, w.ClosingMinor) {
		errorf("closing_minor", show(st.ClosingMinor), *w.ClosingMinor)
	}
	if w.Balanced != nil && !equalPtr(st.Balanced, w.Balanced) {
		errorf("balanced", show(st.Balanced), *w.Balanced)
	}
	if w.References != nil && !slices.Equal(fig.references, w.References) {
		errorf("references", fig.references, w.References)
	}
}

// statementFigures are the figures expected.json states about a statement.
type statementFigures struct {
	transactions, reversals, returns int
	credit, debit                    map[string]int64
	references                       []string
}

func figures(st *Statement) statementFigures {
	f := statementFigures{credit: map[string]int64{}, debit: map[string]int64{}, references: []string{}}
	for _, e := range st.Entries {
		f.transactions += len(e.Transactions)
		if e.Reversal {
			f.reversals++
		}
		if e.Direction == Credit {
			f.credit[e.Currency] += e.AmountMinor
		} else {
			f.debit[e.Currency] += e.AmountMinor
		}
		for _, tx := range e.Transactions {
			if tx.ReturnReason != "" {
				f.returns++
			}
			if tx.Reference != "" {
				f.references = append(f.references, tx.Reference)
			}
		}
	}
	slices.Sort(f.references)
	f.references = slices.Compact(f.references)
	return f
}

func equalPtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
