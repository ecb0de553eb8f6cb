// Command settle is the payment settlement engine: one binary with a
// subcommand per job (see `settle help`). main parses and hands off; the
// work lives in the packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/settle/settle/internal/natsembed"
)

// Stdio is where a subcommand reads and writes; tests pass buffers.
type Stdio struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// command is one subcommand of settle.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, s Stdio) int
}

// commands lists every subcommand. Each lives in a file of its own.
func commands() []command {
	return []command{
		{"migrate", "apply the app schema and River's schema (idempotent)", cmdMigrate},
		{"db", "manage the embedded default PostgreSQL cluster (status, stop, url, prune)", cmdDB},
		{"fakebank", "run the bank simulator (bank protocol, injectable faults)", cmdFakebank},
		{"worker", "run the HTTP API (intake) and the River workers", cmdWorker},
		{"submit", "post NDJSON events to the API, with retries, progress and counts", cmdSubmit},
		{"demo", "the whole system in one command: faulty bank, worker, events, report", cmdDemo},
		{"reconcile", "what is stuck, one settlement's story, conflicts, resolve, ledger vs bank", cmdReconcile},
		{"events", "outcome events: list them and their deliveries, redeliver", cmdEvents},
		{"lambda", "the intake as an AWS Lambda handler for SQS-triggered functions (batchItemFailures)", cmdLambda},
		{"ledger", "balances and holds: credit an account, balances, postings", cmdLedger},
		{"bench", "throughput, replay latency and memory, each against a baseline from the same run", cmdBench},
		{"statement", "parse bank statement files (camt.053/054, BAI2, MT940)", cmdStatement},
	}
}

// Exit statuses shared by the subcommands.
const (
	exitOK       = 0
	exitFindings = 1 // discrepancies found, invariants broken
	exitError    = 2 // could not run
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, s Stdio) int {
	if len(args) == 0 && os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" {
		// The binary is a Lambda function's bootstrap, run with no
		// arguments.
		return cmdLambda(ctx, nil, s)
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(s.Out)
		return exitOK
	}
	if args[0] == natsembed.Subcommand { // hidden: the embedded JetStream server
		return cmdNATSServer(ctx, args[1:], s)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], s)
		}
	}
	fmt.Fprintf(s.Err, "settle: unknown command %q\n\n", args[0])
	usage(s.Err)
	return exitError
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "settle: pays each payout exactly once at the bank and writes exactly one ledger movement.")
	fmt.Fprintln(w, "\nUsage: settle <command> [flags]   (settle <command> --help for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nDatabase: DATABASE_URL when set, otherwise the embedded default cluster under $SETTLE_HOME")
	fmt.Fprintln(w, "(default ~/.local/share/settle), started on first use and shared by every settle process.")
}

// newFlagSet returns a FlagSet for a subcommand whose --help prints the
// summary, the usage line and every flag to s.Out.
// subForm is one form of a command that has forms, as settle events list.
type subForm struct {
	name string
	run  func(ctx context.Context, args []string) int
}

// runForms runs the form of cmd that args[0] names. Without one, args
// are cmd's own flags (--help prints description); another is refused.
func runForms(ctx context.Context, s Stdio, cmd, description string, args []string, forms []subForm) int {
	form := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		form, args = args[0], args[1:]
	}
	names := make([]string, len(forms))
	for i, f := range forms {
		if f.name == form {
			return f.run(ctx, args)
		}
		names[i] = f.name
	}
	if form == "" {
		fs := newFlagSet(cmd, strings.Join(names, "|")+" [flags]", description, s)
		if code, done := parseFlags(fs, args); done {
			return code
		}
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	fmt.Fprintf(s.Err, "settle %s: unknown form %q (want %s; see settle %s --help)\n", cmd, form, want, cmd)
	return exitError
}

func newFlagSet(name, usageLine, description string, s Stdio) *flag.FlagSet {
	fs := flag.NewFlagSet("settle "+name, flag.ContinueOnError)
	fs.SetOutput(s.Err)
	fs.Usage = func() {
		fs.SetOutput(s.Out)
		fmt.Fprintf(s.Out, "Usage: settle %s %s\n\n%s\n\nFlags:\n", name, usageLine, strings.TrimSpace(description))
		fs.PrintDefaults()
	}
	return fs
}

// sharedEnvFlags are the flags that mean the same thing in every command,
// so they fall back to SETTLE_<FLAG> everywhere. Every other flag reads the
// environment only in `settle worker` (the contract) and `settle lambda`
// (configured by its function's environment): SETTLE_LISTEN or
// SETTLE_STATE meant for one command must not change another.
var sharedEnvFlags = map[string]bool{"api-token": true, "api-token-file": true, "bank": true, "bank-url": true, "bank-insecure-http": true, "log-format": true}

// parseFlags parses args and then, for every flag not given on the command
// line that reads the environment (every worker flag, and sharedEnvFlags
// elsewhere), takes its value from SETTLE_<FLAG> (dashes become
// underscores) when set. It returns done=true with the exit code when the
// command must stop (help was asked for, or the flags were bad).
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitError, true
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		readsEnv := fs.Name() == "settle worker" || fs.Name() == "settle lambda" || sharedEnvFlags[f.Name]
		if set[f.Name] || envErr != nil || !readsEnv {
			return
		}
		name := "SETTLE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("invalid value %q for %s: %w", v, name, err)
			}
		}
	})
	if envErr != nil {
		fmt.Fprintf(fs.Output(), "settle: %v\n", envErr)
		return exitError, true
	}
	return exitOK, false
}
