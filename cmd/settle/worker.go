package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/events"
	"github.com/settle/settle/internal/auth"
	"github.com/settle/settle/internal/cli"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/settlecmd/worker"
	"github.com/settle/settle/migrations"
)

const workerDescription = `
Runs settle's worker: the HTTP API of DESIGN.md section 6 (intake of payout
events, settlement lookup, /metrics, /healthz, /readyz, the River UI under
/riverui/) and settle's River workers: send_instruction (POST to the bank
under the settlement's stable key), reconcile_settlement (status by key,
polled with growing intervals), and on the elected leader the periodic sweep
(re-enqueues settlements whose next check is due, including ones whose job
was lost) and retention. Run as many workers as you like on one database.
It applies the schema first (idempotent), prints "settle worker: listening on
http://ADDR" on stdout once it accepts connections, and on SIGTERM or SIGINT
stops accepting and fetching, finishes the requests and jobs in flight
(within --shutdown-timeout; jobs still running are cancelled and retried
later) and exits 0.

  POST /v1/settlements        one event: 201 new, 200 replay, 409 conflict,
                              400/422 invalid, 413 too large, 429 overloaded,
                              503 database unavailable (Retry-After)
  POST /v1/settlements/batch  NDJSON or a JSON array of up to 1000 events;
                              one result per event, in order
  GET  /v1/settlements/{id}   the settlement, its history and its movement

Safety of the HTTP edge: writes take Content-Type application/json (a batch
also application/x-ndjson), anything else is 415; a request from another
site's page (Sec-Fetch-Site, Origin) is 403; a Host that is not this machine
(localhost, 127.0.0.1, ::1) or a --public-host is 421 (/healthz and /readyz
answer any Host); the River UI is read-only unless --riverui-admin and its
bodies are capped at 1 MiB. Without an API token the worker serves only on a
loopback --listen, and says loudly that it is open; on any other address it
refuses to start.

With --source nats (repeatable; SETTLE_SOURCE) the worker also consumes
payout events from NATS JetStream (DESIGN.md section 18): NATS_URL when set,
otherwise the embedded JetStream server under $SETTLE_HOME/nats, started on
first use and shared like the embedded database. Each message holds one event
(the JSON of POST /v1/settlements); a fetched batch is recorded in one
transaction and acknowledged only after it commits. Events that can never be
accepted are kept in intake_rejects (settle reconcile rejects) and then
acknowledged; while the database is down nothing is acknowledged or rejected.
With --source sqs:QUEUE_URL it consumes an Amazon SQS queue the same way
(the standard AWS credential chain and region, AWS_ENDPOINT_URL_SQS): long
polling, the visibility timeout (--source-lease) extended while a batch is in
work, a message deleted only after its outcome committed; a dead-letter queue
and its redrive are left to the queue's own configuration. With --source
kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?group=G] it joins the consumer group G
(default settle-intake) on that topic, which must exist: a partition's offset
is committed only up to the last record whose outcome committed, never by
auto-commit; a rebalance waits for the batch in work; --source-lease is the
member's session timeout and how long a rebalance waits for it.

With --events-url, every transition, flag and receipt conflict is POSTed to
each URL as a signed Standard Webhooks event, at least once and in each
settlement's order (DESIGN.md section 19; settle events list). With
--events-publish nats each is also published to JetStream, on
settle.events.<type> of the stream --events-stream, the event id as message
id (the stream drops a repeat), and counts only once the stream acknowledged
it (--events-nats-url, else NATS_URL, else the embedded server). With
--events-publish kafka://HOST:PORT[,HOST:PORT…]/TOPIC each is produced to
that existing topic, keyed by settlement id (one settlement's events share a
partition, in order), by an idempotent producer, and counts once the broker
acknowledged it; Kafka has no message id, so a consumer deduplicates by the
Settle-Event-Id header (a repeat after a crash is a second record).

Every flag can also be set through SETTLE_<FLAG> (for example SETTLE_API_TOKEN).
Every secret of the environment (SETTLE_API_TOKEN, SETTLE_BANK_TOKEN,
SETTLE_BANK_WEBHOOK_SECRET, SETTLE_EVENTS_SECRET) can instead be read from a
file named by the same variable with _FILE appended (SETTLE_BANK_TOKEN_FILE).`

func cmdWorker(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("worker", "[flags]", workerDescription+crashPointsHelp(), s)
	c := worker.DefaultConfig()
	var logFormat, logLevel, cpuProfile string
	dbMaxConns := worker.DefaultDBMaxConns
	fs.StringVar(&c.Listen, "listen", c.Listen, "address of the HTTP API (port 0 picks a free port)")
	c.BankURL = "" // the connector's own unless given
	fs.StringVar(&c.BankURL, "bank-url", "", "base URL of the bank (default: the connector's own, "+connectorURLs()+")")
	var bankNames []string
	fs.Func("bank", "the bank connector: "+connectorNames()+" (default "+c.BankName+"); several serve several banks on one worker, comma-separated or repeated (--bank settle,stripe), each configured by its own SETTLE_BANK_<NAME>_URL, SETTLE_BANK_<NAME>_TOKEN, … and run on its own queue", func(v string) error {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				bankNames = append(bankNames, name)
			}
		}
		return nil
	})
	fs.DurationVar(&c.ConsentWait, "consent-wait", c.ConsentWait, "how long a payment's consent may await the customer's authorisation before the settlement is flagged consent_expired (banks that need consents: obie)")
	fs.DurationVar(&c.ReturnWatch, "return-watch", 0, "how long after confirmation the bank is still asked whether a payment came back (default: the connector's; settle's is 168h)")
	fs.BoolVar(&c.ReturnWatchRounds, "return-watch-rounds", c.ReturnWatchRounds, "watch confirmed settlements for returns in rounds: all at once where the bank lists its returns, else one by one, writing only what a return changes (false: a check of its own for each)")
	fs.DurationVar(&c.ReturnWatchInterval, "return-watch-interval", 0, "period of the return watch's rounds (default: --max-check-interval)")
	var insecureHTTP bool
	fs.BoolVar(&insecureHTTP, "bank-insecure-http", false, "allow plain http to a bank that is not on this machine (refused otherwise: anyone on the path could answer \"settled\"); never with a credential; logged loudly")
	fs.Float64Var(&c.BankRate, "bank-rate", 0, "bank requests a second from this process, at most (0: no cap); each worker process has its own")
	fs.Var(&c.Routes, "route", "CURRENCY=BANK or default=BANK: the bank an event that names none (no \"bank\" field) is bound to; repeatable, or a comma-separated list (SETTLE_ROUTE=USD=stripe,default=settle); default: the one bank served")
	fs.Var(&c.MaxAmounts, "max-amount", "CCY=N: refuse (422) a payout of more than N minor units of CCY, besides the connector's own limit; repeatable, or a comma-separated list (SETTLE_MAX_AMOUNT=EUR=2500000,GBP=2500000)")
	fs.BoolVar(&c.FundsCheck, "funds-check", false, "refuse (422 …insufficient-funds) a payout its account's available balance (posted minus held; settle ledger credit brings money in) does not cover, recorded as the receipt's outcome; off: payouts are held and posted without a check")
	fs.DurationVar(&c.ReplayHorizon, "replay-horizon", c.ReplayHorizon, "refuse events whose occurred_at is older than this (422)")
	fs.DurationVar(&c.BankKeyTTL, "bank-key-ttl", c.BankKeyTTL, "never re-send an instruction once this long has passed since its first attempt")
	fs.IntVar(&c.IntakeGroupCommit, "intake-group-commit", c.IntakeGroupCommit, "single requests (POST /v1/settlements) share intake transactions: at most this many run at once, and the requests arriving meanwhile share the next, each with its own answer (0: each request commits alone)")
	fs.IntVar(&c.OutcomeGroup, "outcome-group", c.OutcomeGroup, "the answers of concurrent sends share the transactions that record them: at most this many run at once, and the answers arriving meanwhile share the next, each under its own savepoint (0: each answer commits alone)")
	fs.IntVar(&c.SendBatch, "send-batch", c.SendBatch, "the new settlements of one bank that one intake creates (a batch request, a source's batch, a group commit of single requests) share send jobs of at most this many settlements, each sent concurrently (1: a job per settlement, what workers older than send_batch jobs can work: set it while upgrading)")
	fs.DurationVar(&c.PendingGrace, "pending-grace", c.PendingGrace, "how long a new settlement waits for its send job before the sweep checks it")
	fs.StringVar(&c.APIToken, "api-token", "", "when set, the API requires \"Authorization: Bearer <token>\" (never logged; at least 16 characters). Prefer SETTLE_API_TOKEN or --api-token-file: a command line is visible to every user in ps")
	var tokenFile string
	fs.Func("public-host", "a name this worker answers to besides localhost, 127.0.0.1 and ::1 (the Host of its URL: host, or host:port for that port only); other Host headers get 421, which stops DNS rebinding; repeatable (SETTLE_PUBLIC_HOST: comma- or space-separated)", func(v string) error {
		hosts := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
		if len(hosts) == 0 {
			return errors.New("empty host")
		}
		c.PublicHosts = append(c.PublicHosts, hosts...)
		return nil
	})
	fs.StringVar(&c.PublicURL, "public-url", "", "the console's address as account holders' browsers reach it (https://host[:port][/path]; plain http only on this machine): the Open Banking redirect URI is it followed by /console/authorise/callback (register that with the bank), and its host is answered to as a --public-host; empty: the address each console request came to")
	var operatorsFile string
	fs.StringVar(&operatorsFile, "operators-file", "", "the console's operators, each with their own credential: lines NAME:SHA256HEX, the hex SHA-256 of that operator's token (printf %s \"$TOKEN\" | sha256sum); each signs in with their name and token and the name recorded with their actions is verified (without it, the API token with any name, recorded as self-asserted)")
	fs.BoolVar(&c.RiverUIAdmin, "riverui-admin", false, "let the River UI cancel, retry and delete jobs and pause queues (read-only otherwise)")
	fs.StringVar(&tokenFile, "api-token-file", "", "read the API token from this file (one line) instead of --api-token")
	fs.StringVar(&logFormat, "log-format", cli.LogFormatAuto, "log format: text, json or auto (text on a terminal, json otherwise)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.IntVar(&c.MaxInflight, "max-inflight", c.MaxInflight, "intake requests served at once; past it the API answers 429 with Retry-After")
	fs.IntVar(&dbMaxConns, "db-max-conns", dbMaxConns, "connections in the database pool (intake and River share it)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long a graceful shutdown waits for requests and jobs in flight (jobs still running after two thirds of it are cancelled and retried later)")
	fs.DurationVar(&c.BankTimeout, "bank-timeout", c.BankTimeout, "timeout of one HTTP attempt to the bank")
	fs.IntVar(&c.BankAttempts, "bank-attempts", c.BankAttempts, "requests one bank call may send (the first included) before its answer counts as ambiguous; always the same key and body")
	fs.IntVar(&c.BankConcurrency, "bank-concurrency", c.BankConcurrency, "bank jobs (send, reconcile) this process runs at once, and bank calls it has in flight to each bank (each send of a send_batch job counts one)")
	fs.DurationVar(&c.JobTimeout, "job-timeout", c.JobTimeout, "longest run of one job")
	fs.DurationVar(&c.RescueAfter, "rescue-after", 0, "when River retries a job left running by a dead process (default: job timeout + 10s)")
	fs.DurationVar(&c.Lease, "lease", 0, "how long a job owns a settlement before the sweep assumes it lost (default: job timeout + 30s; must exceed --job-timeout)")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", c.SweepInterval, "how often the leader sweeps for settlements whose next check is due")
	fs.DurationVar(&c.RetentionInterval, "retention-interval", c.RetentionInterval, "how often receipts older than --replay-horizon of terminal settlements are deleted")
	fs.DurationVar(&c.RematchInterval, "rematch-interval", c.RematchInterval, "how often the imported statement lines without a match are examined again (a line imported before its settlement existed is matched and booked then)")
	fs.DurationVar(&c.CheckInterval, "check-interval", c.CheckInterval, "delay before the first status check; doubles with every check")
	fs.DurationVar(&c.MaxCheckInterval, "max-check-interval", c.MaxCheckInterval, "longest delay between status checks")
	fs.DurationVar(&c.FetchPollInterval, "fetch-poll-interval", c.FetchPollInterval, "how often an idle worker polls for jobs (it is also woken on insert)")
	fs.DurationVar(&c.FetchCooldown, "fetch-cooldown", c.FetchCooldown, "least time between two fetches of one queue while jobs flow (a queue works at most --bank-concurrency jobs per cooldown; at most --fetch-poll-interval)")
	var sources specList
	var names natsNames
	fs.Var(&sources, "source", "consume events from this source too (repeatable): nats, sqs:QUEUE_URL or kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?group=G]")
	names.register(fs, true)
	fs.IntVar(&c.SourceMaxFailures, "source-max-failures", c.SourceMaxFailures, "unexpected failures after which a message is rejected as poison (kept in intake_rejects)")
	fs.IntVar(&c.SourceBatch, "source-batch", c.SourceBatch, "messages one fetch of a source asks for")
	fs.IntVar(&c.SourceParallel, "source-parallel", c.SourceParallel, "transactions one fetch of a source is recorded in at once (the events of one settlement or one account always share one)")
	fs.Func("events-url", "POST every outcome event to this URL, signed as Standard Webhooks says with SETTLE_EVENTS_SECRET (whsec_<base64>, several comma-separated while rotating); https, or http to loopback; may be repeated (SETTLE_EVENTS_URL: space-separated)", func(v string) error {
		urls := strings.Fields(v)
		if len(urls) == 0 {
			return errors.New("empty URL")
		}
		c.EventsURLs = append(c.EventsURLs, urls...)
		return nil
	})
	fs.DurationVar(&c.EventsTimeout, "events-timeout", c.EventsTimeout, "timeout of one attempt to deliver an event to a URL (the answer included)")
	fs.DurationVar(&c.EventsRetryMin, "events-retry-min", c.EventsRetryMin, "wait before the first retry of an event a sink did not take; doubles with every retry")
	fs.DurationVar(&c.EventsRetryMax, "events-retry-max", c.EventsRetryMax, "longest wait between two retries of an event")
	fs.DurationVar(&c.EventsRetryFor, "events-retry-for", c.EventsRetryFor, "how long an event is retried at a sink before it is marked dead there (settle events list --dead)")
	var publish eventsPublish
	publish.register(fs)
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(s.Err, "settle worker: %v\n", err)
		return exitError
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if names.lease < time.Second {
		return fail(errors.New("--source-lease must be at least 1s"))
	}
	if dbMaxConns <= 0 {
		return fail(errors.New("--db-max-conns must be positive"))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fail(fmt.Errorf("invalid --log-level %q", logLevel))
	}
	logger, err := cli.NewLogger(s.Err, logFormat, level)
	if err != nil {
		return fail(err)
	}
	c.Logger = logger
	if c.APIToken, err = apiToken(c.APIToken, tokenFile); err != nil {
		return fail(err)
	}
	if err := checkTokenStrength(c.APIToken); err != nil {
		return fail(err)
	}
	if operatorsFile != "" {
		if c.Operators, err = auth.LoadOperators(operatorsFile); err != nil {
			return fail(err)
		}
	}
	if onCommandLine(fs, "api-token") {
		logger.Warn("--api-token on the command line is visible to every user of this machine (ps, /proc); set SETTLE_API_TOKEN or --api-token-file instead")
	}
	// Every secret NAME may come from the file NAME_FILE instead.
	env := secretEnv{getenv: os.Getenv}
	c.Connectors = connectors()
	c.Bank = bankclient.OptionsFromEnv(env.get)
	c.Bank.InsecureHTTP = insecureHTTP
	c.WebhookSecret = env.get(bankclient.EnvWebhookSecret)
	c.EventsSecret = env.get(events.EnvSecret)
	if len(bankNames) == 1 {
		c.BankName = bankNames[0]
	}
	if len(bankNames) > 1 {
		if c.Banks, err = severalBanks(bankNames, c.BankURL, insecureHTTP, env.get); err != nil {
			return fail(err)
		}
	}
	if env.err != nil {
		return fail(env.err)
	}
	if err := c.Validate(); err != nil {
		return fail(err)
	}
	if cpuProfile != "" {
		stop, err := startCPUProfile(cpuProfile)
		if err != nil {
			return fail(err)
		}
		defer stop()
	}

	db, done := openDatabase(ctx, s, shareCluster, database.Config{Pool: database.PoolOptions{MaxConns: int32(dbMaxConns), ApplicationName: "settle-worker"}})
	if db == nil {
		return exitError
	}
	defer done()
	pool := db.Pool
	if _, err := migrations.MigrateWith(ctx, pool, migrations.Options{BindBank: os.Getenv(envMigrateBank)}); err != nil {
		return fail(err)
	}
	c.Pool = pool
	if len(sources) > 0 {
		names.logger = logger
		srcs, natsDone, err := openSources(ctx, s, sources, names, "settle-worker")
		if err != nil {
			return fail(err)
		}
		defer natsDone()
		c.Sources = srcs
		c.SourceLeaseEvery = names.lease / 3
	}
	brokers, brokersDone, err := publish.open(ctx, s, c.EventsTimeout)
	if err != nil {
		return fail(err)
	}
	defer brokersDone()
	c.EventsBrokers = brokers
	w, err := worker.New(c)
	if err != nil {
		for _, src := range c.Sources {
			_ = src.Close()
		}
		return fail(err)
	}
	defer w.Close()
	err = w.Run(ctx, func(addr string) { fmt.Fprintf(s.Out, "settle worker: listening on http://%s\n", addr) })
	if err != nil {
		logger.Error("worker stopped with an error", "error", err)
		return exitError
	}
	return exitOK
}

// severalBanks is the configuration of the banks names of one worker, each
// from its own environment (bankEnv). The settings of a single bank
// (--bank-url, SETTLE_BANK_TOKEN and the like) are refused beside several:
// one bank's credential must never reach another.
func severalBanks(names []string, bankURL string, insecureHTTP bool, getenv func(string) string) ([]worker.BankConfig, error) {
	if bankURL != "" {
		return nil, fmt.Errorf("--bank-url serves a single bank; with --bank %s give each its SETTLE_BANK_<NAME>_URL", strings.Join(names, ","))
	}
	for _, k := range []string{bankclient.EnvToken, bankclient.EnvCAFile, bankclient.EnvStripeAccount, bankclient.EnvSigningKeyFile,
		bankclient.EnvCertFile, bankclient.EnvKeyFile, bankclient.EnvWebhookSecret} {
		if getenv(k) != "" {
			return nil, fmt.Errorf("%s serves a single bank; with --bank %s give each its own (%s)", k, strings.Join(names, ","), bankEnvName(names[0], k))
		}
	}
	var banks []worker.BankConfig
	for _, name := range names {
		env := bankEnv(name, getenv)
		b := worker.BankConfig{Name: name, URL: env(envBankURL), Options: bankclient.OptionsFromEnv(env), WebhookSecret: env(bankclient.EnvWebhookSecret)}
		b.Options.InsecureHTTP = insecureHTTP
		banks = append(banks, b)
	}
	return banks, nil
}

// envBankURL is the bank's URL in a bank's own environment
// (SETTLE_BANK_<NAME>_URL); a single bank takes --bank-url.
const envBankURL = "SETTLE_BANK_URL"

// bankEnvName is the variable of bank name that stands for the single
// bank's k: SETTLE_BANK_TOKEN → SETTLE_BANK_STRIPE_TOKEN,
// SETTLE_STRIPE_ACCOUNT → SETTLE_BANK_STRIPE_ACCOUNT.
func bankEnvName(name, k string) string {
	rest, ok := strings.CutPrefix(k, "SETTLE_BANK_")
	if !ok {
		rest = k[strings.LastIndex(k, "_")+1:]
	}
	return "SETTLE_BANK_" + strings.ToUpper(name) + "_" + rest
}

// bankEnv reads bank name's own environment under the single bank's names.
func bankEnv(name string, getenv func(string) string) func(string) string {
	return func(k string) string { return getenv(bankEnvName(name, k)) }
}

// startCPUProfile writes a CPU profile to path until the returned function
// is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("error creating the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("error starting the CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// crashPointsHelp lists every crash point (DESIGN.md section 5) for
// `settle worker --help`.
func crashPointsHelp() string {
	var b strings.Builder
	b.WriteString("\n\nCrash points (fault tests): with SETTLE_CRASH_AT=<point> the process kills itself\n")
	b.WriteString("with SIGKILL the first time it reaches <point> (SETTLE_CRASH_AFTER=N: the Nth time).\n")
	line := func(what string, points []string) {
		fmt.Fprintf(&b, "  %-22s %s\n", what, strings.Join(points, ", "))
	}
	line("every worker:", crash.Points)
	line("consents (obie):", crash.ConsentPoints)
	line("returns:", []string{crash.ReturnBeforeCommit, crash.ReturnAfterCommit})
	line("sources (--source):", crash.SourcePoints)
	line("events (--events-url):", crash.EventsPoints)
	line("statement import:", []string{crash.StatementBeforeCommit, crash.StatementAfterCommit})
	return strings.TrimRight(b.String(), "\n")
}
