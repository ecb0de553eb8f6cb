// Package worker assembles settle's worker process: the HTTP API of
// DESIGN.md section 6 (intake, settlement lookup, /metrics, /healthz,
// /readyz, the River UI under /riverui/, the operator console under
// /console/) and the River client running every settle job (send,
// reconcile, sweep, retention) against one bank.
//
// It has the shape of Ben Johnson's wtf Main: a Config, New to build it
// all, Run to serve until the context ends and then stop gracefully, and
// Close to release what New took when Run never ran. `settle worker` parses
// flags into a Config and hands off; tests boot the same assembly in
// process. It never opens or migrates the database (its caller does) and
// never logs the API token or a bank credential.
package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/console"
	"github.com/settle/settle/events"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/auth"
	"github.com/settle/settle/internal/httpsafe"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/webhook"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/source"
)

// DefaultListen is the default address of the worker's HTTP API.
const DefaultListen = "127.0.0.1:8080"

// DefaultDBMaxConns is the default size of the worker's database pool,
// which intake and River share (BENCHMARKS.md says how it was chosen).
const DefaultDBMaxConns = 20

// maxSourceParallel is the most --source-parallel allows: each of a
// fetch's transactions holds a connection of the pool while it records.
const maxSourceParallel = 16

// Config is everything the worker is told. DefaultConfig holds the
// defaults; zero durations and counts are errors, not defaults, so that a
// flag set to 0 by mistake is refused rather than silently replaced.
type Config struct {
	// Pool is the database, opened and migrated by the caller. The worker
	// does not close it.
	Pool *pgxpool.Pool
	// Listen is the address of the HTTP API (port 0 picks a free port).
	Listen string
	// BankURL is the base URL of the bank; Bank holds its credentials and
	// transport settings (bankclient.OptionsFromEnv), Timeout and Retry are
	// set from BankTimeout and BankAttempts. Empty: the connector's own
	// (bankclient.Connector.URL: https://api.stripe.com for stripe).
	BankURL string
	Bank    bankclient.Options
	// BankName is the connector (--bank): which kind of bank BankURL is.
	BankName string
	// Connectors are the connectors BankName, Banks and Routes may name,
	// as the program lists them (settle worker: settle's own, Stripe's and
	// Open Banking's with the configuration it read); DefaultConfig's is
	// settle's own alone.
	Connectors bankclient.Connectors
	// Banks, when not empty, replaces BankName, BankURL, Bank and
	// WebhookSecret: the several banks this worker serves (--bank
	// settle,stripe), each with its own URL and credentials
	// (SETTLE_BANK_<NAME>_URL, SETTLE_BANK_<NAME>_TOKEN, …), each with its
	// own River queue and Resolver.
	Banks []BankConfig
	// BankRate caps this process's bank requests a second (0: no cap).
	BankRate float64
	// ReturnWatch is how long after confirmation the bank is still asked
	// whether a payment came back (--return-watch); 0 takes the
	// connector's default.
	ReturnWatch time.Duration
	// ReturnWatchRounds watches the confirmed settlements for returns in
	// rounds (--return-watch-rounds, default true): each round asks the
	// bank about all of them at once where it lists its returns, else one
	// by one on the schedule their own checks kept, and writes only what a
	// return changes (reconcile.Resolver.WatchInBulk). False: each has a
	// check of its own, which records every answer.
	ReturnWatchRounds bool
	// ReturnWatchInterval is the period of those rounds
	// (--return-watch-interval); 0: MaxCheckInterval.
	ReturnWatchInterval time.Duration
	// ConsentWait is how long a payment's consent may await the customer's
	// authorisation before the settlement is flagged (--consent-wait; banks
	// whose payments need a consent, such as obie).
	ConsentWait time.Duration
	// MaxAmounts are the operator's ceilings by currency (--max-amount):
	// intake refuses more, besides the connector's own limits.
	MaxAmounts intake.MaxAmounts
	// FundsCheck refuses payouts their accounts' available balances do not
	// cover (--funds-check, SETTLE_FUNDS_CHECK; DESIGN.md section 20).
	FundsCheck bool
	// IntakeGroupCommit is the intake transactions of single requests
	// (POST /v1/settlements) in flight at once; the requests arriving
	// meanwhile share the next (--intake-group-commit; 0: each commits
	// alone). See intake.Config.GroupCommit.
	IntakeGroupCommit int
	// OutcomeGroup is the transactions recording the answers of concurrent
	// sends in flight at once; the answers arriving meanwhile share the
	// next (--outcome-group; 0: each outcome commits alone). See
	// reconcile.Resolver.OutcomeGroup.
	OutcomeGroup int
	// SendBatch is the most new settlements of one bank that one intake
	// puts in one send_batch job (--send-batch, at most jobs.MaxSendBatch;
	// 1: a send_instruction job per settlement). See jobs.Inserter.
	SendBatch int
	// Routes bind the events that name no bank (--route CURRENCY=BANK,
	// --route default=BANK; SETTLE_ROUTE): by currency, else the default,
	// else the one bank served. A rule may name a bank this worker does not
	// serve: intake binds to it, and a worker of that bank pays.
	Routes intake.Routes
	// WebhookSecret verifies the bank's webhooks
	// (SETTLE_BANK_WEBHOOK_SECRET); empty refuses them all.
	WebhookSecret string
	// PublicHosts are the names besides this machine's that the API
	// answers to (--public-host); other Host headers get 421 (edge.go).
	PublicHosts []string
	// PublicURL is the console's address as account holders' browsers
	// reach it (--public-url): the Open Banking redirect URI is it plus
	// console.CallbackPath, and its host is answered to as a --public-host.
	// Empty: the address each request of the console came to.
	PublicURL string
	// RiverUIAdmin lets the River UI change jobs and queues
	// (--riverui-admin); without it the River UI is read-only.
	RiverUIAdmin bool
	// Operators are the console's operators with their own credentials
	// (--operators-file); nil: the API token with a self-asserted name.
	Operators *auth.Operators

	ReplayHorizon   time.Duration
	BankKeyTTL      time.Duration
	PendingGrace    time.Duration
	APIToken        string
	MaxInflight     int
	ShutdownTimeout time.Duration

	BankTimeout       time.Duration
	BankAttempts      int
	BankConcurrency   int
	JobTimeout        time.Duration
	RescueAfter       time.Duration // 0: JobTimeout + 10s
	Lease             time.Duration // 0: JobTimeout + 30s
	SweepInterval     time.Duration
	RetentionInterval time.Duration
	// RematchInterval is --rematch-interval: how often the statement
	// lines without a match are examined again.
	RematchInterval   time.Duration
	CheckInterval     time.Duration
	MaxCheckInterval  time.Duration
	FetchPollInterval time.Duration
	FetchCooldown     time.Duration

	// Sources are the event sources the worker consumes (--source),
	// opened by the caller; Run closes them when it ends. Each runs one
	// source.Loop beside the API (DESIGN.md section 18).
	Sources []source.Source
	// SourceMaxFailures is --source-max-failures: how many unexpected
	// failures make a message poison.
	SourceMaxFailures int
	// SourceBatch is how many messages one fetch of a source asks for.
	SourceBatch int
	// SourceParallel is how many transactions one fetch is recorded in
	// at once.
	SourceParallel int
	// SourceLeaseEvery is how often the leases of a source batch in work
	// are extended (a third of --source-lease; 0: source.DefaultLeaseEvery).
	SourceLeaseEvery time.Duration
	// EventsURLs are the webhook sinks of the outcome events
	// (--events-url, DESIGN.md section 19); EventsSecret signs them
	// (SETTLE_EVENTS_SECRET: whsec_<base64>, several comma-separated while
	// one is rotated). EventsTimeout bounds one attempt; a failed delivery
	// is retried after EventsRetryMin, doubling up to EventsRetryMax, for
	// EventsRetryFor, then marked dead.
	EventsURLs     []string
	EventsSecret   string
	EventsTimeout  time.Duration
	EventsRetryMin time.Duration
	EventsRetryMax time.Duration
	EventsRetryFor time.Duration
	// EventsBrokers are broker sinks the caller opened (--events-publish
	// nats: package events/natssink); the relay delivers to them as to
	// the webhooks. The caller closes them after Run.
	EventsBrokers []events.Sink

	// Logger receives the worker's structured logs (default: discarded).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// BankConfig is one bank a worker serves.
type BankConfig struct {
	// Name is the connector (settle, stripe, obie) and the bank's name in
	// settlements.bank.
	Name string
	// URL is the bank's base URL; empty: the connector's own.
	URL string
	// Options are its credentials and transport settings.
	Options bankclient.Options
	// WebhookSecret verifies its webhooks; empty refuses them.
	WebhookSecret string
}

// url is the bank's URL, or its connector's own among conns.
func (b BankConfig) url(conns bankclient.Connectors) string {
	if b.URL == "" {
		if conn, err := conns.Lookup(b.Name); err == nil {
			return conn.URL()
		}
	}
	return b.URL
}

// banks are the banks c serves: Banks, or the one bank of BankName.
func (c Config) banks() []BankConfig {
	if len(c.Banks) > 0 {
		return c.Banks
	}
	return []BankConfig{{Name: c.BankName, URL: c.BankURL, Options: c.Bank, WebhookSecret: c.WebhookSecret}}
}

// BankNames lists the banks c serves.
func (c Config) BankNames() []string {
	var names []string
	for _, b := range c.banks() {
		names = append(names, b.Name)
	}
	return names
}

// DefaultConfig returns the defaults of every setting, the ones
// `settle worker --help` shows.
func DefaultConfig() Config {
	return Config{
		Listen:            DefaultListen,
		BankURL:           bankclient.DefaultURL,
		BankName:          settle.Connector.Name,
		Connectors:        bankclient.Connectors{settle.Connector},
		ReplayHorizon:     intake.DefaultReplayHorizon,
		BankKeyTTL:        reconcile.DefaultKeyTTL,
		ConsentWait:       reconcile.DefaultConsentWait,
		ReturnWatchRounds: true,
		PendingGrace:      intake.DefaultPendingGrace,
		MaxInflight:       intake.DefaultMaxInflight,
		IntakeGroupCommit: intake.DefaultGroupCommit,
		OutcomeGroup:      reconcile.DefaultOutcomeGroup,
		SendBatch:         jobs.DefaultSendBatch,
		ShutdownTimeout:   15 * time.Second,
		BankTimeout:       bankclient.DefaultTimeout,
		BankAttempts:      bankclient.DefaultRetryPolicy.MaxAttempts,
		BankConcurrency:   jobs.DefaultBankConcurrency,
		JobTimeout:        jobs.DefaultJobTimeout,
		SweepInterval:     jobs.DefaultSweepInterval,
		RetentionInterval: jobs.DefaultRetentionInterval,
		RematchInterval:   jobs.DefaultRematchInterval,
		CheckInterval:     reconcile.DefaultCheckInterval,
		MaxCheckInterval:  reconcile.DefaultMaxCheckInterval,
		FetchPollInterval: jobs.DefaultFetchPollInterval,
		FetchCooldown:     jobs.DefaultFetchCooldown,
		SourceMaxFailures: source.DefaultMaxFailures,
		SourceBatch:       source.DefaultBatchSize,
		SourceParallel:    source.DefaultParallel,
		EventsTimeout:     events.DefaultWebhookTimeout,
		EventsRetryMin:    events.DefaultRetryMin,
		EventsRetryMax:    events.DefaultRetryMax,
		EventsRetryFor:    events.DefaultRetryFor,
	}
}

// Validate reports the first setting that could not work, naming its
// flag. It does not look at Pool, which New requires.
func (c Config) Validate() error {
	seen := map[string]bool{}
	for _, b := range c.banks() {
		if _, err := c.Connectors.Lookup(b.Name); err != nil {
			return fmt.Errorf("invalid --bank: %w", err)
		}
		if seen[b.Name] {
			return fmt.Errorf("invalid --bank: %s named twice", b.Name)
		}
		seen[b.Name] = true
		if u, err := url.Parse(b.url(c.Connectors)); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			what := "--bank-url"
			if len(c.Banks) > 0 {
				what = "SETTLE_BANK_" + strings.ToUpper(b.Name) + "_URL"
			}
			return fmt.Errorf("invalid %s %q: want http(s)://host[:port]", what, b.url(c.Connectors))
		}
	}
	for _, name := range c.Routes.Banks() {
		if _, err := c.Connectors.Lookup(name); err != nil {
			return fmt.Errorf("invalid --route: %w", err)
		}
	}
	switch {
	case c.BankRate < 0:
		return errors.New("--bank-rate must not be negative")
	case c.ReturnWatch < 0:
		return errors.New("--return-watch must not be negative")
	case c.ReturnWatchInterval < 0:
		return errors.New("--return-watch-interval must not be negative")
	case c.ConsentWait < 0:
		return errors.New("--consent-wait must not be negative")
	case c.ReplayHorizon <= 0:
		return errors.New("--replay-horizon must be positive")
	case c.BankKeyTTL <= 0:
		return errors.New("--bank-key-ttl must be positive")
	case c.PendingGrace <= 0:
		return errors.New("--pending-grace must be positive")
	case c.MaxInflight <= 0:
		return errors.New("--max-inflight must be positive")
	case c.IntakeGroupCommit < 0:
		return errors.New("--intake-group-commit must not be negative")
	case c.OutcomeGroup < 0:
		return errors.New("--outcome-group must not be negative")
	case c.SendBatch < 1 || c.SendBatch > jobs.MaxSendBatch:
		return fmt.Errorf("--send-batch must be between 1 and %d", jobs.MaxSendBatch)
	case c.BankAttempts < 1:
		return errors.New("--bank-attempts must be at least 1")
	case c.BankTimeout <= 0 || c.JobTimeout <= 0 || c.SweepInterval <= 0 || c.RetentionInterval <= 0 || c.RematchInterval < 0 ||
		c.CheckInterval <= 0 || c.MaxCheckInterval <= 0 || c.FetchPollInterval <= 0 || c.FetchCooldown <= 0 || c.ShutdownTimeout <= 0:
		return errors.New("--bank-timeout, --job-timeout, --sweep-interval, --retention-interval, --check-interval, --max-check-interval, --fetch-poll-interval, --fetch-cooldown and --shutdown-timeout must be positive")
	case c.BankConcurrency <= 0:
		return errors.New("--bank-concurrency must be positive")
	case c.RescueAfter < 0 || c.Lease < 0:
		return errors.New("--rescue-after and --lease must not be negative")
	case c.SourceMaxFailures < 1:
		return errors.New("--source-max-failures must be at least 1")
	case c.SourceBatch < 1 || c.SourceBatch > intake.MaxBatch:
		return fmt.Errorf("--source-batch must be between 1 and %d", intake.MaxBatch)
	case c.SourceParallel < 1 || c.SourceParallel > maxSourceParallel:
		return fmt.Errorf("--source-parallel must be between 1 and %d", maxSourceParallel)
	case c.EventsTimeout <= 0 || c.EventsRetryMin <= 0 || c.EventsRetryFor <= 0:
		return errors.New("--events-timeout, --events-retry-min and --events-retry-for must be positive")
	case c.EventsRetryMax < c.EventsRetryMin:
		return errors.New("--events-retry-max must be at least --events-retry-min")
	}
	if _, err := c.eventSinks(); err != nil {
		return err
	}
	return c.validateEdge()
}

// eventSinks builds the sinks of the outcome events: a webhook per
// EventsURLs, signed with EventsSecret, then EventsBrokers.
func (c Config) eventSinks() ([]events.Sink, error) {
	var sinks []events.Sink
	seen := map[string]bool{}
	for _, b := range c.EventsBrokers {
		if seen[b.Name()] {
			return nil, fmt.Errorf("events sink %s given twice", b.Name())
		}
		seen[b.Name()] = true
	}
	if len(c.EventsURLs) == 0 {
		return c.EventsBrokers, nil
	}
	signer, err := events.ParseSecrets(c.EventsSecret)
	if err != nil {
		return nil, fmt.Errorf("--events-url needs SETTLE_EVENTS_SECRET (whsec_<base64>): %w", err)
	}
	for _, u := range c.EventsURLs {
		w, err := events.NewWebhook(events.WebhookConfig{URL: u, Signer: signer, Timeout: c.EventsTimeout, Now: c.Now})
		if err != nil {
			return nil, err
		}
		if seen[w.Name()] {
			return nil, fmt.Errorf("--events-url %s given twice", w.Name())
		}
		seen[w.Name()] = true
		sinks = append(sinks, w)
	}
	return append(sinks, c.EventsBrokers...), nil
}

// Worker is an assembled worker: its River client, its HTTP API and the
// listener it will serve on.
type Worker struct {
	cfg    Config
	banks  []*bankUnit
	logger *slog.Logger
	// limiter bounds the log lines of refused requests (401, 403, 415, 421).
	limiter *httpsafe.Limiter
	river   *river.Client[pgx.Tx]
	// resolver is the first bank's Resolver: the console's "resolve now".
	resolver *reconcile.Resolver
	handler  http.Handler
	srv      *http.Server
	ln       net.Listener
	// stopUI ends the River UI's background services.
	stopUI context.CancelFunc
	// loops consume the event sources (Config.Sources).
	loops []*source.Loop
	// relay delivers the outcome events (nil without a sink).
	relay *events.Relay
}

// New builds the worker from cfg and starts listening on cfg.Listen (so
// Addr is known at once); nothing is served and no job runs until Run.
func New(cfg Config) (*Worker, error) {
	if cfg.Pool == nil {
		return nil, errors.New("worker: Config.Pool is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	w := &Worker{cfg: cfg, logger: cfg.Logger, limiter: &httpsafe.Limiter{}}
	var conns []bankclient.Connector
	for _, b := range cfg.banks() {
		conn, _ := cfg.Connectors.Lookup(b.Name) // Validate checked it
		w.banks = append(w.banks, &bankUnit{cfg: b, conn: conn})
		conns = append(conns, conn)
	}
	reg := metrics.NewRegistry(cfg.Pool)
	m := metrics.New(reg)

	riverConfig, err := w.riverConfig(m)
	if err != nil {
		return nil, err
	}
	if w.river, err = river.NewClient(riverpgxv5.New(cfg.Pool), riverConfig); err != nil {
		return nil, fmt.Errorf("error creating the River client: %w", err)
	}
	var uiCtx context.Context
	uiCtx, w.stopUI = context.WithCancel(context.Background())
	svc, err := intake.NewService(intake.Config{
		DB:            cfg.Pool,
		Jobs:          jobs.Inserter{Client: w.river, SendBatch: cfg.SendBatch},
		Metrics:       m,
		Now:           cfg.Now,
		ReplayHorizon: cfg.ReplayHorizon,
		PendingGrace:  cfg.PendingGrace,
		Banks:         conns,
		Routes:        cfg.Routes,
		Connectors:    cfg.Connectors,
		MaxAmounts:    cfg.MaxAmounts,
		FundsCheck:    cfg.FundsCheck,
		GroupCommit:   cfg.IntakeGroupCommit,
	})
	if err != nil {
		w.stopUI()
		return nil, err
	}
	if w.handler, err = w.apiHandler(uiCtx, svc, m, reg); err != nil {
		w.stopUI()
		return nil, err
	}
	for _, src := range cfg.Sources {
		l, err := source.NewLoop(source.Config{
			Source:        src,
			Intake:        svc,
			Metrics:       m,
			Logger:        cfg.Logger,
			BatchSize:     cfg.SourceBatch,
			Parallel:      cfg.SourceParallel,
			MaxFailures:   cfg.SourceMaxFailures,
			LeaseEvery:    cfg.SourceLeaseEvery,
			ReplayHorizon: cfg.ReplayHorizon,
			Now:           cfg.Now,
		})
		if err != nil {
			w.stopUI()
			return nil, err
		}
		w.loops = append(w.loops, l)
	}
	sinks, err := cfg.eventSinks()
	if err != nil {
		w.stopUI()
		return nil, err
	}
	if len(sinks) > 0 {
		w.relay = &events.Relay{Pool: cfg.Pool, Sinks: sinks, RetryMin: cfg.EventsRetryMin, RetryMax: cfg.EventsRetryMax,
			RetryFor: cfg.EventsRetryFor, Now: cfg.Now, Logger: cfg.Logger.With("component", "events"), Observer: m}
	}
	w.srv = newHTTPServer(w.handler, cfg.Logger)
	if w.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		w.stopUI()
		return nil, fmt.Errorf("error listening on %s: %w", cfg.Listen, err)
	}
	w.warnIfOpen()
	return w, nil
}

// Addr is the address the API listens on (useful with port 0).
func (w *Worker) Addr() string { return w.ln.Addr().String() }

// Handler is the worker's whole HTTP API, for tests that serve it
// themselves.
func (w *Worker) Handler() http.Handler { return w.handler }

// River is the worker's River client.
func (w *Worker) River() *river.Client[pgx.Tx] { return w.river }

// Run starts River and serves the API until ctx ends or the server fails,
// then stops gracefully: it stops accepting and fetching, lets requests and
// jobs in flight finish within ShutdownTimeout (jobs still running after
// two thirds of it are cancelled and retried later) and returns. ready, if
// not nil, is called once the API accepts connections.
func (w *Worker) Run(ctx context.Context, ready func(addr string)) error {
	defer w.stopUI()
	// The sinks are registered before anything is taken in or moved: an
	// event committed once intake, a source or a job runs is queued for
	// each of them.
	if w.relay != nil {
		if err := w.relay.Register(ctx); err != nil {
			w.ln.Close()
			return err
		}
	}
	// The banks served are announced before any job runs, and while the
	// worker runs: the sweep claims only settlements of banks some worker
	// serves, and the others are shown waiting for one.
	beatCtx, stopBeat := context.WithCancel(ctx)
	beatDone := make(chan struct{})
	w.beat(beatCtx)
	go func() {
		defer close(beatDone)
		t := time.NewTicker(inspect.BankHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-beatCtx.Done():
				return
			case <-t.C:
				w.beat(beatCtx)
			}
		}
	}()
	defer func() {
		stopBeat()
		<-beatDone
	}()
	if err := w.river.Start(ctx); err != nil {
		w.ln.Close()
		return fmt.Errorf("error starting River: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- w.srv.Serve(w.ln) }()
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		if w.relay != nil {
			_ = w.relay.Run(relayCtx)
		}
	}()
	defer func() {
		stopRelay()
		<-relayDone
	}()
	for _, b := range w.banks {
		w.logger.Info("serving bank", "bank", b.conn.Name, "bank_url", b.cfg.url(w.cfg.Connectors), "queue", jobs.QueueFor(b.conn.Name))
	}
	w.logger.Info("worker started", "listen", w.Addr(), "banks", w.cfg.BankNames(), "routes", w.cfg.Routes.String(), "replay_horizon", w.cfg.ReplayHorizon,
		"bank_key_ttl", w.cfg.BankKeyTTL, "max_inflight", w.cfg.MaxInflight, "api_token_set", w.cfg.APIToken != "")
	if ready != nil {
		ready(w.Addr())
	}
	// The sources stop first: a batch in work is finished (recorded and
	// acknowledged) while the database and River are still there.
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	var loops sync.WaitGroup
	for _, l := range w.loops {
		loops.Go(func() { _ = l.Run(loopCtx) })
	}

	var errs []error
	select {
	case <-ctx.Done():
	case err := <-served:
		errs = append(errs, fmt.Errorf("HTTP server stopped: %w", err))
	}
	w.logger.Info("worker stopping")
	stopLoops()
	loops.Wait()
	for _, src := range w.cfg.Sources {
		if err := src.Close(); err != nil {
			errs = append(errs, fmt.Errorf("error closing source %s: %w", src.Kind(), err))
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.ShutdownTimeout)
	defer cancel()
	if err := w.srv.Shutdown(shutdownCtx); err != nil {
		errs = append(errs, fmt.Errorf("error shutting down the HTTP server: %w", err))
	}
	if err := w.river.Stop(shutdownCtx); err != nil {
		errs = append(errs, fmt.Errorf("error stopping River: %w", err))
	}
	w.logger.Info("worker stopped")
	return errors.Join(errs...)
}

// beat records the banks this worker serves as served now.
func (w *Worker) beat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, inspect.BankHeartbeat)
	defer cancel()
	if err := inspect.BeatBanks(ctx, w.cfg.Pool, w.cfg.BankNames()); err != nil && ctx.Err() == nil {
		w.logger.Warn("could not record the banks served", "error", err)
	}
}

// Close releases what New took (the listener, the River UI's services) when
// Run was never called. It is safe to call after Run.
func (w *Worker) Close() error {
	w.stopUI()
	if err := w.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// resolvers are the worker's Resolvers by bank.
func (w *Worker) resolvers() map[string]*reconcile.Resolver {
	m := map[string]*reconcile.Resolver{}
	for _, b := range w.banks {
		m[b.conn.Name] = b.resolver
	}
	return m
}

// bankUnit is one bank the worker serves: its configuration, connector and
// Resolver.
type bankUnit struct {
	cfg      BankConfig
	conn     bankclient.Connector
	resolver *reconcile.Resolver
}

// riverConfig is the configuration of the worker's River client: every
// settle job with its queues and periodic jobs, talking to the banks.
func (w *Worker) riverConfig(m *metrics.Metrics) (*river.Config, error) {
	c := w.cfg
	var resolvers []*reconcile.Resolver
	for _, b := range w.banks {
		r, err := w.newResolver(b, m)
		if err != nil {
			return nil, err
		}
		b.resolver = r
		resolvers = append(resolvers, r)
	}
	w.resolver = resolvers[0]
	deps := jobs.Deps{
		Pool:              c.Pool,
		Resolvers:         resolvers,
		Metrics:           m,
		Now:               c.Now,
		Logger:            c.Logger,
		BankConcurrency:   c.BankConcurrency,
		SweepInterval:     c.SweepInterval,
		RetentionInterval: c.RetentionInterval,
		RematchInterval:   c.RematchInterval,
		WatchInterval:     c.ReturnWatchInterval,
		ReplayHorizon:     c.ReplayHorizon,
		JobTimeout:        c.JobTimeout,
		RescueAfter:       c.RescueAfter,
		FetchPollInterval: c.FetchPollInterval,
		FetchCooldown:     c.FetchCooldown,
		// Jobs still running after two thirds of the shutdown budget are
		// cancelled (their bank answer, if any, is still recorded) and
		// retried by another worker or after the restart.
		SoftStopTimeout: c.ShutdownTimeout * 2 / 3,
	}
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	cfg := jobs.NewRiverConfig(deps)
	cfg.Logger = c.Logger.With("component", "river")
	return cfg, nil
}

// newResolver builds the Resolver of bank b: its client, its capabilities
// and the key TTL and return watch they allow.
func (w *Worker) newResolver(b *bankUnit, m *metrics.Metrics) (*reconcile.Resolver, error) {
	c := w.cfg
	bopts := b.cfg.Options
	bopts.Timeout = c.BankTimeout
	bopts.Retry = bankclient.DefaultRetryPolicy
	bopts.Retry.MaxAttempts = c.BankAttempts
	bopts.Logger = c.Logger.With("component", "bankclient")
	bopts.Observe = m.BankObserver(b.conn.Name)
	bopts.RatePerSecond = c.BankRate
	bopts.Conns = c.BankConcurrency
	bank, err := b.conn.New(b.cfg.url(c.Connectors), bopts)
	if err != nil {
		return nil, err
	}
	caps := b.conn.Capabilities
	keyTTL := c.BankKeyTTL
	if caps.KeyWindow > 0 {
		// Never count on a key for longer than the bank keeps it, less
		// the longest one bank call can take (DESIGN.md rule 9).
		bound := caps.KeyWindow - time.Duration(c.BankAttempts)*c.BankTimeout - bopts.Retry.RateLimitWait - time.Minute
		if keyTTL > bound {
			c.Logger.Warn("--bank-key-ttl lowered to the connector's key window less one bank call",
				"bank", b.conn.Name, "bank_key_ttl", keyTTL, "used", bound)
			keyTTL = bound
		}
	}
	returnWatch := cmp.Or(c.ReturnWatch, b.conn.DefaultReturnWatch)
	if caps.ReturnsOnStatementsOnly && returnWatch > 0 {
		// Its status API never reports a return: asking would only spend
		// the bank's fair usage. Statements bring them (settle statement import).
		c.Logger.Warn("--return-watch ignored: this bank reports returns only on statements",
			"bank", b.conn.Name, "return_watch", returnWatch)
		returnWatch = 0
	}
	lease := c.Lease
	if lease == 0 {
		lease = c.JobTimeout + 30*time.Second
	}
	return &reconcile.Resolver{
		BankName:         b.conn.Name,
		ReturnWatch:      returnWatch,
		WatchInBulk:      c.ReturnWatchRounds,
		ConsentWait:      c.ConsentWait,
		RequestBound:     c.JobTimeout + time.Duration(c.BankAttempts)*c.BankTimeout,
		DB:               c.Pool,
		Bank:             bank,
		Capabilities:     &caps,
		Now:              c.Now,
		KeyTTL:           keyTTL,
		CheckInterval:    c.CheckInterval,
		MaxCheckInterval: c.MaxCheckInterval,
		Lease:            lease,
		Metrics:          m,
		Logger:           c.Logger.With("bank", b.conn.Name),
		ClaimGroup:       reconcile.DefaultClaimGroup,
		OutcomeGroup:     c.OutcomeGroup,
	}, nil
}

// apiHandler builds every route of the API: intake's (/v1/, /healthz,
// /readyz), /metrics, the River UI and the console. Routes other than
// /healthz and /readyz require the API token when one is set (the console
// checks it itself, to answer a browser with a page).
func (w *Worker) apiHandler(ctx context.Context, svc *intake.Service, m *metrics.Metrics, reg *prometheus.Registry) (http.Handler, error) {
	c := w.cfg
	ui, err := riverUI(ctx, w.river, c.Logger)
	if err != nil {
		return nil, err
	}
	token := auth.NewToken(c.APIToken)
	mux := http.NewServeMux()
	mux.Handle("/", intake.NewHandler(intake.HandlerConfig{
		Service:     svc,
		Logger:      c.Logger,
		APIToken:    c.APIToken,
		MaxInflight: c.MaxInflight,
		Limiter:     w.limiter,
	}))
	mux.Handle("GET /metrics", token.Require(metrics.Handler(reg)))
	// Webhooks carry the bank's own signature, not our token.
	// Each bank's webhooks at its own path; a check goes on the queue of
	// the settlement's bank.
	hooks := map[string]*webhook.Handler{}
	checkOf := func(insert func(jobs.Inserter, context.Context, string, string) error) func(context.Context, string) error {
		return func(ctx context.Context, id string) error {
			var bank string
			if err := c.Pool.QueryRow(ctx, "SELECT bank FROM settlements WHERE settlement_id = $1", id).Scan(&bank); err != nil {
				return fmt.Errorf("error reading the bank of settlement %s: %w", id, err)
			}
			return insert(jobs.Inserter{Client: w.river}, ctx, id, bank)
		}
	}
	check := checkOf(jobs.Inserter.CheckNow)
	for _, b := range w.banks {
		hooks[b.conn.Name] = &webhook.Handler{
			Connector: b.conn,
			Secret:    b.cfg.WebhookSecret,
			Find: func(ctx context.Context, h bankclient.Hint) (string, bool, error) {
				return reconcile.FindByHint(ctx, c.Pool, h)
			},
			Check:   check,
			Metrics: m,
			Logger:  c.Logger,
			Now:     c.Now,
		}
	}
	mux.HandleFunc("POST /v1/bank/webhooks/{connector}", func(rw http.ResponseWriter, r *http.Request) {
		h, ok := hooks[r.PathValue("connector")]
		if !ok {
			http.Error(rw, "no webhooks are taken for this connector", http.StatusNotFound)
			return
		}
		h.ServeHTTP(rw, r)
	})
	mux.Handle(RiverUIPrefix, token.Require(w.guardRiverUI(ui)))
	cons, err := console.New(console.Config{
		DB:        c.Pool,
		Resolver:  w.resolver,
		Resolvers: w.resolvers(),
		APIToken:  c.APIToken,
		Operators: c.Operators,
		Logger:    c.Logger,
		Now:       c.Now,
		// An account holder's authorisation came back: the payment goes
		// out on its bank's queue.
		CheckNow:  checkOf(jobs.Inserter.CheckRedirect),
		PublicURL: c.PublicURL,
	})
	if err != nil {
		return nil, err
	}
	mux.Handle(console.Prefix, cons)
	return w.guardEdge(mux)
}

// newHTTPServer returns the worker's HTTP server with every timeout set, so
// a slow or stalled client cannot hold a connection or a goroutine forever.
func newHTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
