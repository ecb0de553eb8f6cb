package audit

import (
	"encoding/json"
	"fmt"
	"github.com/settle/settle/inspect"
	"io"
	"slices"
)

// BankJSON is a BankSink and a StatementSink that streams the report as
// the JSON of `settle reconcile bank --json` (DESIGN.md section 8): the
// counts first, then each list in turn, every list present ([] when empty):
// those of BreakClasses, or with SourceStatements those of
// StatementBreakClasses, "unmatched_entries" and "balance_breaks". Memory
// stays flat however long the lists are. Call Finish after the reporter's
// Run returns without error.
type BankJSON struct {
	w     io.Writer
	lists []string // the names of the lists, in order
	cur   int      // index in lists of the open list; -1 before the first
	n     int      // items written in the open list
	err   error
}

// NewBankJSON returns a BankJSON writing to w.
func NewBankJSON(w io.Writer) *BankJSON {
	return &BankJSON{w: w, cur: -1, lists: classNames(BreakClasses)}
}

func classNames(cs []Class) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = string(c)
	}
	return names
}

func (j *BankJSON) write(b []byte) {
	if j.err == nil {
		_, j.err = j.w.Write(b)
	}
}

// Counts implements BankSink.
func (j *BankJSON) Counts(c BankCounts) error {
	j.cur = -1
	head := map[string]any{
		"matched":             c.ByClass[ClassMatched],
		"failed_agreed":       c.ByClass[ClassFailedAgreed],
		"returned_agreed":     c.ByClass[ClassReturnedAgreed],
		"bank_failed_unknown": c.ByClass[ClassBankFailedUnknown],
		"discrepancies":       c.Discrepancies(),
		"settlements":         c.Settlements,
		"bank_payments":       c.BankPayments,
		"rechecked":           c.Rechecked,
		"as_of":               c.AsOf,
	}
	j.lists = classNames(BreakClasses)
	if c.Source == SourceStatements {
		head = map[string]any{
			"source":          c.Source,
			"matched":         c.ByClass[ClassMatched],
			"failed_agreed":   c.ByClass[ClassFailedAgreed],
			"returned_agreed": c.ByClass[ClassReturnedAgreed],
			"discrepancies":   c.Discrepancies(),
			"settlements":     c.Settlements,
			"statement_files": c.StatementFiles,
			"statements":      c.Statements,
			"statement_lines": c.StatementLines,
			"last_import_at":  c.LastImportAt,
			"as_of":           c.AsOf,
		}
		j.lists = append(classNames(StatementBreakClasses), string(ClassUnmatchedEntries), string(ClassBalanceBreaks))
	}
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	// {"as_of":…,…,"settlements":n — the lists follow.
	j.write(b[:len(b)-1])
	return j.err
}

func (j *BankJSON) openUpTo(i int) {
	for j.cur < i {
		if j.cur >= 0 {
			j.write([]byte("]"))
		}
		j.cur++
		j.write(fmt.Appendf(nil, ",%q:[", j.lists[j.cur]))
		j.n = 0
	}
}

// add writes v as the next item of the list named list.
func (j *BankJSON) add(list string, v any) error {
	i := slices.Index(j.lists, list)
	if i < 0 {
		return fmt.Errorf("error writing the report: no list %q in this report", list)
	}
	if i < j.cur {
		return fmt.Errorf("error writing the report: %s arrived after %s", list, j.lists[j.cur])
	}
	j.openUpTo(i)
	if j.n > 0 {
		j.write([]byte(","))
	}
	j.n++
	bs, err := json.Marshal(v)
	if err != nil {
		return err
	}
	j.write(bs)
	return j.err
}

// Break implements BankSink.
func (j *BankJSON) Break(b Break) error { return j.add(string(b.Class), b) }

// UnmatchedEntry implements StatementSink.
func (j *BankJSON) UnmatchedEntry(l inspect.StatementLine) error {
	return j.add(string(ClassUnmatchedEntries), l)
}

// BalanceBreak implements StatementSink.
func (j *BankJSON) BalanceBreak(b inspect.BalanceBreak) error {
	return j.add(string(ClassBalanceBreaks), b)
}

// Finish closes the lists and the object.
func (j *BankJSON) Finish() error {
	j.openUpTo(len(j.lists) - 1)
	j.write([]byte("]}\n"))
	return j.err
}

var _ StatementSink = (*BankJSON)(nil)
