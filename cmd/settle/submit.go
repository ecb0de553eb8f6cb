package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/settle/settle/internal/cli"
	"github.com/settle/settle/internal/settlecmd/submit"
	"github.com/settle/settle/internal/settlecmd/worker"
	natssrc "github.com/settle/settle/source/nats"
)

const submitDescription = `
Posts payout events to the settle API (POST /v1/settlements), one JSON object
per line (NDJSON), from FILE or standard input ("-" or no argument).

Events are sent with bounded concurrency. Answers that are not definitive
(connection errors, timeouts, 429, 5xx) are retried with exponential backoff,
honouring Retry-After, for up to --retry-for per event: sending an event again
is safe, since settle deduplicates on settlement_id. Each line ends as one of
  created    201, a new settlement
  replayed   200, already received with the same payload
  conflict   409, already received with another payload (recorded, not applied)
  invalid    not JSON, over 64 KiB, or refused by the API (400/413/422)
  error      no definitive answer within --retry-for (safe to submit again)
Blank lines are ignored. Invalid, conflict and error lines are listed with
their line number on stderr (in the JSON summary with --json). A progress bar
is drawn on stderr when it is a terminal.

Exit status: 0 every line was created or replayed; 1 some lines were invalid,
conflicted or got no definitive answer; 2 it could not run (bad flags,
unreadable input, token refused, API unreachable).

With --source nats the events are published to NATS JetStream instead (the
stream of DESIGN.md section 18, created if absent; NATS_URL, or the embedded
server under $SETTLE_HOME/nats), one message per line, each acknowledged by
the stream before it counts as published; a worker started with --source
nats consumes them. Each message gets a fresh message id unless --msg-id
event, which sets it to the event's settlement_id: JetStream then drops a
second publish of that settlement_id within its duplicate window (2 minutes
by default) whatever its payload, so a conflicting payload never reaches
settle to be recorded. Lines are not validated here: invalid ones are kept by
the worker in intake_rejects (settle reconcile rejects).

With --source sqs:QUEUE_URL each line is sent to that Amazon SQS queue (the
standard AWS credential chain and region, AWS_ENDPOINT_URL_SQS), counted once
SQS accepted it; SQS names each message itself, so --msg-id only sets the
deduplication id on a FIFO queue (a URL ending in .fifo).

With --source kafka://HOST:PORT[,HOST:PORT…]/TOPIC each line is produced to
that topic, which must exist (settle creates no topic), keyed by its
settlement_id so that every delivery of one settlement lands in one partition
in order; the producer is idempotent and a line counts once every in-sync
replica has it. Kafka has no message id: --msg-id event is refused.

--api-token can also be set through SETTLE_API_TOKEN, --api-token-file through
SETTLE_API_TOKEN_FILE. The token is never sent over plain http to a host that
is not this machine unless --insecure-http.`

// cmdSubmit runs `settle submit`.
func cmdSubmit(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("submit", "[flags] [FILE|-]", submitDescription, s)
	url := fs.String("url", "http://"+worker.DefaultListen, "base URL of the settle API")
	token := fs.String("api-token", "", "API token, sent as Authorization: Bearer (never printed); prefer SETTLE_API_TOKEN or --api-token-file: a command line is visible to every user in ps")
	tokenFile := fs.String("api-token-file", "", "read the API token from this file (one line) instead of --api-token")
	insecure := fs.Bool("insecure-http", false, "allow sending the API token over plain http to a host that is not this machine (refused otherwise: anyone on the path could read it)")
	concurrency := fs.Int("concurrency", 8, "requests in flight")
	batch := fs.Int("batch", 0, "post up to this many events per request to /v1/settlements/batch (at most 1000; 0: one event per request); every line still gets its own outcome")
	retryFor := fs.Duration("retry-for", 2*time.Minute, "how long to keep retrying one event that gets no definitive answer")
	asJSON := fs.Bool("json", false, "print the summary as JSON on stdout")
	spec := fs.String("source", "", "publish to this event source instead of the API: nats, sqs:QUEUE_URL or kafka://HOST:PORT/TOPIC")
	msgID := fs.String("msg-id", "fresh", "the broker message id of each publish: fresh (a new one each), or event (the event's settlement_id)")
	var names natsNames
	names.register(fs, false)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if *spec != "" {
		return submitToSource(ctx, s, fs, publishOptions{spec: *spec, names: names, msgID: *msgID, concurrency: *concurrency, retryFor: *retryFor}, *asJSON)
	}
	if fs.NArg() > 1 || *concurrency < 1 || *batch < 0 || *batch > submit.MaxBatch {
		fs.Usage()
		return exitError
	}
	tok, err := apiToken(*token, *tokenFile)
	if err != nil {
		fmt.Fprintf(s.Err, "settle submit: %v\n", err)
		return exitError
	}
	in, name, total, err := openInput(fs.Arg(0), s.In)
	if err != nil {
		fmt.Fprintf(s.Err, "settle submit: %v\n", err)
		return exitError
	}
	defer in.Close()

	opts := submit.Options{URL: *url, Token: tok, InsecureHTTP: *insecure, Concurrency: *concurrency, Batch: *batch, RetryFor: *retryFor}
	if bar := cli.NewBar(s.Err, int64(total), "submitting "+name); bar != nil {
		opts.OnResult = func(submit.Result) { bar.Add(1) }
		defer bar.Finish()
	}
	sum, err := submit.Run(ctx, in, opts)
	if *asJSON {
		enc := json.NewEncoder(s.Out)
		enc.SetIndent("", "  ")
		if sum.Problems == nil {
			sum.Problems = []submit.Result{}
		}
		_ = enc.Encode(sum)
	} else {
		printProblems(s.Err, sum)
		fmt.Fprintf(s.Out, "settle submit: %d lines: %d created, %d replayed, %d conflict, %d invalid, %d errors (%d retries, %.1fs)\n",
			sum.Lines, sum.Created, sum.Replayed, sum.Conflict, sum.Invalid, sum.Errors, sum.Retries, sum.DurationSeconds)
	}
	switch {
	case err != nil:
		fmt.Fprintf(s.Err, "settle submit: %v\n", err)
		return exitError
	case ctx.Err() != nil:
		fmt.Fprintln(s.Err, "settle submit: interrupted; lines without an answer are counted as errors (submitting them again is safe)")
		return exitFindings
	case !sum.OK():
		return exitFindings
	}
	return exitOK
}

// openInput opens FILE, or stdin for "" and "-". For a regular file it also
// counts the lines, to size the progress bar (-1 when unknown).
func openInput(arg string, stdin io.Reader) (io.ReadCloser, string, int, error) {
	if arg == "" || arg == "-" {
		return io.NopCloser(stdin), "stdin", -1, nil
	}
	f, err := os.Open(arg)
	if err != nil {
		return nil, "", 0, fmt.Errorf("error opening the events: %w", err)
	}
	total := -1
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		n, err := submit.CountLines(f)
		if err != nil {
			f.Close()
			return nil, "", 0, fmt.Errorf("error reading %s: %w", arg, err)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return nil, "", 0, fmt.Errorf("error rereading %s: %w", arg, err)
		}
		total = n
	}
	return f, arg, total, nil
}

// printProblems lists the lines that were not created or replayed.
func printProblems(w io.Writer, sum submit.Summary) {
	for _, p := range sum.Problems {
		id := ""
		if p.SettlementID != "" {
			id = fmt.Sprintf(" [%s]", p.SettlementID)
		}
		status := ""
		if p.Status != 0 {
			status = fmt.Sprintf(" (HTTP %d)", p.Status)
		}
		fmt.Fprintf(w, "line %d%s: %s%s: %s\n", p.Line, id, p.Outcome, status, p.Detail)
	}
	if sum.ProblemsOmitted > 0 {
		fmt.Fprintf(w, "… and %d more problem lines (counted above, not listed)\n", sum.ProblemsOmitted)
	}
}

// submitToSource runs `settle submit --source SPEC`.
func submitToSource(ctx context.Context, s Stdio, fs *flag.FlagSet, o publishOptions, asJSON bool) int {
	err := checkSpec(o.spec)
	if err == nil && o.msgID == "event" && strings.HasPrefix(o.spec, kafkaPrefix) {
		err = errors.New("--msg-id event: Kafka has no message id (each record is keyed by its settlement_id)")
	}
	if err != nil || fs.NArg() > 1 || o.concurrency < 1 || (o.msgID != "fresh" && o.msgID != "event") {
		if err != nil {
			fmt.Fprintf(s.Err, "settle submit: %v\n", err)
		}
		fs.Usage()
		return exitError
	}
	in, name, total, err := openInput(fs.Arg(0), s.In)
	if err != nil {
		fmt.Fprintf(s.Err, "settle submit: %v\n", err)
		return exitError
	}
	defer in.Close()
	if bar := cli.NewBar(s.Err, int64(total), "publishing "+name); bar != nil {
		o.onLine = func() { bar.Add(1) }
		defer bar.Finish()
	}
	sum, err := publishLines(ctx, s, in, o)
	if asJSON {
		enc := json.NewEncoder(s.Out)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sum)
	} else {
		dups := fmt.Sprintf(", %d dropped by JetStream as duplicates", sum.Duplicates)
		if o.spec != natssrc.Kind {
			dups = ""
		}
		fmt.Fprintf(s.Out, "settle submit: %d lines: %d published to %s%s, %d invalid, %d errors (%.1fs)\n",
			sum.Lines, sum.Published, o.spec, dups, sum.Invalid, sum.Errors, sum.Seconds)
	}
	switch {
	case err != nil:
		fmt.Fprintf(s.Err, "settle submit: %v\n", err)
		return exitError
	case ctx.Err() != nil:
		fmt.Fprintln(s.Err, "settle submit: interrupted; lines not counted were not published")
		return exitFindings
	case sum.Published != sum.Lines:
		return exitFindings
	}
	return exitOK
}
