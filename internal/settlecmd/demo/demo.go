// Package demo is `settle demo`: the whole system in one process tree, on a
// database of its own, with a bank that misbehaves on purpose, and a report
// that explains what happened and checks that every settlement was paid
// exactly once.
//
// It starts the bundled fakebank in-process (behind a wrapper that counts
// what the bank did to its answers), runs `settle worker` as a child
// process, produces a stream of payout events with redeliveries and a
// conflict, submits it through the HTTP API with package submit, waits until
// every settlement is terminal, then reads the reconcile summary and the
// ledger-vs-bank report from package reconcile, and ends as the bank's day
// does: it fetches the day's camt.053 statement from the bank, imports it
// and reconciles the ledger against it.
//
// It must never touch user data: it works in its own database (DBName),
// dropped and created afresh on every run. It decides nothing about
// settlements; it only observes and checks.
package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/cli"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/psu"
	"github.com/settle/settle/internal/settlecmd/submit"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	kafkasrc "github.com/settle/settle/source/kafka"
	"github.com/settle/settle/statement/importer"
)

// Options configure a demo run.
type Options struct {
	// Events is the number of events to submit (default 200).
	Events int
	// Faults names a profile of Profiles (default "flaky").
	Faults string
	// Bank is the connector the worker pays through, and the fakebank
	// profile that serves its API (default "settle").
	Bank string
	// Seed seeds the events and the bank's fault decisions (default 1).
	Seed int64
	// Timeout bounds the wait for every settlement to be terminal
	// (default 2m).
	Timeout time.Duration
	// Keep leaves the bank and the worker running after the report until
	// ctx ends.
	Keep bool
	// Executable is the settle binary that runs the worker (required).
	Executable string
	// Out receives the report; Err the progress and notes.
	Out, Err io.Writer
	// Progress draws progress bars on Err (use it on a terminal only).
	Progress bool
	// Source, when "nats", sends the events through NATS JetStream at
	// NATSURL instead of the HTTP API (DESIGN.md section 18); when
	// "kafka", through Kafka's protocol to kfake, an in-process stand-in
	// for Kafka that the demo starts.
	Source  string
	NATSURL string
	// SQS, with Source "sqs", is the queue the events go through (a queue
	// of moto_server, the local stand-in for SQS, made for the demo).
	SQS SQSQueue
	// FundsCheck runs the worker with --funds-check, funds every account
	// with exactly its payouts, and ends with a payout over its account's
	// balance, which must be refused (DESIGN.md section 20).
	FundsCheck bool
	// DatabaseURL is the server the demo makes its own database on
	// (DATABASE_URL); empty: the embedded default cluster.
	DatabaseURL string
	// Connectors are those Bank may name (settle demo: the binary's
	// list); nil: settle's own alone.
	Connectors bankclient.Connectors
}

// Report is what a run found.
type Report struct {
	Events, Settlements, Redeliveries, Conflicts int
	Submit                                       submit.Summary
	Summary                                      inspect.Summary
	Bank                                         audit.BankCounts
	// StatementDays are the days whose camt.053 was fetched from the bank,
	// Imports what importing each did, StatementBank the reconciliation of
	// the ledger against them.
	StatementDays []string
	Imports       []importer.ImportResult
	StatementBank audit.BankCounts
	BankStats     fakebank.Stats
	Traffic       BankTraffic
	// asked says how the connector's bank was asked about a lost answer;
	// caps is what it can do.
	asked string
	caps  bankclient.Capabilities
	// Consents counts the bank's consents (banks that need one per
	// payment), ConsentReplays the consent requests it answered again.
	Consents, ConsentReplays int64
	// Uncertain counts the settlements that were ever uncertain;
	// ResolvedConfirmed and ResolvedFailed how they ended.
	Uncertain, ResolvedConfirmed, ResolvedFailed int64
	// Resent counts settlements whose instruction was posted more than once
	// (always under the same key).
	Resent int64
	// Returns: the payments the bank returned after they settled;
	// ReturnedByStatus and ReturnedByStatement the settlements booked
	// returned (with their reversal) by the return watch's status checks
	// and by the statement import; FailedReturned those whose payment came
	// back before settle saw it settle (failed, nothing to reverse);
	// Reversals the reversal movements.
	Returns, ReturnedByStatus, ReturnedByStatement, FailedReturned, Reversals int64
	// source is Options.Source; Queue what happened on the queue.
	source string
	Queue  QueueReport
	// Outcomes is what the webhook receivers of the outcome events got.
	Outcomes OutcomeReport
	// Funds is what the funds check did (Options.FundsCheck).
	Funds FundsReport
	// BankWebhooks is what the bank pushed to the worker (its status
	// changes, as hints).
	BankWebhooks fakebank.WebhookStats
	// Violations lists the invariants that do not hold; empty is success.
	Violations []string
	Duration   time.Duration
	// Phases are the run's parts in order, each with the time it took, so
	// a slow demo says where it waited.
	Phases []Phase
}

// Phase is one part of a run and how long it took.
type Phase struct {
	Name     string
	Duration time.Duration
}

// phase ends the part of the run that began at *since, recording it under
// name, and starts the next one.
func (r *Report) phase(name string, since *time.Time) {
	now := time.Now()
	r.Phases = append(r.Phases, Phase{Name: name, Duration: now.Sub(*since)})
	*since = now
}

// phases prints the parts of the run and their times on one line.
func (r Report) phases() string {
	parts := make([]string, 0, len(r.Phases))
	for _, ph := range r.Phases {
		parts = append(parts, fmt.Sprintf("%s %.1fs", ph.Name, ph.Duration.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// OK reports whether every invariant held.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Run runs the demo. The error is not nil when the demo could not run;
// a run that completed but found a broken invariant returns a Report whose
// OK is false.
func Run(ctx context.Context, o Options) (rep Report, err error) {
	start := time.Now()
	start0 := start
	if o.Events <= 0 {
		o.Events = 200
	}
	if o.Bank == "" {
		o.Bank = settle.Connector.Name
	}
	if o.Connectors == nil {
		o.Connectors = bankclient.Connectors{settle.Connector}
	}
	if o.Faults == "" {
		o.Faults = "flaky"
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	faults, ok := Profiles[o.Faults]
	if !ok {
		return Report{}, fmt.Errorf("unknown fault profile %q (want none, flaky or hostile)", o.Faults)
	}
	if o.Executable == "" {
		return Report{}, errors.New("no settle executable to run the worker")
	}
	if names := strings.Split(o.Bank, ","); len(names) > 1 {
		if o.FundsCheck {
			return Report{}, errors.New("the funds check runs with one bank")
		}
		return runBanks(ctx, o, names, faults, start)
	}
	if o.FundsCheck && o.Source != "" {
		return Report{}, errors.New("the funds check runs with the HTTP API, not an event source")
	}
	say := func(format string, args ...any) { fmt.Fprintf(o.Out, format+"\n", args...) }
	note := func(format string, args ...any) { fmt.Fprintf(o.Err, "settle demo: "+format+"\n", args...) }

	// The database: fresh, of its own.
	dbURL, where, pool, err := openDemoDB(ctx, o.DatabaseURL, note)
	if err != nil {
		return Report{}, err
	}
	defer pool.Close()

	// The bank and the worker.
	conn, err := o.Connectors.Lookup(o.Bank)
	if err != nil {
		return Report{}, err
	}
	caps := conn.Capabilities
	var (
		jwsKey    *rsa.PublicKey
		workerEnv []string
	)
	if signsRequests[o.Bank] {
		keyDir, err := os.MkdirTemp("", "settle-demo-key-")
		if err != nil {
			return Report{}, fmt.Errorf("error creating a directory for the demo's signing key: %w", err)
		}
		defer os.RemoveAll(keyDir)
		key, path, err := signingKey(keyDir)
		if err != nil {
			return Report{}, err
		}
		jwsKey = &key.PublicKey
		workerEnv = []string{bankclient.EnvSigningKeyFile + "=" + path, bankclient.EnvToken + "=" + randomToken(), obie.EnvTokenKey + "=" + randomTokenKey()}
	}
	bank, err := startBank(o.Seed, faults, o.Bank, jwsKey)
	if err != nil {
		return Report{}, err
	}
	defer func() {
		if err := bank.stop(); err != nil {
			note("error stopping the bank: %v", err)
		}
	}()
	dir, err := os.MkdirTemp("", "settle-demo-")
	if err != nil {
		return Report{}, fmt.Errorf("error creating the demo's log directory: %w", err)
	}
	token := randomToken()
	sinks, err := startOutcomeSinks()
	if err != nil {
		return Report{}, err
	}
	defer sinks.stop()
	workerEnv = append(workerEnv, sinks.env()...)
	var srcArgs, srcEnv []string
	if o.FundsCheck {
		srcArgs = append(srcArgs, "--funds-check")
	}
	var kafka *kafkaDemo
	switch o.Source {
	case sourceNATS:
		srcArgs, srcEnv = natsWorkerArgs(o.NATSURL)
		if err := resetDemoStream(ctx, o.NATSURL); err != nil {
			return Report{}, err
		}
	case sourceKafka:
		if kafka, err = startKafka(); err != nil {
			return Report{}, err
		}
		defer kafka.close()
		srcArgs = kafka.workerArgs()
	}
	if o.Source == sourceSQS {
		srcArgs, srcEnv = o.SQS.workerArgs()
	}
	logPath := filepath.Join(dir, "worker.log")
	if o.Source != "" {
		logPath = filepath.Join(dir, "worker-2.log") // worker-1.log is the one killed before its ack
	}
	// The bank pushes its payments' status changes to the worker as
	// signed webhooks (hints: each makes the worker ask the bank at once),
	// where its connector takes them.
	hookSecret := ""
	if conn.VerifyWebhook != nil && o.Bank != "obie" {
		hookSecret = randomToken()
		workerEnv = append(workerEnv, bankclient.EnvWebhookSecret+"="+hookSecret)
	}
	// At an Open Banking bank each payment waits for its account holder's
	// authorisation: the demo's account holders open the links the
	// console lists (the fakebank's page decides by itself after
	// consent_delay_ms), as a customer sent the link would.
	var consoleURL atomic.Value
	consoleURL.Store("")
	if conn.Capabilities.Authorisation {
		holder := &psu.Holder{Console: func() string { return consoleURL.Load().(string) }, Operator: "demo", Token: token}
		defer psu.Start(holder)()
	}
	start2 := func() (*workerproc.Proc, error) {
		w, err := startWorker(ctx, o.Executable, dbURL, bank.url, o.Bank, token, logPath, append(workerEnv, srcEnv...), srcArgs...)
		if err == nil {
			consoleURL.Store(w.URL())
		}
		if err == nil && hookSecret != "" {
			if err = bank.bank.SetWebhook(w.URL()+"/v1/bank/webhooks/"+conn.Name, hookSecret); err != nil {
				_ = w.Stop(workerStopTimeout)
				return nil, err
			}
		}
		return w, err
	}
	stream := GenerateFor(o.Bank, o.Events, o.Seed, time.Now())
	rep = Report{Events: stream.Total(), Settlements: len(stream.First), Redeliveries: stream.Redeliveries, Conflicts: stream.Conflicts,
		asked: askedHow(o.Connectors, o.Bank), caps: caps, source: o.Source}
	var worker *workerproc.Proc
	if o.Source == "" {
		if worker, err = start2(); err != nil {
			return Report{}, err
		}
	}
	mark := time.Now()
	rep.phase("start", &start0)
	stopWorker := func() {
		if worker == nil {
			return
		}
		if err := worker.Stop(workerStopTimeout); err != nil {
			note("worker: %v (log: %s)", err, worker.LogPath())
		} else if err == nil && rep.OK() && !o.Keep {
			// A clean run leaves nothing behind; a failed one keeps the log.
			_ = os.RemoveAll(dir)
		}
	}
	defer func() { stopWorker() }()

	say("settle demo: %d payout events for %d settlements (%d redeliveries, %d conflicting), bank profile %q",
		rep.Events, rep.Settlements, rep.Redeliveries, rep.Conflicts, o.Faults)
	say("  database  %s", where)
	say("  bank      %s (fakebank in-process: %s)", bank.url, describe(faults))
	if conn.Capabilities.Authorisation {
		say("  consents  each payment waits for its account holder: they open the link the console lists under")
		say("            /console/authorisations, approve on the bank's page (%s/authorize; it decides by itself", bank.url)
		say("            after %d ms) and are sent back to the console, which keeps their token encrypted and pays", faults.ConsentDelayMS)
	}
	say("  events    %s, %s (webhook receivers in-process; the second answers 503 to every fourth call)",
		sinks.sinks[0].url, sinks.sinks[1].url)
	switch o.Source {
	case sourceNATS:
		say("  queue     %s (JetStream stream %s, subject %s, durable consumer %s)", o.NATSURL, demoStream, demoSubject, demoConsumer)
		say("")
		if worker, err = o.viaNATS(ctx, &rep, stream, pool, dbURL, bank.url, token, dir, workerEnv, start2, say); err != nil {
			return rep, err
		}
	case sourceSQS:
		say("  queue     %s (%s)", o.SQS.URL, o.SQS.Describe)
		say("")
		if worker, err = o.viaSQS(ctx, &rep, stream, pool, dbURL, bank.url, token, dir, workerEnv, start2, say); err != nil {
			return rep, err
		}
	case sourceKafka:
		say("  queue     %s (kfake, an in-process stand-in for Kafka, not Kafka: topic %s, %d partitions, group %s)",
			kafka.spec, demoTopic, demoPartitions, kafkasrc.DefaultGroup)
		say("")
		if worker, err = o.viaKafka(ctx, kafka, &rep, stream, pool, dbURL, bank.url, token, dir, workerEnv, start2, say); err != nil {
			return rep, err
		}
	default:
		say("  worker    %s (settle worker, pid %d, log %s)", worker.URL(), worker.PID(), worker.LogPath())
		say("")

		if o.FundsCheck {
			if err := rep.fund(ctx, pool, stream); err != nil {
				return rep, err
			}
		}
		// Submit: first deliveries, then the redeliveries and conflicts.
		bar := o.bar(rep.Events, "submitting")
		sopts := submit.Options{URL: worker.URL(), Token: token, Concurrency: 16, OnResult: func(submit.Result) { bar.Add(1) }}
		first, err := submit.Run(ctx, bytes.NewReader(NDJSON(stream.First)), sopts)
		if err != nil {
			return rep, fmt.Errorf("error submitting the events: %w", err)
		}
		again, err := submit.Run(ctx, bytes.NewReader(NDJSON(stream.Again)), sopts)
		if err != nil {
			return rep, fmt.Errorf("error submitting the redeliveries: %w", err)
		}
		bar.Finish()
		rep.Submit = merge(first, again)
		say("submitted %d events through the API: %d created, %d replayed, %d conflict, %d invalid, %d without an answer (%d retries)",
			rep.Submit.Lines, rep.Submit.Created, rep.Submit.Replayed, rep.Submit.Conflict, rep.Submit.Invalid, rep.Submit.Errors, rep.Submit.Retries)
	}
	rep.phase("submit", &mark)

	// Wait until every settlement is terminal.
	if err := o.waitTerminal(ctx, pool, rep.Settlements); err != nil {
		if !errors.Is(err, errTimeout) {
			return rep, err
		}
		rep.Violations = append(rep.Violations, err.Error())
	}
	rep.phase("settle", &mark)

	if o.Source != "" {
		drain := o.drainQueue
		switch o.Source {
		case sourceSQS:
			drain = o.drainSQS
		case sourceKafka:
			drain = func(ctx context.Context, rep *Report) error { return o.drainKafka(ctx, kafka, rep) }
		}
		if err := drain(ctx, &rep); err != nil {
			if !errors.Is(err, errTimeout) {
				return rep, err
			}
			rep.Violations = append(rep.Violations, err.Error())
		}
		if err := readQueueOutcomes(ctx, pool, &rep); err != nil {
			return rep, err
		}
	}

	// The reports, against a calm bank (the storm is over; the report only
	// reads). Settled payments still come back, and at least a few do.
	if err := bank.bank.SetFaults(fakebank.Faults{SettleDelayMS: faults.SettleDelayMS}); err != nil {
		return rep, fmt.Errorf("error calming the bank: %w", err)
	}
	// The bank's books, through its API where it has a list of payments,
	// else read in this process (Open Banking has none).
	client := bank.bank.BooksClient()
	if !caps.NoList {
		if client, err = conn.New(bank.url, bankclient.Options{}); err != nil {
			return rep, err
		}
	}
	if err := o.returns(ctx, pool, bank, client, faults, !caps.ReturnsOnStatementsOnly); err != nil {
		if !errors.Is(err, errTimeout) {
			return rep, err
		}
		rep.Violations = append(rep.Violations, err.Error())
	}
	rep.phase("returns", &mark)
	if caps.ReturnsOnStatementsOnly {
		// Its returns reach settle only through the statement: import it
		// before the reports are read.
		if err := rep.importStatements(ctx, pool, bank.url, start); err != nil {
			return rep, err
		}
	}
	if err := rep.read(ctx, pool, bank, client); err != nil {
		return rep, err
	}
	if o.FundsCheck {
		// After the summary was read: the refused receipt is not one of
		// the stream's.
		if err := rep.overdraft(ctx, pool, worker.URL(), token); err != nil {
			return rep, err
		}
	}
	if !caps.ReturnsOnStatementsOnly {
		if err := rep.importStatements(ctx, pool, bank.url, start); err != nil {
			return rep, err
		}
	}
	rep.check(stream)
	if err := rep.checkInvariants(ctx, pool, client, stream); err != nil {
		return rep, err
	}
	rep.phase("statements and reports", &mark)
	if err := o.outcomes(ctx, pool, sinks, &rep); err != nil {
		return rep, err
	}
	rep.phase("events", &mark)
	rep.Duration = time.Since(start)
	rep.print(o.Out)

	if o.Keep {
		say("")
		say("Still running (Ctrl-C to stop):")
		say("  API        %s   (Authorization: Bearer %s)", worker.URL(), token)
		say("  console    %s/console/   (user: your name, password: %s)", worker.URL(), token)
		say("  River UI   %s/riverui/   (user: anything, password: %s)", worker.URL(), token)
		say("  metrics    curl -H 'Authorization: Bearer %s' %s/metrics", token, worker.URL())
		say("  bank       %s/admin/stats", bank.url)
		say("  reconcile  DATABASE_URL='%s' settle reconcile", dbURL)
		say("             DATABASE_URL='%s' settle reconcile bank --bank-url %s", dbURL, bank.url)
		say("             DATABASE_URL='%s' settle reconcile bank --statements", dbURL)
		say("  statement  curl '%s/v1/statements/%s?format=mt940'   (or camt.053, camt.054, bai2)", bank.url, time.Now().UTC().Format(time.DateOnly))
		say("  submit     SETTLE_API_TOKEN=%s settle submit --url %s FILE", token, worker.URL())
		<-ctx.Done()
	}
	return rep, nil
}

var errTimeout = errors.New("not every settlement became terminal in time")

// waitTerminal polls the state counts until every settlement is confirmed,
// failed or returned, drawing a progress bar.
func (o Options) waitTerminal(ctx context.Context, pool *pgxpool.Pool, want int) error {
	bar := o.bar(want, "settling")
	defer bar.Finish()
	deadline := time.NewTimer(o.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := int64(-1)
	for {
		by, _, err := metrics.CountStates(ctx, pool)
		if err != nil {
			return err
		}
		terminal := by["confirmed"] + by["failed"] + by["returned"]
		if terminal != last {
			bar.Set(terminal)
			last = terminal
		}
		if int(terminal) >= want && by["pending"]+by["sent"]+by["uncertain"] == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%w: after %s, %d pending, %d sent, %d uncertain", errTimeout, o.Timeout, by["pending"], by["sent"], by["uncertain"])
		case <-tick.C:
		}
	}
}

// read fills the report from the database and the bank.
func (r *Report) read(ctx context.Context, pool *pgxpool.Pool, bank *bankServer, client bankclient.Bank) error {
	var err error
	if r.Summary, err = (&inspect.Inspector{DB: pool}).Summary(ctx); err != nil {
		return fmt.Errorf("error reading the reconcile summary: %w", err)
	}
	if !r.caps.NoList {
		var br audit.BankReport
		if r.Bank, err = (&audit.BankReporter{DB: pool, Bank: client}).Run(ctx, &br); err != nil {
			return fmt.Errorf("error reconciling with the bank: %w", err)
		}
	}
	r.BankStats = bank.bank.Stats()
	r.BankWebhooks = bank.bank.WebhookStats()
	cs := bank.bank.ConsentStats()
	r.Consents, r.ConsentReplays = cs.Consents, cs.ConsentReplays
	r.Traffic = bank.traffic()
	err = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE s.state = 'confirmed'), count(*) FILTER (WHERE s.state = 'failed')
		FROM settlements s WHERE EXISTS (SELECT 1 FROM settlement_transitions t WHERE t.settlement_id = s.settlement_id AND t.to_state = 'uncertain')`).
		Scan(&r.Uncertain, &r.ResolvedConfirmed, &r.ResolvedFailed)
	if err != nil {
		return fmt.Errorf("error counting uncertain settlements: %w", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM settlements WHERE send_attempts > 1`).Scan(&r.Resent); err != nil {
		return fmt.Errorf("error counting resent settlements: %w", err)
	}
	ps, err := bankclient.AllPayments(ctx, client)
	if err != nil {
		return fmt.Errorf("error reading the bank's statement: %w", err)
	}
	back := backAtBank(ps)
	r.Returns = int64(len(back))
	err = pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE s.state = 'returned' AND r.source <> 'statement'),
		count(*) FILTER (WHERE s.state = 'returned' AND r.source = 'statement'),
		count(*) FILTER (WHERE s.state = 'failed' AND coalesce(s.bank_reference, s.settlement_id) = ANY($1)),
		(SELECT count(*) FROM ledger_movements WHERE kind = 'reversal')
		FROM settlements s LEFT JOIN settlement_transitions r ON r.settlement_id = s.settlement_id AND r.to_state = 'returned'`,
		back).Scan(&r.ReturnedByStatus, &r.ReturnedByStatement, &r.FailedReturned, &r.Reversals)
	if err != nil {
		return fmt.Errorf("error counting returns: %w", err)
	}
	return nil
}

// check compares what happened with what must hold.
func (r *Report) check(st Stream) {
	fail := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	s, sum := r.Submit, r.Summary
	queue := r.source != ""
	if queue {
		r.checkQueue()
	} else if s.Created != r.Settlements || s.Replayed != r.Redeliveries || s.Conflict != r.Conflicts || s.Invalid != 0 || s.Errors != 0 {
		fail("submit counted %d created, %d replayed, %d conflict, %d invalid, %d errors; expected %d, %d, %d, 0, 0",
			s.Created, s.Replayed, s.Conflict, s.Invalid, s.Errors, r.Settlements, r.Redeliveries, r.Conflicts)
	}
	confirmed, failed, returned := sum.ByState["confirmed"], sum.ByState["failed"], sum.ByState["returned"]
	if int(confirmed+failed+returned) != r.Settlements {
		fail("%d of %d settlements are terminal", confirmed+failed+returned, r.Settlements)
	}
	if sum.NeedsInvestigation != 0 {
		fail("%d settlements need investigation", sum.NeedsInvestigation)
	}
	if sum.Movements != confirmed+2*returned || r.Reversals != returned {
		fail("%d ledger movements (%d reversals) for %d confirmed and %d returned settlements", sum.Movements, r.Reversals, confirmed, returned)
	}
	if returned+r.FailedReturned != r.Returns {
		fail("the bank returned %d payments; %d settlements are returned and %d failed for it", r.Returns, returned, r.FailedReturned)
	}
	if !queue && sum.Conflicts != int64(r.Conflicts) {
		fail("%d receipt conflicts recorded, %d sent", sum.Conflicts, r.Conflicts)
	}
	if !queue && sum.Replays != int64(r.Redeliveries) {
		fail("%d replays recorded, %d redeliveries sent", sum.Replays, r.Redeliveries)
	}
	if r.BankStats.MaxPaymentsPerReference > 1 || r.BankStats.MaxExecutionsPerKey > 1 {
		fail("the bank paid a settlement more than once (max_payments_per_reference %d, max_executions_per_key %d)",
			r.BankStats.MaxPaymentsPerReference, r.BankStats.MaxExecutionsPerKey)
	}
	if !r.caps.NoList {
		r.checkBank(confirmed, returned)
	}
	if r.caps.Consent && r.Consents != int64(r.Settlements) {
		fail("the bank holds %d consents for %d settlements: want one each", r.Consents, r.Settlements)
	}
	r.checkStatements(confirmed, returned)
	r.checkFunds()
}

// checkBank adds the violations of the reconciliation against the bank's
// list of payments.
func (r *Report) checkBank(confirmed, returned int64) {
	fail := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	if n := r.Bank.Discrepancies(); n != 0 {
		fail("the ledger and the bank disagree on %d settlements (run settle reconcile bank)", n)
	}
	if n := r.Bank.ByClass[audit.ClassUnresolved]; n != 0 {
		fail("%d settlements unresolved at the bank reconciliation", n)
	}
	if m := r.Bank.ByClass[audit.ClassMatched]; m != confirmed {
		fail("%d settlements matched at the bank, %d confirmed", m, confirmed)
	}
	if m := r.Bank.ByClass[audit.ClassReturnedAgreed]; m != returned {
		fail("%d settlements returned at the bank, %d returned here", m, returned)
	}
}

// checkInvariants runs the one exactly-once checker
// (audit.CheckInvariants) against the tables and the bank's books: a
// conflicting event changed nothing (each settlement holds, and was paid,
// the amount of its first delivery), one movement per confirmed
// settlement, no payment twice, every history allowed.
func (r *Report) checkInvariants(ctx context.Context, pool *pgxpool.Pool, client bankclient.Bank, st Stream) error {
	var err error
	e := audit.Expect{First: make(map[string]audit.Payload, len(st.Amounts)), CheckBank: true, Recovered: true}
	for id, amount := range st.Amounts {
		e.First[id] = audit.Payload{AmountCents: amount}
		e.Delivered = append(e.Delivered, id)
	}
	if e.Payments, err = bankclient.AllPayments(ctx, client); err != nil {
		return fmt.Errorf("error reading the bank's statement: %w", err)
	}
	v, err := audit.CheckInvariants(ctx, pool, e)
	if err != nil {
		return err
	}
	r.Violations = append(r.Violations, v...)
	return nil
}

// print writes the reports and the explanation.
func (r Report) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	s := r.Summary
	p("")
	p("settle reconcile (summary)")
	p("  by state      pending %d  sent %d  uncertain %d  confirmed %d  failed %d  returned %d",
		s.ByState["pending"], s.ByState["sent"], s.ByState["uncertain"], s.ByState["confirmed"], s.ByState["failed"], s.ByState["returned"])
	p("  receipts %d  replays %d  conflicts %d  movements %d  needs investigation %d",
		s.Receipts, s.Replays, s.Conflicts, s.Movements, s.NeedsInvestigation)
	p("")
	if r.caps.NoList {
		p("settle reconcile bank: the bank has no list of payments (Open Banking); the ledger is reconciled against")
		p("its statement below (settle reconcile bank --statements)")
	} else {
		p("settle reconcile bank (ledger vs the bank's statement, %d payments)", r.Bank.BankPayments)
		var parts []string
		for _, c := range append([]audit.Class{audit.ClassMatched, audit.ClassFailedAgreed, audit.ClassReturnedAgreed}, audit.BreakClasses...) {
			parts = append(parts, fmt.Sprintf("%s %d", c, r.Bank.ByClass[c]))
		}
		p("  %s", strings.Join(parts[:3], "  "))
		p("  %s", strings.Join(parts[3:], "  "))
	}
	p("")
	r.printFunds(p)
	r.printStatements(p)
	t := r.Traffic
	p("What you just saw")
	if r.caps.Consent {
		p("  - Each payment needed the customer's consent first (Open Banking): settle asked for %d consents, each",
			r.Consents)
		p("    under a key of its own (%d requests answered again with the same consent), waited until the customer",
			r.ConsentReplays)
		p("    authorised it, and only then sent the payment, carrying it, under the settlement's key. Every request")
		p("    was signed (x-jws-signature) and the bank verified each signature.")
		p("  - The bank received %d payment instructions; %d got no definitive answer (the connection closed, or a",
			t.Payments, t.Dropped+t.RefusedBefore)
		p("    500 that does not say whether the payment was made); %d of its %d status answers were 5xx.",
			t.StatusErrors, t.StatusCalls)
		p("    After a lost answer settle cannot know whether money moved, so it only ever asks again under the same")
		p("    idempotency key: the bank answered %d instructions with the payment it already had, and paid none", r.BankStats.Replays)
		p("    of them twice.")
	} else {
		p("  - The bank received %d payment instructions. It executed %d of them and then lost the answer (connection",
			t.Payments, t.Dropped)
		p("    closed or 504), and refused %d more with a 5xx before processing; %d of its %d status answers were 5xx.",
			t.RefusedBefore, t.StatusErrors, t.StatusCalls)
		p("    After a lost answer settle cannot know whether money moved, so it only ever asks again under the same")
		p("    idempotency key: the bank recognised %d instructions as replays of a payment it already had, and paid", t.Replayed)
		p("    none of them twice.")
	}
	if r.Uncertain == 0 {
		p("  - No settlement stayed uncertain this time: the quick retries under the same key all got a definitive")
		p("    answer. (Try --faults hostile to see settlements become uncertain and be resolved.)")
	} else {
		p("  - %d settlements got no definitive answer even after retrying and became uncertain. Each was resolved",
			r.Uncertain)
		p("    by asking the bank, never by guessing: %d confirmed, %d failed.", r.ResolvedConfirmed, r.ResolvedFailed)
		p("    (Asked: %s.)", r.asked)
	}
	if r.Resent > 0 {
		p("    %d settlements needed their instruction posted again by a later job, under the same key.", r.Resent)
	}
	switch r.source {
	case sourceNATS, sourceSQS:
		r.printQueue(p)
	case sourceKafka:
		r.printKafka(p)
	default:
		p("  - %d redelivered events were answered from the stored receipt (200, nothing done again); %s reused a",
			r.Submit.Replayed, plural(r.Submit.Conflict, "event", "events"))
		p("    known settlement_id with another amount: refused with 409 and recorded for investigation, never applied")
		p("    (settle reconcile conflicts lists them).")
	}
	p("  - %d settlements ended confirmed, %d failed (rejected by the bank or failed at settlement: nothing moved),",
		s.ByState["confirmed"], s.ByState["failed"])
	p("    %d returned (paid, then the money came back).", s.ByState["returned"])
	r.printReturns(p)
	r.printBankWebhooks(p)
	p("  - Every settlement was paid at most once: the bank holds at most %d payment per settlement",
		r.BankStats.MaxPaymentsPerReference)
	p("    (max_payments_per_reference), and the ledger has one payout per confirmed or returned settlement and one")
	p("    reversal per returned one (%d movements = %d confirmed + 2 × %d returned).",
		s.Movements, s.ByState["confirmed"], s.ByState["returned"])
	if len(r.Imports) > 0 {
		var entries, lines int64
		for _, im := range r.Imports {
			entries, lines = entries+im.Entries, lines+im.Lines
		}
		batches := ""
		if lines > entries {
			batches = ", batches among them"
		}
		p("  - At the end the bank's end-of-day statement (camt.053: %d entries%s, %d payment lines)", entries, batches, lines)
		p("    was fetched, imported once, and every line matched to its settlement by the reference settle sent:")
		p("    %d settlements matched on the statement, nothing on it unexplained (settle reconcile bank --statements).",
			r.StatementBank.ByClass[audit.ClassMatched])
	}
	r.printOutcomes(p)
	p("")
	if r.OK() {
		p("settle demo: OK, every invariant holds (%.1fs: %s)", r.Duration.Seconds(), r.phases())
		return
	}
	p("settle demo: FAILED, %d invariants do not hold:", len(r.Violations))
	for _, v := range r.Violations {
		p("  - %s", v)
	}
}

// merge adds two submit summaries.
func merge(a, b submit.Summary) submit.Summary {
	a.Lines += b.Lines
	a.Created += b.Created
	a.Replayed += b.Replayed
	a.Conflict += b.Conflict
	a.Invalid += b.Invalid
	a.Errors += b.Errors
	a.Retries += b.Retries
	a.DurationSeconds += b.DurationSeconds
	a.Problems = append(a.Problems, b.Problems...)
	return a
}

// randomTokenKey is a token key for the demo's obie worker: the account
// holders' tokens it keeps are sealed with it.
func randomTokenKey() string {
	b := make([]byte, obie.TokenKeyLen)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func randomToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "demo-" + hex.EncodeToString(b)
}

// bar is a progress bar on a terminal, or nothing (nil).
func (o Options) bar(total int, what string) *cli.Bar {
	if !o.Progress {
		return nil
	}
	return cli.NewBar(o.Err, int64(total), fmt.Sprintf("%-10s", what))
}

// plural returns "1 event" or "n events".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// askedHow says in words the questions the connector's bank allows after
// a lost answer (DESIGN.md section 13).
func askedHow(conns bankclient.Connectors, bank string) string {
	conn, err := conns.Lookup(bank)
	if err != nil {
		return "its status API"
	}
	c := conn.Capabilities
	var qs []string
	switch {
	case c.LookupByKey:
		qs = append(qs, "its status API by key")
	case c.LookupByReference:
		qs = append(qs, "its status API by reference")
	default:
		if c.Replay != "" {
			qs = append(qs, "a replay under the same key while the bank keeps it")
		}
		if c.LookupByID {
			qs = append(qs, "then by the bank's id")
		}
		if c.Search {
			qs = append(qs, "or its list after the key window")
		}
		if c.NoList {
			qs = append(qs, "or its statement after the key window")
		}
	}
	return strings.Join(qs, ", ")
}
