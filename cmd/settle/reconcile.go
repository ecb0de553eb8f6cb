package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/cli"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statement/importer"
)

const reconcileDescription = `
Inspection and reconciliation: what is stuck and since when, what happened to
one settlement, what conflicted, and whether the ledger agrees with the bank.
Every read runs in a read-only snapshot and never blocks the worker.

Forms (each takes --json and --help):
  settle reconcile                         counts by state, the oldest open settlement of
                                           each state, needs investigation, receipts,
                                           replays, conflicts, movements
  settle reconcile list --state S [--older-than D]
                                           the settlements in state S, oldest first
                                           (by receipt, the console's order)
  settle reconcile show ID                 the whole story of one settlement in time order
  settle reconcile conflicts               recorded receipt conflicts and what differed
  settle reconcile rejects                 messages of event sources that could never be
                                           accepted (kept with their bytes in intake_rejects)
  settle reconcile resolve ID|--all        ask the bank now and apply the answer (the
                                           reconcile job's own code)
  settle reconcile bank [--bank-url U]     the ledger against the bank's statement
  settle reconcile bank --statements       the ledger against the imported bank statements

Exit status:
  0  clean (list, show, conflicts, rejects: the answer was printed)
  1  findings: settlements needing investigation (summary, resolve), discrepancies
     with the bank (bank), no such settlement (show, resolve)
  2  could not run: database or bank unreachable, bad arguments`

// reconcileCmd carries what the forms share. dbURL, when set, is used
// instead of DATABASE_URL or the embedded default (tests pass it).
type reconcileCmd struct {
	s     Stdio
	dbURL string
	now   func() time.Time
}

// cmdReconcile is `settle reconcile`.
func cmdReconcile(ctx context.Context, args []string, s Stdio) int {
	return (&reconcileCmd{s: s, now: time.Now}).run(ctx, args)
}

// outputWriter is the standard output of a form: it remembers the first
// write that failed and refuses every later one, so that a report that
// could not be written (a closed pipe, a full disk) is an error, never a
// success.
type outputWriter struct {
	w   io.Writer
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	o.err = err
	return n, err
}

// run runs the form args name. Whatever the form, output that could not
// be written exits 2 (could not run): what was printed is not the report.
func (c *reconcileCmd) run(ctx context.Context, args []string) int {
	out := &outputWriter{w: c.s.Out}
	inner := *c
	inner.s.Out = out
	code := inner.form(ctx, args)
	if out.err != nil {
		fmt.Fprintf(c.s.Err, "settle reconcile: error writing the output: %v\n", out.err)
		return exitError
	}
	return code
}

func (c *reconcileCmd) form(ctx context.Context, args []string) int {
	form := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		form, args = args[0], args[1:]
	}
	switch form {
	case "", "summary":
		return c.summary(ctx, args)
	case "list":
		return c.list(ctx, args)
	case "show":
		return c.show(ctx, args)
	case "conflicts":
		return c.conflicts(ctx, args)
	case "rejects":
		return c.rejects(ctx, args)
	case "resolve":
		return c.resolve(ctx, args)
	case "bank":
		return c.bank(ctx, args)
	}
	fmt.Fprintf(c.s.Err, "settle reconcile: unknown form %q (want list, show, conflicts, rejects, resolve or bank; see settle reconcile --help)\n", form)
	return exitError
}

// fail prints one line saying why the form could not run (pgx joins the
// errors of several addresses with newlines: they become "; ").
func (c *reconcileCmd) fail(form string, err error) int {
	msg := strings.NewReplacer("\n\t", "; ", "\n", "; ").Replace(strings.TrimSpace(err.Error()))
	fmt.Fprintf(c.s.Err, "settle reconcile%s: %s\n", form, msg)
	return exitError
}

// parseArgs parses flags placed before, between or after the positional
// arguments (settle reconcile show ID --json), which flag.Parse alone
// stops at, and returns the positional ones.
func parseArgs(fs *flag.FlagSet, args []string) (pos []string, code int, done bool) {
	for {
		if code, done = parseFlags(fs, args); done {
			return nil, code, true
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, exitOK, false
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// parseAtMost is parseArgs for a form that takes at most most positional
// arguments: more are refused with one line on the flag set's output.
func parseAtMost(fs *flag.FlagSet, args []string, most int) (pos []string, code int, done bool) {
	if pos, code, done = parseArgs(fs, args); done {
		return nil, code, true
	}
	if len(pos) > most {
		fmt.Fprintf(fs.Output(), "%s: unexpected arguments %q\n", fs.Name(), pos[most:])
		return nil, exitError, true
	}
	return pos, exitOK, false
}

// query opens the database with open, which says on s.Err why it could
// not, and returns what q read from it; q's error is one line of the
// form fs on the flag set's output. ok is false when the form must end
// with exitError.
func query[T any](ctx context.Context, fs *flag.FlagSet, open func(ctx context.Context, form string) *pgxpool.Pool,
	q func(pool *pgxpool.Pool) (T, error)) (v T, ok bool) {
	name := fs.Name()
	pool := open(ctx, name[strings.LastIndexByte(name, ' ')+1:])
	if pool == nil {
		return v, false
	}
	defer pool.Close()
	v, err := q(pool)
	if err != nil {
		fmt.Fprintf(fs.Output(), "%s: %v\n", name, err)
		return v, false
	}
	return v, true
}

// open connects to the database and checks that it answers, so that an
// unreachable database is one clear line, not a failed query.
func (c *reconcileCmd) open(ctx context.Context, form string) *pgxpool.Pool {
	pool, err := connect(ctx, c.s, c.dbURL, database.PoolOptions{MaxConns: 4, ApplicationName: "settle reconcile"})
	if err != nil {
		c.fail(form, err)
	}
	return pool
}

func (c *reconcileCmd) inspector(pool *pgxpool.Pool) *inspect.Inspector {
	return &inspect.Inspector{DB: pool, Now: c.now}
}

// bankFlags are the flags of the forms that talk to the bank.
type bankFlags struct {
	name     string
	url      string
	timeout  time.Duration
	insecure bool
}

func (b *bankFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.name, "bank", "settle", "the bank connector: "+connectorNames()+" (env SETTLE_BANK)")
	fs.StringVar(&b.url, "bank-url", "", "base URL of the bank (env SETTLE_BANK_URL; default: the connector's own, "+connectorURLs()+")")
	fs.DurationVar(&b.timeout, "bank-timeout", bankclient.DefaultTimeout, "timeout of one HTTP attempt to the bank")
	fs.BoolVar(&b.insecure, "bank-insecure-http", false, "allow plain http to a bank that is not on this machine, never with a credential (env SETTLE_BANK_INSECURE_HTTP; said loudly on stderr)")
}

// client builds the bank client of the connector (credentials from the
// SETTLE_BANK_* environment) and checks that the bank answers; warnings
// (plain http by --bank-insecure-http) go to stderr.
func (b *bankFlags) client(ctx context.Context, stderr io.Writer) (bankclient.Bank, bankclient.Capabilities, error) {
	if strings.Contains(b.name, ",") {
		return nil, bankclient.Capabilities{}, fmt.Errorf("--bank %s: reconcile speaks to one bank at a time; run it once per bank (--bank NAME, with that bank's SETTLE_BANK_* environment)", b.name)
	}
	conn, err := connectors().Lookup(b.name)
	if err != nil {
		return nil, bankclient.Capabilities{}, err
	}
	if b.url == "" {
		b.url = conn.URL()
	}
	env := secretEnv{getenv: os.Getenv}
	opts := bankclient.OptionsFromEnv(env.get)
	if env.err != nil {
		return nil, bankclient.Capabilities{}, env.err
	}
	opts.Timeout = b.timeout
	if b.insecure {
		opts.InsecureHTTP = true
		opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cl, err := conn.New(b.url, opts)
	if err != nil {
		return nil, bankclient.Capabilities{}, fmt.Errorf("error configuring the bank client: %w", err)
	}
	if conn.Capabilities.Search {
		if _, err := cl.Statement(ctx, "", 1); err != nil {
			return nil, bankclient.Capabilities{}, fmt.Errorf("bank unreachable at %s: %w", b.url, err)
		}
	}
	return cl, conn.Capabilities, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// age prints a duration in seconds for humans: 3h2m5s, 45s.
func age(seconds float64) string {
	return (time.Duration(seconds) * time.Second).String()
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// ---- summary ----

func (c *reconcileCmd) summary(ctx context.Context, args []string) int {
	fs := newFlagSet("reconcile", "[list|show|conflicts|rejects|resolve|bank] [flags]", reconcileDescription, c.s)
	asJSON := fs.Bool("json", false, `print {"by_state":{...},"receipts","replays","conflicts","movements","oldest_uncertain_age_seconds",...}`)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.s.Err, "settle reconcile: unexpected arguments %q\n", fs.Args())
		return exitError
	}
	pool := c.open(ctx, "")
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	sum, err := c.inspector(pool).Summary(ctx)
	if err != nil {
		return c.fail("", err)
	}
	if *asJSON {
		_ = writeJSON(c.s.Out, sum)
	} else {
		tw := tabwriter.NewWriter(c.s.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STATE\tCOUNT\tOLDEST IN STATE")
		for _, st := range settlement.States {
			oldest := ""
			if a, ok := sum.OldestOpenAgeSeconds[st]; ok {
				oldest = age(a)
				if st == settlement.Uncertain {
					oldest += " (" + sum.OldestUncertainID + ")"
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", st, sum.ByState[st], oldest)
		}
		fmt.Fprintln(tw, "\t\t")
		hint := ""
		if sum.NeedsInvestigation > 0 {
			hint = "settle reconcile list --state uncertain"
		}
		fmt.Fprintf(tw, "needs investigation\t%d\t%s\n", sum.NeedsInvestigation, hint)
		fmt.Fprintf(tw, "receipts\t%d\t\n", sum.Receipts)
		fmt.Fprintf(tw, "replays\t%d\t\n", sum.Replays)
		hint = ""
		if sum.Conflicts > 0 {
			hint = "settle reconcile conflicts"
		}
		fmt.Fprintf(tw, "conflicts\t%d\t%s\n", sum.Conflicts, hint)
		fmt.Fprintf(tw, "movements\t%d\t\n", sum.Movements)
		ledgerState := "balanced"
		if !sum.Ledger.Balanced {
			ledgerState = "NOT BALANCED"
		}
		fmt.Fprintf(tw, "ledger\t%s, %d mismatch(es)\t\n", ledgerState, len(sum.Ledger.Mismatches))
		_ = tw.Flush()
		for _, m := range sum.Ledger.Mismatches {
			fmt.Fprintf(c.s.Out, "  %s\n", m)
		}
	}
	if sum.Findings() {
		return exitFindings
	}
	return exitOK
}

// ---- list ----

func (c *reconcileCmd) list(ctx context.Context, args []string) int {
	fs := newFlagSet("reconcile list", "--state S [--older-than D] [flags]", `
Lists the settlements in one state, oldest first (by receipt): since when,
the bank's last answer, attempts, the next check, and needs_investigation
with its reason. Exit 0 when it ran (even when the list is empty).`, c.s)
	state := fs.String("state", "", "state to list: pending, sent, uncertain, confirmed or failed (required)")
	olderThan := fs.Duration("older-than", 0, "only settlements in the state for at least this long (e.g. 10m)")
	onlyBank := fs.String("bank", "", "only settlements bound to this bank (settle, stripe, obie)")
	limit := fs.Int("limit", 0, "stop after this many (0: all)")
	asJSON := fs.Bool("json", false, `print {"state","older_than_seconds","settlements":[...],"count"}`)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	st := settlement.State(*state)
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(c.s.Err, "settle reconcile list: unexpected arguments %q\n", fs.Args())
		return exitError
	case !st.Valid():
		fmt.Fprintf(c.s.Err, "settle reconcile list: --state must be one of pending, sent, uncertain, confirmed, failed (got %q)\n", *state)
		return exitError
	case *olderThan < 0:
		fmt.Fprintln(c.s.Err, "settle reconcile list: --older-than must not be negative")
		return exitError
	}
	pool := c.open(ctx, " list")
	if pool == nil {
		return exitError
	}
	defer pool.Close()

	opts := inspect.ListOptions{State: st, OlderThan: *olderThan, Limit: *limit, Bank: *onlyBank}
	err := printListing(c.s.Out, *asJSON, listing[inspect.SettlementRow]{
		key: "settlements", head: []any{"state", st, "older_than_seconds", olderThan.Seconds()},
		header: "SETTLEMENT\tSINCE\tAGE\tAMOUNT\tSENDS\tCHECKS\tNEXT CHECK\tPAID THROUGH\tBANK\tINVESTIGATION",
		row: func(tb *blockTable, r inspect.SettlementRow) error {
			bank := r.BankStatus
			if r.BankPaymentID != "" {
				bank += " " + r.BankPaymentID
			}
			inv := "-"
			if r.NeedsInvestigation {
				inv = r.InvestigationReason
			}
			return tb.row("%s\t%s\t%s\t%d %s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.SettlementID, r.Since.UTC().Format(time.RFC3339),
				age(r.AgeSeconds), r.AmountCents, r.Currency, r.SendAttempts, r.CheckAttempts, timeOrDash(r.NextCheckAt),
				r.Bank, strings.TrimSpace(bank), inv)
		},
		total: func(out io.Writer, n int) {
			fmt.Fprintf(out, "%d %s settlement(s)", n, st)
			if *olderThan > 0 {
				fmt.Fprintf(out, " in the state for %s or more", *olderThan)
			}
			fmt.Fprintln(out)
		},
	}, func(each func(inspect.SettlementRow) error) (int, error) {
		return c.inspector(pool).List(ctx, opts, each)
	})
	if err != nil {
		return c.fail(" list", err)
	}
	return exitOK
}

// listing says how a list form prints the rows of type T it lists.
type listing[T any] struct {
	// key names the list in the JSON object, after the fields of head
	// (name, value pairs, as inspect.NewJSONList takes them).
	key  string
	head []any
	// header heads the table's columns, row writes one row, and total
	// writes the line under the table, of the n rows listed.
	header string
	row    func(tb *blockTable, v T) error
	total  func(out io.Writer, n int)
}

// listForm runs a list form of settle reconcile whose only flags are fs's
// (asJSON one of them): it reads the rows with list and prints them as l
// says.
func listForm[T any](ctx context.Context, c *reconcileCmd, fs *flag.FlagSet, args []string, asJSON *bool, l listing[T],
	list func(ins *inspect.Inspector, ctx context.Context, each func(T) error) (int, error)) int {
	if _, code, done := parseAtMost(fs, args, 0); done {
		return code
	}
	name := fs.Name()
	form := name[strings.LastIndexByte(name, ' '):]
	pool := c.open(ctx, form)
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	err := printListing(c.s.Out, *asJSON, l, func(each func(T) error) (int, error) { return list(c.inspector(pool), ctx, each) })
	if err != nil {
		return c.fail(form, err)
	}
	return exitOK
}

// printListing prints on w what list calls back with: with asJSON as
// one JSON object, else as l's table and total. Its error is list's or
// the writer's.
func printListing[T any](w io.Writer, asJSON bool, l listing[T], list func(each func(T) error) (int, error)) error {
	out := bufio.NewWriter(w)
	var err error
	if asJSON {
		jl := inspect.NewJSONList(out, l.key, l.head...)
		_, err = list(func(v T) error { return jl.Add(v) })
		if err == nil {
			err = jl.Close()
		}
	} else {
		tb := newBlockTable(out, l.header)
		var n int
		n, err = list(func(v T) error { return l.row(tb, v) })
		_ = tb.flush()
		if err == nil {
			l.total(out, n)
		}
	}
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	return err
}

// ---- show ----

func (c *reconcileCmd) show(ctx context.Context, args []string) int {
	fs := newFlagSet("reconcile show", "ID [flags]", `
Prints the whole story of one settlement in time order: the receipt (payload
hash, first event id, when it arrived, replays and how long ago the last
one came), every transition with its reason, each bank call and its answer,
the ledger movement, any conflicts, and needs_investigation with its reason.
Exit 0 when found, 1 when there is no such settlement.`, c.s)
	asJSON := fs.Bool("json", false, "print the settlement, receipt, transitions, bank_attempts, movement, conflicts and timeline as JSON")
	pos, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintln(c.s.Err, "settle reconcile show: want exactly one settlement id")
		return exitError
	}
	id := pos[0]
	pool := c.open(ctx, " show")
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	st, err := c.inspector(pool).Show(ctx, id)
	if errors.Is(err, settlement.ErrNotFound) {
		fmt.Fprintf(c.s.Err, "settle reconcile show: no settlement %q\n", id)
		return exitFindings
	}
	if err != nil {
		return c.fail(" show", err)
	}
	if *asJSON {
		_ = writeJSON(c.s.Out, st)
		return exitOK
	}
	s := st.Settlement
	tw := tabwriter.NewWriter(c.s.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "settlement\t%s\n", s.SettlementID)
	state := string(s.State)
	if s.NeedsInvestigation {
		state += "   NEEDS INVESTIGATION: " + s.InvestigationReason
	}
	if st.Waiting != "" {
		state += "   " + strings.ToUpper(st.Waiting[:1]) + st.Waiting[1:]
	}
	fmt.Fprintf(tw, "state\t%s\n", state)
	fmt.Fprintf(tw, "paid through\tbank %s\n", s.Bank)
	fmt.Fprintf(tw, "amount\t%d %s (minor units)\n", s.AmountCents, s.Currency)
	fmt.Fprintf(tw, "from → to\t%s → %s\n", s.AccountID, s.Beneficiary)
	fmt.Fprintf(tw, "payload hash\t%s\n", s.PayloadHash)
	fmt.Fprintf(tw, "bank key\t%s\n", s.BankKey)
	b := st.Bank
	bank := fmt.Sprintf("%d send(s), first at %s; %d status check(s), next at %s", b.SendAttempts,
		timeOrDash(b.FirstAttemptAt), b.CheckAttempts, timeOrDash(b.NextCheckAt))
	if b.PaymentID != "" || b.Status != "" {
		bank = fmt.Sprintf("payment %s, last status %s; ", b.PaymentID, b.Status) + bank
	}
	fmt.Fprintf(tw, "bank\t%s\n", bank)
	if r := st.Receipt; r != nil {
		rc := fmt.Sprintf("received %s", r.ReceivedAt.UTC().Format(time.RFC3339Nano))
		if r.FirstEventID != "" {
			rc += ", first event " + r.FirstEventID
		}
		rc += fmt.Sprintf(", %d replay(s)", r.ReplayCount)
		if st.LastReplayAgeSeconds != nil {
			rc += ", the last " + age(*st.LastReplayAgeSeconds) + " ago"
		}
		fmt.Fprintf(tw, "receipt\t%s\n", rc)
	} else {
		fmt.Fprintf(tw, "receipt\t(removed by retention)\n")
	}
	mv := "none"
	if m := st.Movement; m != nil {
		mv = fmt.Sprintf("%d %s at %s", m.AmountCents, m.Currency, m.CreatedAt.UTC().Format(time.RFC3339Nano))
		if m.BankPaymentID != "" {
			mv += ", bank payment " + m.BankPaymentID
		}
	}
	fmt.Fprintf(tw, "movement\t%s\n", mv)
	if more := st.ConflictsTotal - len(st.Conflicts); more > 0 {
		fmt.Fprintf(tw, "conflicts\t%d (the first %d below; settle reconcile conflicts lists them all)\n", st.ConflictsTotal, len(st.Conflicts))
	} else {
		fmt.Fprintf(tw, "conflicts\t%d\n", st.ConflictsTotal)
	}
	_ = tw.Flush()
	fmt.Fprintln(c.s.Out)
	tw = tabwriter.NewWriter(c.s.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tWHAT\tDETAIL")
	for _, e := range st.Timeline {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.At.UTC().Format("2006-01-02T15:04:05.000Z"), e.Kind, e.Text)
	}
	_ = tw.Flush()
	return exitOK
}

// ---- conflicts ----

func (c *reconcileCmd) conflicts(ctx context.Context, args []string) int {
	fs := newFlagSet("reconcile conflicts", "[flags]", `
Lists the recorded receipt conflicts, oldest first: events that reused a
settlement id with another payload, rejected with 409 and never applied,
with the business fields that differ from the stored settlement.
Exit 0 when it ran, whether or not there are conflicts.`, c.s)
	asJSON := fs.Bool("json", false, `print {"conflicts":[...],"count"}`)
	return listForm(ctx, c, fs, args, asJSON, listing[inspect.Conflict]{
		key:    "conflicts",
		header: "DETECTED\tSETTLEMENT\tEVENT\tDIFFERS (stored → incoming)\tINCOMING HASH",
		row: func(tb *blockTable, cf inspect.Conflict) error {
			var d []string
			for _, f := range cf.Differences {
				d = append(d, fmt.Sprintf("%s %s → %s", f.Field, f.Stored, f.Incoming))
			}
			diff := strings.Join(d, ", ")
			if diff == "" {
				diff = "-"
			}
			ev := cf.EventID
			if ev == "" {
				ev = "-"
			}
			return tb.row("%s\t%s\t%s\t%s\t%s\n", cf.DetectedAt.UTC().Format(time.RFC3339), cf.SettlementID, ev, diff, cf.IncomingHash)
		},
		total: func(out io.Writer, n int) { fmt.Fprintf(out, "%d conflict(s)\n", n) },
	}, (*inspect.Inspector).Conflicts)
}

// ---- rejects ----

func (c *reconcileCmd) rejects(ctx context.Context, args []string) int {
	fs := newFlagSet("reconcile rejects", "[flags]", `
Lists the messages of event sources (settle worker --source) that could never
be accepted, oldest first: not JSON, a bad field, an unknown currency, older
than the replay horizon, over 64 KiB, or poison (failed --source-max-failures
times for an unexpected reason). Each was kept in intake_rejects with its
whole body (raw) and then acknowledged; transport_id is the broker's own id of
the message (the JetStream stream sequence).
Exit 0 when it ran, whether or not there are rejects.`, c.s)
	asJSON := fs.Bool("json", false, `print {"rejects":[{"id","source","transport_id","received_at","reason","size"}],"count"}`)
	return listForm(ctx, c, fs, args, asJSON, listing[inspect.Reject]{
		key:    "rejects",
		header: "RECEIVED\tSOURCE\tTRANSPORT ID\tSIZE\tREASON",
		row: func(tb *blockTable, r inspect.Reject) error {
			return tb.row("%s\t%s\t%s\t%d\t%s\n", r.ReceivedAt.UTC().Format(time.RFC3339), r.Source, r.TransportID, r.Size, r.Reason)
		},
		total: func(out io.Writer, n int) { fmt.Fprintf(out, "%d reject(s)\n", n) },
	}, (*inspect.Inspector).Rejects)
}

// ---- resolve ----

func (c *reconcileCmd) resolve(ctx context.Context, args []string) int {
	fs := newFlagSet("reconcile resolve", "ID|--all [flags]", `
Asks the bank about a settlement now, by its idempotency key, and applies the
answer through the same code as the reconcile job (the Resolver): settled
confirms it with its movement, failed fails it, a key the bank never saw is
resent while younger than --bank-key-ttl and flagged for investigation after.
A terminal settlement is left alone. --all resolves every pending, sent and
uncertain settlement, one after the other.
Exit 0 when every answer was applied, 1 when a settlement needs investigation
afterwards or does not exist, 2 when the bank or the database is unreachable.`, c.s)
	all := fs.Bool("all", false, "resolve every settlement that is not terminal")
	var bf bankFlags
	bf.register(fs)
	keyTTL := fs.Duration("bank-key-ttl", reconcile.DefaultKeyTTL, "never re-send an instruction once this long has passed since its first attempt (must match the worker's)")
	asJSON := fs.Bool("json", false, `print {"resolved":[{"settlement_id","from","to","action","reason","needs_investigation",...}],"count"}`)
	pos, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	switch {
	case *all && len(pos) != 0, !*all && len(pos) != 1:
		fmt.Fprintln(c.s.Err, "settle reconcile resolve: want one settlement id or --all")
		return exitError
	case *keyTTL <= 0:
		fmt.Fprintln(c.s.Err, "settle reconcile resolve: --bank-key-ttl must be positive")
		return exitError
	}
	pool := c.open(ctx, " resolve")
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	bank, caps, err := bf.client(ctx, c.s.Err)
	if err != nil {
		return c.fail(" resolve", err)
	}
	// Only the settlements of the bank named (--bank) are asked about.
	r := &reconcile.Resolver{DB: pool, Bank: bank, BankName: bf.name, Capabilities: &caps, Now: c.now, KeyTTL: *keyTTL}

	results := []reconcile.ResolveResult{}
	code = exitOK
	add := func(res reconcile.ResolveResult) error {
		results = append(results, res)
		if res.NeedsInvestigation || res.Error != "" {
			code = max(code, exitFindings)
		}
		return nil
	}
	ctx = reconcile.WithSource(ctx, settlement.SourceOperator)
	if *all {
		err = r.ResolveOpen(ctx, pool, add)
	} else {
		var res reconcile.ResolveResult
		res, err = r.ResolveOne(ctx, pos[0])
		_ = add(res)
	}
	if *asJSON {
		_ = writeJSON(c.s.Out, map[string]any{"resolved": results, "count": len(results)})
	} else {
		tw := tabwriter.NewWriter(c.s.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SETTLEMENT\tFROM\tTO\tACTION\tREASON\tINVESTIGATION")
		for _, r := range results {
			reason := r.Reason
			if r.Error != "" {
				reason = "error: " + r.Error
			}
			inv := "-"
			if r.NeedsInvestigation {
				inv = r.InvestigationReason
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.SettlementID, r.From, r.To, r.Action, reason, inv)
		}
		_ = tw.Flush()
	}
	if err != nil {
		return c.fail(" resolve", err)
	}
	return code
}

// ---- bank ----

func (c *reconcileCmd) bank(ctx context.Context, args []string) int {
	fs := newFlagSet("reconcile bank", "[--bank-url U | --statements] [flags]", `
Reconciles the ledger with the bank's statement, matched on the business id
(settlement_id here, the payment's reference at the bank), and classifies
every break:
  missing_in_ledger   the bank settled a payment, the ledger has no movement
  missing_at_bank     the ledger has a movement, the bank has no settled payment
  amount_mismatch     both settled, with another amount or currency
  status_mismatch     we say failed and the bank settled (or still holds it open),
                      or we say confirmed without a movement
  duplicate_at_bank   two or more payments at the bank for one settlement
  unresolved          settlements not terminal yet: listed, not discrepancies
Memory stays flat however many settlements: the statement is staged in a
temporary table page by page and classified by PostgreSQL. Payments the
statement may show older than the ledger are asked again by key first.

With --statements, the bank is not asked: the same classes are computed
against the bank statement files imported with settle statement import (their
lines matched to settlements by reference; a booking shown by several files
counts once), plus
  returned            the statements bring a confirmed payout back (a return or
                      a reversal) and the ledger has not reversed it
  unmatched_entries   statement lines no settlement explains
  balance_breaks      statements whose opening balance plus entries is not their
                      closing balance
A settlement confirmed after the last import is unresolved until a statement
shows it. First, the lines without a match (of files imported in the last 100
days) are examined again: a line imported before its settlement existed, or
before its reference was known, is matched and booked now, as the import would
have (the sweep of a running worker does the same every minute), and the lines
still unmatched get a suggestion where one has appeared.

Exit 0 clean, 1 discrepancies found, 2 database or bank unreachable (with
--statements: or no statement imported).`, c.s)
	var bf bankFlags
	bf.register(fs)
	statements := fs.Bool("statements", false, "reconcile against the imported bank statements instead of the bank's API")
	pageSize := fs.Int("page-size", audit.DefaultStatementPageSize, "statement page size asked of the bank")
	limit := fs.Int("limit", 20, "rows printed per class in the table (--json lists all)")
	asJSON := fs.Bool("json", false, `print {"matched":n,"missing_in_ledger":[...],"missing_at_bank":[...],"amount_mismatch":[...],"status_mismatch":[...],"duplicate_at_bank":[...],"unresolved":[...],...} (with --statements also "returned","unmatched_entries","balance_breaks")`)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.s.Err, "settle reconcile bank: unexpected arguments %q\n", fs.Args())
		return exitError
	}
	if conn, err := connectors().Lookup(bf.name); err != nil {
		return c.fail(" bank", err)
	} else if conn.Capabilities.NoList && !*statements {
		fmt.Fprintf(c.s.Err, "settle reconcile bank: the %s bank offers no list of payments to reconcile against; import its statements (settle statement import) and run settle reconcile bank --statements\n", conn.Name)
		return exitError
	}
	pool := c.open(ctx, " bank")
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	if *statements {
		// Statements name no connector: they are reconciled per bank only
		// when one is named.
		only := ""
		if onCommandLine(fs, "bank") || os.Getenv("SETTLE_BANK") != "" {
			only = bf.name
			if err := settlement.CheckBankName(only); err != nil {
				return c.fail(" bank", fmt.Errorf("--bank %s: one bank at a time: %w", only, err))
			}
		}
		return c.bankStatements(ctx, pool, *asJSON, *limit, only)
	}
	bank, _, err := bf.client(ctx, c.s.Err)
	if err != nil {
		return c.fail(" bank", err)
	}

	out := bufio.NewWriter(c.s.Out)
	defer out.Flush()
	var sink interface {
		audit.BankSink
		Finish() error
	}
	if *asJSON {
		sink = audit.NewBankJSON(out)
	} else {
		sink = &bankTable{w: out, limit: *limit}
	}
	// The bank's own settlements only: another bank's are reconciled
	// against theirs (settle reconcile bank --bank NAME).
	rep := &audit.BankReporter{DB: pool, Bank: bank, BankName: bf.name, PageSize: *pageSize}
	// A spinner with a count on a terminal, one per phase (the totals are
	// not known in advance); nothing when stderr is a file or a pipe.
	var bar *cli.Bar
	describe := map[string]string{"statement": "reading the bank statement", "recheck": "rechecking by key"}
	phase := ""
	rep.Progress = func(p audit.BankProgress) {
		if p.Phase != phase {
			bar.Finish()
			phase, bar = p.Phase, nil
			if phase == "report" {
				return // the report itself is streaming to stdout now
			}
			bar = cli.NewBar(c.s.Err, -1, describe[phase])
		}
		bar.Set(p.Done)
	}
	counts, err := rep.Run(ctx, sink)
	bar.Finish()
	if err == nil {
		err = sink.Finish()
	}
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		out.Flush()
		return c.fail(" bank", err)
	}
	if counts.Discrepancies() > 0 {
		return exitFindings
	}
	return exitOK
}

// bankStatements is `settle reconcile bank --statements`.
func (c *reconcileCmd) bankStatements(ctx context.Context, pool *pgxpool.Pool, asJSON bool, limit int, bank string) int {
	out := bufio.NewWriter(c.s.Out)
	defer out.Flush()
	var sink interface {
		audit.StatementSink
		Finish() error
	}
	if asJSON {
		sink = audit.NewBankJSON(out)
	} else {
		sink = &bankTable{w: out, limit: limit}
	}
	// Lines imported before their settlement existed are matched first
	// (and booked, as an import books them), so the report is of today's
	// knowledge, not of the import's.
	rm, err := (&importer.Rematcher{DB: pool, Returns: &reconcile.Resolver{DB: pool}, Suggest: true, Now: c.now}).Run(ctx)
	if err != nil {
		out.Flush()
		return c.fail(" bank --statements", err)
	}
	if rm.Matched > 0 || rm.Suggested > 0 {
		fmt.Fprintf(c.s.Err, "settle reconcile bank: examined the %d statement lines without a match again: %d matched by their reference now, %d suggested\n",
			rm.Examined, rm.Matched, rm.Suggested)
	}
	counts, err := (&audit.StatementReporter{DB: pool, Now: c.now, BankName: bank}).Run(ctx, sink)
	if err == nil {
		err = sink.Finish()
	}
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		out.Flush()
		return c.fail(" bank --statements", err)
	}
	if counts.Discrepancies() > 0 {
		return exitFindings
	}
	return exitOK
}

// blockTable is an aligned table whose columns align within blocks of 500
// rows, so that memory stays flat for a state holding millions.
type blockTable struct {
	tw *tabwriter.Writer
	n  int
}

func newBlockTable(w io.Writer, header string) *blockTable {
	t := &blockTable{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	fmt.Fprintln(t.tw, header)
	return t
}

func (t *blockTable) row(format string, args ...any) error {
	fmt.Fprintf(t.tw, format, args...)
	if t.n++; t.n%500 == 0 {
		return t.tw.Flush()
	}
	return nil
}

func (t *blockTable) flush() error { return t.tw.Flush() }

// bankTable prints the counts and then, per class, up to limit rows in an
// aligned table.
type bankTable struct {
	w      *bufio.Writer
	limit  int
	counts audit.BankCounts
	tw     *tabwriter.Writer
	cur    audit.Class
	n      int64
}

func (t *bankTable) Counts(c audit.BankCounts) error {
	t.counts = c
	if c.Source == audit.SourceStatements {
		return t.statementCounts(c)
	}
	fmt.Fprintf(t.w, "ledger vs bank as of %s: %d settlements, %d bank payments, %d rechecked by key\n\n",
		c.AsOf.UTC().Format(time.RFC3339), c.Settlements, c.BankPayments, c.Rechecked)
	tw := tabwriter.NewWriter(t.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tCOUNT\t")
	fmt.Fprintf(tw, "matched\t%d\tconfirmed, one movement, one settled payment, same amount\n", c.ByClass[audit.ClassMatched])
	for _, cl := range audit.BreakClasses {
		note := "discrepancy"
		if !cl.Discrepancy() {
			note = "not terminal yet: not a discrepancy"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", cl, c.ByClass[cl], note)
	}
	fmt.Fprintf(tw, "failed_agreed\t%d\tfailed here, failed or never created at the bank\n", c.ByClass[audit.ClassFailedAgreed])
	fmt.Fprintf(tw, "returned_agreed\t%d\treturned here with its reversal, returned at the bank\n", c.ByClass[audit.ClassReturnedAgreed])
	if n := c.ByClass[audit.ClassBankFailedUnknown]; n > 0 {
		fmt.Fprintf(tw, "bank_failed_unknown\t%d\tfailed bank payments for ids we never had\n", n)
	}
	return tw.Flush()
}

// statementCounts is Counts for the report against imported statements.
func (t *bankTable) statementCounts(c audit.BankCounts) error {
	fmt.Fprintf(t.w, "ledger vs imported statements as of %s: %d settlements; %d files, %d statements, %d lines, last imported %s\n\n",
		c.AsOf.UTC().Format(time.RFC3339), c.Settlements, c.StatementFiles, c.Statements, c.StatementLines,
		c.LastImportAt.UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(t.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tCOUNT\t")
	fmt.Fprintf(tw, "matched\t%d\tconfirmed, one movement, paid once on the statements, same amount\n", c.ByClass[audit.ClassMatched])
	for _, cl := range audit.StatementBreakClasses {
		note := "discrepancy"
		if !cl.Discrepancy() {
			note = "not terminal, or not on a statement yet: not a discrepancy"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", cl, c.ByClass[cl], note)
	}
	fmt.Fprintf(tw, "%s\t%d\tstatement lines no settlement explains: discrepancy\n", audit.ClassUnmatchedEntries, c.ByClass[audit.ClassUnmatchedEntries])
	fmt.Fprintf(tw, "%s\t%d\tstatements that do not add up: discrepancy\n", audit.ClassBalanceBreaks, c.ByClass[audit.ClassBalanceBreaks])
	fmt.Fprintf(tw, "failed_agreed\t%d\tfailed here, not paid (or paid and returned) on the statements\n", c.ByClass[audit.ClassFailedAgreed])
	fmt.Fprintf(tw, "returned_agreed\t%d\treturned here with its reversal\n", c.ByClass[audit.ClassReturnedAgreed])
	return tw.Flush()
}

func (t *bankTable) endClass() {
	if t.tw == nil {
		return
	}
	_ = t.tw.Flush()
	if total := t.counts.ByClass[t.cur]; total > t.n {
		fmt.Fprintf(t.w, "… and %d more (--json lists all)\n", total-t.n)
	}
	t.tw = nil
}

// startClass ends the table of the class before and opens that of cl.
func (t *bankTable) startClass(cl audit.Class, header string) {
	t.endClass()
	t.cur, t.n = cl, 0
	fmt.Fprintf(t.w, "\n%s (%d)\n", cl, t.counts.ByClass[cl])
	t.tw = tabwriter.NewWriter(t.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(t.tw, header)
}

// UnmatchedEntry implements audit.StatementSink.
func (t *bankTable) UnmatchedEntry(l inspect.StatementLine) error {
	if t.cur != audit.ClassUnmatchedEntries || t.tw == nil {
		t.startClass(audit.ClassUnmatchedEntries, "FILE\tENTRY\tACCOUNT\tBOOKED\tDIRECTION\tAMOUNT\tENTRY REF\tREFERENCE\tCOUNTERPARTY\tNOTE")
	}
	if t.limit > 0 && t.n >= int64(t.limit) {
		return nil
	}
	t.n++
	fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.File, lineWhere(l), orDash(deref(l.Account)),
		orDash(deref(l.BookedOn)), l.Direction, lineAmount(l), orDash(deref(l.EntryRef)), orDash(deref(l.EndToEndID)), lineParty(l), lineNote(l))
	return nil
}

// BalanceBreak implements audit.StatementSink.
func (t *bankTable) BalanceBreak(b inspect.BalanceBreak) error {
	if t.cur != audit.ClassBalanceBreaks || t.tw == nil {
		t.startClass(audit.ClassBalanceBreaks, "FILE\tSTATEMENT\tACCOUNT\tOPENING\tCREDITS\tDEBITS\tCLOSING\tDIFFERENCE")
	}
	if t.limit > 0 && t.n >= int64(t.limit) {
		return nil
	}
	t.n++
	ccy := deref(b.Currency)
	diff := "?"
	if b.DifferenceMinor != nil {
		diff = formatMinor(*b.DifferenceMinor, ccy)
	}
	fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.File, shortDigest(b.Statement), orDash(deref(b.Account)),
		formatMinor(b.OpeningMinor, ccy), formatMinor(b.CreditsMinor, ccy), formatMinor(b.DebitsMinor, ccy),
		formatMinor(b.ClosingMinor, ccy), diff)
	return nil
}

func (t *bankTable) Break(b audit.Break) error {
	if b.Class != t.cur || t.tw == nil {
		side := "BANK"
		if t.counts.Source == audit.SourceStatements {
			side = "STATEMENTS"
		}
		t.startClass(b.Class, "SETTLEMENT\tSTATE\tAMOUNT\tMOVEMENT\t"+side+"\tWHY")
	}
	if t.limit > 0 && t.n >= int64(t.limit) {
		return nil
	}
	t.n++
	state := b.State
	if state == "" {
		state = "(none)"
	}
	amount, mv := "-", "-"
	if b.AmountCents != 0 {
		amount = fmt.Sprintf("%d %s", b.AmountCents, b.Currency)
	}
	if b.Movement != nil {
		mv = fmt.Sprintf("%d %s", b.Movement.AmountCents, b.Movement.Currency)
	}
	var bank []string
	for _, p := range b.BankPayments {
		bank = append(bank, fmt.Sprintf("%s %s %d %s", p.ID, p.Status, p.AmountCents, p.Currency))
	}
	for _, l := range b.StatementEntries {
		what := "paid"
		if l.Return() {
			what = "back"
		}
		bank = append(bank, fmt.Sprintf("%s %s %s", what, lineAmount(l), orDash(deref(l.EntryRef))))
	}
	if len(bank) == 0 {
		bank = []string{"-"}
	}
	fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\t%s\t%s\n", b.SettlementID, state, amount, mv, strings.Join(bank, "; "), b.Reason)
	return nil
}

func (t *bankTable) Finish() error {
	t.endClass()
	if d := t.counts.Discrepancies(); d > 0 {
		fmt.Fprintf(t.w, "\n%d discrepancies\n", d)
	} else {
		fmt.Fprintf(t.w, "\nno discrepancies: matched %d\n", t.counts.ByClass[audit.ClassMatched])
	}
	return nil
}
