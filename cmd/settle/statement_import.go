package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/cli"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/statement/importer"
)

// importCmd is `settle statement import`. dbURL, when set, is used instead
// of DATABASE_URL or the embedded default (tests pass it).
type importCmd struct {
	s     Stdio
	dbURL string
}

// importRefusal is a file that could not be imported.
type importRefusal struct {
	File  string `json:"file"`
	Error string `json:"error"`
}

// run runs the import; output that could not be written exits 2, as in
// settle reconcile.
func (c *importCmd) run(ctx context.Context, args []string) int {
	out := &outputWriter{w: c.s.Out}
	inner := *c
	inner.s.Out = out
	code := inner.importFiles(ctx, args)
	if out.err != nil {
		fmt.Fprintf(c.s.Err, "settle statement import: error writing the output: %v\n", out.err)
		return exitError
	}
	return code
}

func (c *importCmd) importFiles(ctx context.Context, args []string) int {
	fs := newFlagSet("statement import", "FILE... [--json]", `
Import bank statement files (camt.053, camt.054, BAI2, MT940; detected from the
content) into the database, each in one transaction, and match their lines to
settlements by the reference settle sent the bank, through batches. A file is
known by the SHA-256 of its bytes: importing it again, under any name, changes
nothing and says so. Lines that no settlement explains are kept and listed,
with a suggestion (same amount and currency, close date, the beneficiary
named as counterparty first) where there is one;
a suggestion is never a match. Returns and reversals of settled payouts are
listed (settle reconcile bank --statements reports them as returned). A file
that is not a valid statement is refused whole: nothing of it is stored.
FILE - reads standard input.

Every statement must be for an account declared with --statement-account
(repeat it, or separate accounts with commas; env SETTLE_STATEMENT_ACCOUNT;
spaces and case do not count): a file with a statement for any other account,
or naming none, is refused whole, and without a declared account nothing is
imported. A matched line books only when its amount and currency are the
settlement's (a credit only when it carries return information); a line with
no amount, a zero amount, another currency or amount is flagged
statement_amount_mismatch (partial_return for a return of another amount) and
listed as not booked. A statement never fails a settlement. With
--credit-prefix P, a credit matched to no settlement and carrying no return
information whose reference is P followed by an account id (say P "fund:" and
the reference "fund:merchant-7") brings its amount into that account of the
ledger (settle ledger balance), once however often the file is imported; it
is still listed as unmatched, since no settlement explains it.

Exit status: 0 imported (or imported before), everything matched; 1 lines
unmatched, returns, lines not booked, or a statement that does not balance;
2 a file could not be imported (the others are), no account is declared, or
the database is unreachable.`, c.s)
	asJSON := fs.Bool("json", false, `print {"files":[{"file","digest","format","imported","imported_as","imported_at","statements","entries","lines","matched","suggested","unmatched","returns","not_booked","unbalanced","unmatched_entries":[...],"returned":[...],"balance_breaks":[...],"not_booked_entries":[...]}],"refused":[{"file","error"}]}`)
	var accounts accountList
	fs.Var(&accounts, "statement-account", "an account the statements may be for (repeatable, or comma-separated; env SETTLE_STATEMENT_ACCOUNT); required")
	creditPrefix := fs.String("credit-prefix", os.Getenv("SETTLE_CREDIT_PREFIX"), "a credit matched to no settlement and carrying no return information whose reference is this prefix and an account id brings its amount into that ledger account, once per line (env SETTLE_CREDIT_PREFIX; empty: statements credit nothing)")
	limit := fs.Int("limit", 20, "lines printed per list in the table (--json lists up to 1000 per file; settle reconcile bank --statements lists all)")
	files, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(files) == 0 {
		fmt.Fprintln(c.s.Err, "settle statement import: no FILE given (see settle statement import --help)")
		return exitError
	}
	if len(accounts) == 0 {
		_ = accounts.Set(os.Getenv("SETTLE_STATEMENT_ACCOUNT"))
	}
	if len(accounts) == 0 {
		// Strict: a file of another account must never book anything, and
		// nothing here can tell which accounts settle pays from.
		fmt.Fprintln(c.s.Err, "settle statement import: no statement account declared: name the accounts your statements are for with --statement-account (or SETTLE_STATEMENT_ACCOUNT); nothing imported")
		return exitError
	}
	pool := c.open(ctx)
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	im := &importer.StatementImporter{DB: pool, Returns: &reconcile.Resolver{DB: pool}, Accounts: accounts, CreditPrefix: *creditPrefix}

	code = exitOK
	results := []importer.ImportResult{}
	refused := []importRefusal{}
	for _, name := range files {
		var bar *cli.Bar
		started := false
		im.Progress = func(n int64) {
			if !started {
				bar, started = cli.NewBar(c.s.Err, -1, "importing "+name), true
			}
			bar.Set(n)
		}
		res, err := c.importOne(ctx, im, name)
		bar.Finish()
		if err != nil {
			msg := oneLine(err)
			if errors.Is(err, importer.ErrUndeclaredAccount) {
				msg += " (declare the account with --statement-account if its statements are settle's)"
			}
			fmt.Fprintf(c.s.Err, "settle statement import: %s\n", msg)
			refused = append(refused, importRefusal{File: name, Error: msg})
			code = exitError
			continue
		}
		results = append(results, res)
		if res.Findings() && code == exitOK {
			code = exitFindings
		}
		if !*asJSON {
			printImport(c.s.Out, res, *limit)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(c.s.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Files   []importer.ImportResult `json:"files"`
			Refused []importRefusal         `json:"refused"`
		}{results, refused}); err != nil {
			fmt.Fprintf(c.s.Err, "settle statement import: %v\n", err)
			return exitError
		}
	}
	return code
}

// importOne imports one file; "-" is standard input, read once like a
// file (the importer hashes what it parses).
func (c *importCmd) importOne(ctx context.Context, im *importer.StatementImporter, name string) (importer.ImportResult, error) {
	if name != "-" {
		return im.ImportFile(ctx, name)
	}
	return im.Import(ctx, "-", c.s.In)
}

// accountList is --statement-account: repeatable, each value a
// comma-separated list (as SETTLE_STATEMENT_ACCOUNT holds it).
type accountList []string

func (l *accountList) String() string { return strings.Join(*l, ",") }

func (l *accountList) Set(v string) error {
	for a := range strings.SplitSeq(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			*l = append(*l, a)
		}
	}
	return nil
}

// open connects to the database and checks that it answers.
func (c *importCmd) open(ctx context.Context) *pgxpool.Pool {
	pool, err := connect(ctx, c.s, c.dbURL, database.PoolOptions{MaxConns: 2, ApplicationName: "settle statement import"})
	if err != nil {
		fmt.Fprintf(c.s.Err, "settle statement import: %s\n", oneLine(err))
	}
	return pool
}

// oneLine is err's text on one line (pgx joins the errors of several
// addresses with newlines).
func oneLine(err error) string {
	return strings.NewReplacer("\n\t", "; ", "\n", "; ").Replace(strings.TrimSpace(err.Error()))
}

// printImport writes what importing one file did, for people.
func printImport(w io.Writer, r importer.ImportResult, limit int) {
	what := "imported"
	if !r.Imported {
		what = fmt.Sprintf("already imported on %s as %s: nothing changed", r.ImportedAt.UTC().Format(time.RFC3339), r.ImportedAs)
	}
	fmt.Fprintf(w, "%s: %s, %s (%s)\n", r.File, what, r.Format, r.Digest)
	fmt.Fprintf(w, "  %d statements, %d entries, %d lines: %d matched, %d unmatched (%d with a suggestion), %d credited to ledger accounts, %d returns, %d not booked, %d statements that do not balance\n",
		r.Statements, r.Entries, r.Lines, r.Matched, r.Unmatched, r.Suggested, r.Credited, r.Returns, r.NotBooked, r.Unbalanced)
	printLines(w, "unmatched", r.UnmatchedEntries, r.Unmatched, limit)
	printLines(w, "returned", r.Returned, r.Returns, limit)
	printLines(w, "not booked (flagged on their settlement where they would have moved it)", r.NotBookedEntries, r.NotBooked, limit)
	if len(r.Credits) > 0 {
		fmt.Fprintf(w, "\n  credits to ledger accounts (%d)\n", len(r.Credits))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  LINE\tREFERENCE\tACCOUNT\tAMOUNT\tNOTE")
		for _, c := range r.Credits {
			note := "posted"
			switch {
			case c.Error != "":
				note = "not posted: " + c.Error
			case c.Replayed:
				note = "posted before"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s %s\t%s\n", shortDigest(c.Line), c.Reference, c.AccountID,
				formatMinor(c.AmountMinor, c.Currency), c.Currency, note)
		}
		_ = tw.Flush()
	}
	if len(r.BalanceBreaks) > 0 {
		fmt.Fprintf(w, "\n  statements that do not balance (%d)\n", r.Unbalanced)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  STATEMENT\tACCOUNT\tOPENING\tCREDITS\tDEBITS\tCLOSING\tDIFFERENCE")
		for _, b := range r.BalanceBreaks {
			ccy := deref(b.Currency)
			diff := "?"
			if b.DifferenceMinor != nil {
				diff = formatMinor(*b.DifferenceMinor, ccy)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortDigest(b.Statement), orDash(deref(b.Account)),
				formatMinor(b.OpeningMinor, ccy), formatMinor(b.CreditsMinor, ccy), formatMinor(b.DebitsMinor, ccy),
				formatMinor(b.ClosingMinor, ccy), diff)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
}

// printLines writes up to limit statement lines under a title.
func printLines(w io.Writer, title string, lines []inspect.StatementLine, total int64, limit int) {
	if total == 0 {
		return
	}
	fmt.Fprintf(w, "\n  %s (%d)\n", title, total)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ENTRY\tACCOUNT\tBOOKED\tDIRECTION\tAMOUNT\tENTRY REF\tREFERENCE\tCOUNTERPARTY\tSETTLEMENT\tNOTE")
	n := 0
	for _, l := range lines {
		if limit > 0 && n >= limit {
			break
		}
		n++
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", lineWhere(l), orDash(deref(l.Account)), orDash(deref(l.BookedOn)),
			l.Direction, lineAmount(l), orDash(deref(l.EntryRef)), orDash(deref(l.EndToEndID)), lineParty(l), orDash(deref(l.SettlementID)), lineNote(l))
	}
	_ = tw.Flush()
	if int64(n) < total {
		fmt.Fprintf(w, "  … and %d more (--json, or settle reconcile bank --statements --json, lists them)\n", total-int64(n))
	}
}

// lineWhere says where a line is: statement n, entry p, detail i of k.
func lineWhere(l inspect.StatementLine) string {
	_, seq, _ := strings.Cut(l.Statement, "/")
	s := fmt.Sprintf("%s.%d", seq, l.Position)
	if l.TxCount > 1 {
		s += fmt.Sprintf(" (%d of %d)", l.TxIndex, l.TxCount)
	}
	return s
}

func lineAmount(l inspect.StatementLine) string {
	if l.AmountMinor == nil {
		return "? " + l.Currency
	}
	return formatMinor(*l.AmountMinor, l.Currency) + " " + l.Currency
}

// lineParty is the line's counterparty: its name and account, as the
// bank reports them.
func lineParty(l inspect.StatementLine) string {
	return orDash(strings.TrimSpace(l.Counterparty + " " + l.CounterpartyAccount))
}

func lineNote(l inspect.StatementLine) string {
	var notes []string
	if l.Reversal {
		notes = append(notes, "reversal")
	}
	if l.ReturnReason != nil {
		notes = append(notes, "return "+*l.ReturnReason)
	}
	if l.Problem != "" {
		notes = append(notes, l.Problem)
	}
	if l.SuggestedSettlementID != "" {
		notes = append(notes, "suggested: "+l.SuggestedSettlementID+" ("+l.Suggestion+")")
	}
	return orDash(strings.Join(notes, "; "))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// shortDigest shortens sha256:<64 hex>/n to sha256:<12 hex>…/n.
func shortDigest(d string) string {
	if len(d) > 7+12 && strings.HasPrefix(d, "sha256:") {
		rest := d[7:]
		tail := ""
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest, tail = rest[:i], rest[i:]
		}
		if len(rest) > 12 {
			return "sha256:" + rest[:12] + "…" + tail
		}
	}
	return d
}
