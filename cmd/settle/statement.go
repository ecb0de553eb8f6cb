package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/settle/settle/internal/cli"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statement"
)

const statementDescription = `
Bank statement files: ISO 20022 camt.053 and camt.054 (versions .001.02 to
.001.08), BAI2 and SWIFT MT940. The format is detected from the content.

Forms:
  settle statement parse FILE... [--json]   the normalised view of each file:
                                           statements, balances, entries
  settle statement import FILE... [--json]  store each file once, match its lines to
                                           settlements, list what nothing explains

Exit status:
  0  every file was read (imported) and every statement balances (or carries no
     balances); import: and every line was matched, no return was found
  1  a statement does not balance: opening + credits - debits is not the closing;
     import: also unmatched lines or returns
  2  a file could not be read or is not a valid statement (the error names the
     file and the line or element); import: or the database is unreachable`

// cmdStatement is `settle statement`.
func cmdStatement(ctx context.Context, args []string, s Stdio) int {
	form := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		form, args = args[0], args[1:]
	}
	switch form {
	case "parse":
		return statementParse(args, s)
	case "import":
		return (&importCmd{s: s}).run(ctx, args)
	case "":
		fs := newFlagSet("statement", "parse|import FILE... [--json]", statementDescription, s)
		if code, done := parseFlags(fs, args); done {
			return code
		}
		fs.Usage()
		return exitError
	}
	fmt.Fprintf(s.Err, "settle statement: unknown form %q (want parse or import; see settle statement --help)\n", form)
	return exitError
}

// statementParse is `settle statement parse FILE... [--json]`.
func statementParse(args []string, s Stdio) int {
	fs := newFlagSet("statement parse", "FILE... [--json]", `
Parse bank statement files (camt.053, camt.054, BAI2, MT940; detected from the
content) and print what each holds: per statement the account, currency,
balances and whether they add up, and every entry with its amount, direction,
dates, references, reversal and return reason. FILE - reads standard input.

Exit status: 0 all read and balanced, 1 a statement does not balance, 2 a file
could not be read (the error names the file and the line or element).`, s)
	asJSON := fs.Bool("json", false, `print {"files":[...]} as JSON (the contract of DESIGN section 14)`)
	files, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(files) == 0 {
		fmt.Fprintln(s.Err, "settle statement parse: no FILE given (see settle statement parse --help)")
		return exitError
	}
	code = exitOK
	parsed := []*statement.File{}
	for _, name := range files {
		f, err := parseStatementFile(name, s.In)
		if err != nil {
			fmt.Fprintf(s.Err, "settle statement parse: %v\n", err)
			code = exitError
			continue
		}
		parsed = append(parsed, f)
		for _, st := range f.Statements {
			if st.Balanced != nil && !*st.Balanced && code == exitOK {
				code = exitFindings
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(s.Out)
		if err := enc.Encode(struct {
			Files []*statement.File `json:"files"`
		}{parsed}); err != nil {
			fmt.Fprintf(s.Err, "settle statement parse: %v\n", err)
			return exitError
		}
		return code
	}
	printStatements(s.Out, parsed, cli.IsTerminal(s.Out))
	return code
}

// parseStatementFile reads one file; "-" is standard input.
func parseStatementFile(name string, stdin io.Reader) (*statement.File, error) {
	if name == "-" {
		return statement.Parse("-", stdin)
	}
	f, err := os.Open(name) //nolint:gosec // the operator names the file to read
	if err != nil {
		return nil, err // *PathError names the file
	}
	defer f.Close()
	return statement.Parse(name, f)
}

// printStatements writes the human view: aligned columns on a terminal,
// tab-separated ones otherwise (for cut and awk).
func printStatements(out io.Writer, files []*statement.File, terminal bool) {
	w := out
	var tw *tabwriter.Writer
	if terminal {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		w = tw
	}
	for i, f := range files {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: %s, %d statement(s)\n", f.File, f.Format, len(f.Statements))
		for j, st := range f.Statements {
			fmt.Fprintf(w, "\nstatement %d: account %s %s, opening %s, closing %s, balanced %s, %d entries\n",
				j+1, orDash(st.Account), orDash(st.Currency), balance(st.OpeningMinor, st.Currency),
				balance(st.ClosingMinor, st.Currency), balancedWord(st.Balanced), len(st.Entries))
			if len(st.Entries) == 0 {
				continue
			}
			fmt.Fprintln(w)
			fmt.Fprintln(w, "booked\tvalue\tdirection\tamount\tcurrency\tentry ref\treferences\ttransactions\tflags")
			for _, e := range st.Entries {
				refs := []string{}
				for _, t := range e.Transactions {
					if t.Reference != "" {
						refs = append(refs, t.Reference)
					}
				}
				var flags []string
				if e.Reversal {
					flags = append(flags, "reversal")
				}
				if e.ReturnReason != "" {
					flags = append(flags, "return "+e.ReturnReason)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n",
					orDash(e.BookedOn), orDash(e.ValueOn), e.Direction, formatMinor(e.AmountMinor, e.Currency),
					e.Currency, orDash(e.EntryRef), orDash(strings.Join(refs, ",")), len(e.Transactions),
					orDash(strings.Join(flags, ",")))
			}
		}
		if tw != nil {
			_ = tw.Flush()
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func balancedWord(b *bool) string {
	switch {
	case b == nil:
		return "n/a"
	case *b:
		return "yes"
	}
	return "NO"
}

func balance(v *int64, currency string) string {
	if v == nil {
		return "-"
	}
	return formatMinor(*v, currency)
}

// formatMinor writes minor units as a decimal in the currency's exponent
// (-1234 EUR is -12.34); exact, without floats.
func formatMinor(v int64, currency string) string {
	cur, err := settlement.LookupCurrency(currency)
	if err != nil || cur.Exponent == 0 {
		return strconv.FormatInt(v, 10)
	}
	sign := ""
	u := uint64(v)
	if v < 0 {
		sign, u = "-", uint64(-v)
	}
	digits := strconv.FormatUint(u, 10)
	if len(digits) <= cur.Exponent {
		digits = strings.Repeat("0", cur.Exponent-len(digits)+1) + digits
	}
	cut := len(digits) - cur.Exponent
	return sign + digits[:cut] + "." + digits[cut:]
}
