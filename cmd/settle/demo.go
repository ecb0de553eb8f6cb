package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/settle/settle/internal/cli"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/motoserver"
	"github.com/settle/settle/internal/settlecmd/demo"
)

const demoDescription = `
Runs the whole system in one command and shows what exactly-once means:

  1. creates a fresh database of its own, settle_demo (in the embedded default
     cluster, or on the server of DATABASE_URL when set), and migrates it;
  2. starts the bundled bank simulator with a fault profile (--faults): it
     loses answers after executing payments, answers 5xx, adds latency,
     rejects a few payments, fails a few at settlement, and returns a few
     after they settled (at least 3: the money comes back);
  3. starts a worker (settle worker) against them;
  4. submits --events payout events through the HTTP API: about 80% first
     deliveries, then about 20% redeliveries and at least one conflicting
     event (a known settlement_id with another amount);
  5. waits, with a progress bar, until every settlement is confirmed, failed
     or returned, and until every payment the bank returned is booked;
  6. prints the reconcile summary and the ledger-vs-bank reconciliation, and
     explains what happened: lost answers, uncertain settlements and how they
     were resolved, replays, the conflict, the returns (each settlement moved
     to returned with one reversal), and that nothing was paid twice;
  7. says how many outcome events each of its two webhook receivers got
     (in-process, verifying every signature; one answers 503 to every
     fourth call, so deliveries are retried) and that each settlement's
     sequence of events arrived complete and in order at each.

Fault profiles: none; flaky (20% of payment answers lost after execution, 5%
5xx, 5% of status calls 5xx, 2% rejected, 3% failed at settlement, 0-30 ms
latency); hostile (30% lost, 15% 5xx, 25% status 5xx, 5% rejected, 8% failed,
0-80 ms latency).

With --source nats the events go through NATS JetStream instead of the HTTP
API (NATS_URL, or the embedded JetStream server under $SETTLE_HOME/nats,
started for the demo and stopped after it unless it was running before or
--keep): the demo publishes them to its own stream, lets a consumer take a
few and go silent until their lease runs out, runs a worker that is killed
after committing its first batch and before acknowledging it, and lets a
second worker consume everything; the report says what JetStream redelivered
and that each redelivery was a replay.

With --source sqs the events go through an Amazon SQS queue the same way, on
moto_server (the Python moto package's server, which must be on PATH), a local
stand-in for SQS that the demo starts on 127.0.0.1 and stops after it: a
consumer receives a few and lets their visibility timeout run out, a worker is
killed after committing its first batch and before deleting it, and a second
worker consumes everything. moto_server speaks SQS's API; it is not SQS.

With --source kafka the events go through Kafka's wire protocol to kfake, an
in-process stand-in for Kafka (not Kafka) that the demo starts on 127.0.0.1
with a topic of three partitions: the demo produces them keyed by
settlement_id, runs a worker that is killed after committing its first batch
and before committing its offsets (the group hands its partitions on once its
session runs out), and lets a second worker consume everything; the report
says that each record delivered again was a replay and that the group ends
with nothing uncommitted.

With --keep, the bank and the worker stay up after the report, for exploring
with settle reconcile, the River UI and /metrics (the URLs are printed), until
Ctrl-C.

Exit status: 0 every invariant holds; 1 one does not (listed); 2 it could not
run.`

// cmdDemo runs `settle demo`.
func cmdDemo(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("demo", "[flags]", demoDescription, s)
	events := fs.Int("events", 200, "number of events to submit (redeliveries and conflicts included)")
	faults := fs.String("faults", "flaky", "bank fault profile: none, flaky or hostile")
	seed := fs.Int64("seed", 1, "seed of the events and of the bank's fault decisions")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for every settlement to become terminal")
	keep := fs.Bool("keep", false, "leave the bank and the worker running after the report, until Ctrl-C")
	bank := fs.String("bank", "settle", "the connector, and the fakebank profile serving its API: "+connectorNames()+"; two at once (settle,stripe) run one worker serving both banks, each settlement bound to its own")
	src := fs.String("source", "", "send the events through this event source instead of the HTTP API: nats, sqs (on moto_server, a local stand-in for SQS) or kafka (to kfake, an in-process stand-in for Kafka)")
	funds := fs.Bool("funds-check", false, "run the worker with --funds-check: every account is credited with exactly its payouts first, and a last payout over its account's balance is refused (422 insufficient-funds), as is its redelivery (one bank, the HTTP API)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.Err, "settle demo: unexpected arguments %q\n", fs.Args())
		return exitError
	}
	for _, name := range strings.Split(*bank, ",") {
		if _, err := connectors().Lookup(name); err != nil {
			fmt.Fprintf(s.Err, "settle demo: %v\n", err)
			return exitError
		}
	}
	if _, ok := demo.Profiles[*faults]; !ok || *events < 2 {
		fmt.Fprintln(s.Err, "settle demo: --faults must be none, flaky or hostile, and --events at least 2")
		return exitError
	}
	if *src != "" && *src != "nats" && *src != "sqs" && *src != "kafka" {
		fmt.Fprintf(s.Err, "settle demo: unknown --source %q (want nats, sqs or kafka)\n", *src)
		return exitError
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(s.Err, "settle demo: error finding the settle executable: %v\n", err)
		return exitError
	}
	// The demo holds the embedded cluster (when DATABASE_URL is unset) and,
	// unless --keep, stops it at the end if it started it.
	use := ownCluster
	if *keep {
		use = shareCluster
	}
	db, done := openDatabase(ctx, s, use, database.Config{NoPool: true})
	if db == nil {
		return exitError
	}
	defer done()
	var natsURL string
	if *src == "nats" {
		url, natsDone, err := resolveNATS(ctx, s, use)
		if err != nil {
			fmt.Fprintf(s.Err, "settle demo: %v\n", err)
			return exitError
		}
		defer natsDone()
		natsURL = url
	}
	var queue demo.SQSQueue
	if *src == "sqs" {
		q, stop, err := startDemoSQS(ctx)
		if err != nil {
			fmt.Fprintf(s.Err, "settle demo: %v\n", err)
			return exitError
		}
		defer stop()
		queue = q
	}
	rep, err := demo.Run(ctx, demo.Options{
		Events: *events, Faults: *faults, Bank: *bank, Seed: *seed, Timeout: *timeout, Keep: *keep,
		Executable: exe, Out: s.Out, Err: s.Err, Progress: cli.IsTerminal(s.Err),
		Source: *src, NATSURL: natsURL, SQS: queue, FundsCheck: *funds, DatabaseURL: os.Getenv("DATABASE_URL"),
		Connectors: connectors(),
	})
	if err != nil {
		fmt.Fprintf(s.Err, "settle demo: %v\n", err)
		return exitError
	}
	if !rep.OK() {
		return exitFindings
	}
	return exitOK
}

// startDemoSQS starts moto_server, the local stand-in for SQS, and makes
// the demo's queue on it; stop kills the server.
func startDemoSQS(ctx context.Context) (demo.SQSQueue, func(), error) {
	srv, err := motoserver.Start(ctx, nil)
	if err != nil {
		return demo.SQSQueue{}, nil, fmt.Errorf("--source sqs needs moto_server, the local stand-in for SQS: %w", err)
	}
	url, err := srv.CreateQueue(ctx, "settle-demo", 30*time.Second)
	if err != nil {
		srv.Close()
		return demo.SQSQueue{}, nil, err
	}
	return demo.SQSQueue{URL: url, Client: srv.Client(), Env: srv.Env(),
		Describe: "moto_server at " + srv.URL + ", a local stand-in for Amazon SQS started for the demo: SQS's API, not SQS"}, srv.Close, nil
}
