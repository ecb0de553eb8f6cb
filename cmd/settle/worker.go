package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/ops"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/migrations"
	"github.com/settle/settle/reconcile"
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

Every flag can also be set through SETTLE_<FLAG> (for example SETTLE_API_TOKEN).`

// workerOptions are the flags of settle worker.
type workerOptions struct {
	listen          string
	bankURL         string
	replayHorizon   time.Duration
	bankKeyTTL      time.Duration
	pendingGrace    time.Duration
	apiToken        string
	logFormat       string
	logLevel        string
	maxInflight     int
	dbMaxConns      int
	shutdownTimeout time.Duration

	// River and the bank.
	bankTimeout       time.Duration
	bankAttempts      int
	bankConcurrency   int
	jobTimeout        time.Duration
	rescueAfter       time.Duration
	lease             time.Duration
	sweepInterval     time.Duration
	retentionInterval time.Duration
	checkInterval     time.Duration
	maxCheckInterval  time.Duration
	fetchPoll         time.Duration

	// cpuProfile, when set, is where a CPU profile of the whole run is
	// written (for settle bench).
	cpuProfile string
}

// workerDeps is what the worker's parts share. The River workers (jobs)
// take what they need from here.
type workerDeps struct {
	opts    workerOptions
	pool    *pgxpool.Pool
	logger  *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time
}

func cmdWorker(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("worker", "[flags]", workerDescription, s)
	var o workerOptions
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address of the HTTP API (port 0 picks a free port)")
	fs.StringVar(&o.bankURL, "bank-url", "http://127.0.0.1:8081", "base URL of the bank")
	fs.DurationVar(&o.replayHorizon, "replay-horizon", intake.DefaultReplayHorizon, "refuse events whose occurred_at is older than this (422)")
	fs.DurationVar(&o.bankKeyTTL, "bank-key-ttl", 24*time.Hour, "never re-send an instruction once this long has passed since its first attempt")
	fs.DurationVar(&o.pendingGrace, "pending-grace", intake.DefaultPendingGrace, "how long a new settlement waits for its send job before the sweep checks it")
	fs.StringVar(&o.apiToken, "api-token", "", "when set, the API requires \"Authorization: Bearer <token>\" (never logged)")
	fs.StringVar(&o.logFormat, "log-format", ops.LogFormatAuto, "log format: text, json or auto (text on a terminal, json otherwise)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.IntVar(&o.maxInflight, "max-inflight", intake.DefaultMaxInflight, "intake requests served at once; past it the API answers 429 with Retry-After")
	fs.IntVar(&o.dbMaxConns, "db-max-conns", 20, "connections in the database pool (intake and River share it)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long a graceful shutdown waits for requests and jobs in flight (jobs still running after two thirds of it are cancelled and retried later)")
	fs.DurationVar(&o.bankTimeout, "bank-timeout", bankclient.DefaultTimeout, "timeout of one HTTP attempt to the bank")
	fs.IntVar(&o.bankAttempts, "bank-attempts", bankclient.DefaultRetryPolicy.MaxAttempts, "requests one bank call may send (the first included) before its answer counts as ambiguous; always the same key and body")
	fs.IntVar(&o.bankConcurrency, "bank-concurrency", jobs.DefaultBankConcurrency, "bank jobs (send, reconcile) this process runs at once")
	fs.DurationVar(&o.jobTimeout, "job-timeout", jobs.DefaultJobTimeout, "longest run of one job")
	fs.DurationVar(&o.rescueAfter, "rescue-after", 0, "when River retries a job left running by a dead process (default: job timeout + 10s)")
	fs.DurationVar(&o.lease, "lease", 0, "how long a job owns a settlement before the sweep assumes it lost (default: job timeout + 30s; must exceed --job-timeout)")
	fs.DurationVar(&o.sweepInterval, "sweep-interval", jobs.DefaultSweepInterval, "how often the leader sweeps for settlements whose next check is due")
	fs.DurationVar(&o.retentionInterval, "retention-interval", jobs.DefaultRetentionInterval, "how often receipts older than --replay-horizon of terminal settlements are deleted")
	fs.DurationVar(&o.checkInterval, "check-interval", reconcile.DefaultCheckInterval, "delay before the first status check; doubles with every check")
	fs.DurationVar(&o.maxCheckInterval, "max-check-interval", reconcile.DefaultMaxCheckInterval, "longest delay between status checks")
	fs.DurationVar(&o.fetchPoll, "fetch-poll-interval", jobs.DefaultFetchPollInterval, "how often an idle worker polls for jobs (it is also woken on insert)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.Err, "settle worker: unexpected arguments %q\n", fs.Args())
		return exitError
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(s.Err, "settle worker: %v\n", err)
		return exitError
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		fmt.Fprintf(s.Err, "settle worker: invalid --log-level %q\n", o.logLevel)
		return exitError
	}
	logger, err := ops.NewLogger(s.Err, o.logFormat, level)
	if err != nil {
		fmt.Fprintf(s.Err, "settle worker: %v\n", err)
		return exitError
	}
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			fmt.Fprintf(s.Err, "settle worker: %v\n", err)
			return exitError
		}
		defer stop()
	}

	pool, _ := openDB(ctx, s, database.PoolOptions{MaxConns: int32(o.dbMaxConns), ApplicationName: "settle-worker"})
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		fmt.Fprintf(s.Err, "settle worker: %v\n", err)
		return exitError
	}

	reg := ops.NewRegistry(pool)
	d := workerDeps{opts: o, pool: pool, logger: logger, metrics: metrics.New(reg), now: time.Now}

	riverConfig, err := newRiverConfig(d)
	if err != nil {
		fmt.Fprintf(s.Err, "settle worker: %v\n", err)
		return exitError
	}
	riverClient, err := river.NewClient(riverpgxv5.New(pool), riverConfig)
	if err != nil {
		fmt.Fprintf(s.Err, "settle worker: error creating the River client: %v\n", err)
		return exitError
	}

	handler, err := newAPIHandler(ctx, d, riverClient, reg)
	if err != nil {
		fmt.Fprintf(s.Err, "settle worker: %v\n", err)
		return exitError
	}
	srv := newHTTPServer(handler, logger)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		fmt.Fprintf(s.Err, "settle worker: error listening on %s: %v\n", o.listen, err)
		return exitError
	}

	if err := riverClient.Start(ctx); err != nil {
		ln.Close()
		fmt.Fprintf(s.Err, "settle worker: error starting River: %v\n", err)
		return exitError
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	addr := ln.Addr().String()
	logger.Info("worker started", "listen", addr, "bank_url", o.bankURL, "replay_horizon", o.replayHorizon,
		"bank_key_ttl", o.bankKeyTTL, "max_inflight", o.maxInflight, "api_token_set", o.apiToken != "")
	fmt.Fprintf(s.Out, "settle worker: listening on http://%s\n", addr)

	code := exitOK
	select {
	case <-ctx.Done():
	case err := <-served:
		logger.Error("HTTP server stopped", "error", err)
		code = exitError
	}
	logger.Info("worker stopping")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Error("error shutting down the HTTP server", "error", err)
		code = exitError
	}
	if err := riverClient.Stop(shutdownCtx); err != nil {
		logger.Error("error stopping River", "error", err)
		code = exitError
	}
	logger.Info("worker stopped")
	return code
}

func (o workerOptions) validate() error {
	if u, err := url.Parse(o.bankURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid --bank-url %q: want http(s)://host[:port]", o.bankURL)
	}
	switch {
	case o.replayHorizon <= 0:
		return errors.New("--replay-horizon must be positive")
	case o.bankKeyTTL <= 0:
		return errors.New("--bank-key-ttl must be positive")
	case o.pendingGrace <= 0:
		return errors.New("--pending-grace must be positive")
	case o.maxInflight <= 0:
		return errors.New("--max-inflight must be positive")
	case o.dbMaxConns <= 0:
		return errors.New("--db-max-conns must be positive")
	case o.bankAttempts < 1:
		return errors.New("--bank-attempts must be at least 1")
	case o.bankTimeout <= 0 || o.jobTimeout <= 0 || o.sweepInterval <= 0 || o.retentionInterval <= 0 ||
		o.checkInterval <= 0 || o.maxCheckInterval <= 0 || o.fetchPoll <= 0 || o.shutdownTimeout <= 0:
		return errors.New("--bank-timeout, --job-timeout, --sweep-interval, --retention-interval, --check-interval, --max-check-interval, --fetch-poll-interval and --shutdown-timeout must be positive")
	case o.bankConcurrency <= 0:
		return errors.New("--bank-concurrency must be positive")
	case o.rescueAfter < 0 || o.lease < 0:
		return errors.New("--rescue-after and --lease must not be negative")
	}
	return nil
}

// newRiverConfig returns the configuration of the worker's River client:
// every settle worker (send, reconcile, sweep, retention) with its queues
// and periodic jobs, talking to the bank at --bank-url.
func newRiverConfig(d workerDeps) (*river.Config, error) {
	o := d.opts
	bopts := bankclient.OptionsFromEnv(os.Getenv)
	bopts.Timeout = o.bankTimeout
	bopts.Retry = bankclient.DefaultRetryPolicy
	bopts.Retry.MaxAttempts = o.bankAttempts
	bopts.Logger = d.logger.With("component", "bankclient")
	bopts.Observe = d.metrics.ObserveBank
	bank, err := bankclient.New(o.bankURL, bopts)
	if err != nil {
		return nil, err
	}
	lease := o.lease
	if lease == 0 {
		lease = o.jobTimeout + 30*time.Second
	}
	deps := jobs.Deps{
		Pool: d.pool,
		Resolver: &reconcile.Resolver{
			DB:               d.pool,
			Bank:             bank,
			Now:              d.now,
			KeyTTL:           o.bankKeyTTL,
			CheckInterval:    o.checkInterval,
			MaxCheckInterval: o.maxCheckInterval,
			Lease:            lease,
			Metrics:          d.metrics,
			Logger:           d.logger,
		},
		Now:               d.now,
		Logger:            d.logger,
		BankConcurrency:   o.bankConcurrency,
		SweepInterval:     o.sweepInterval,
		RetentionInterval: o.retentionInterval,
		ReplayHorizon:     o.replayHorizon,
		JobTimeout:        o.jobTimeout,
		RescueAfter:       o.rescueAfter,
		FetchPollInterval: o.fetchPoll,
		// Jobs still running after two thirds of the shutdown budget are
		// cancelled (their bank answer, if any, is still recorded) and
		// retried by another worker or after the restart.
		SoftStopTimeout: o.shutdownTimeout * 2 / 3,
	}
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	cfg := jobs.NewRiverConfig(deps)
	cfg.Logger = d.logger.With("component", "river")
	return cfg, nil
}

// newAPIHandler builds every route of the worker's HTTP API: intake's
// (/v1/, /healthz, /readyz), /metrics and the River UI. Routes other than
// /healthz and /readyz require the API token when one is set.
func newAPIHandler(ctx context.Context, d workerDeps, client *river.Client[pgx.Tx], reg *prometheus.Registry) (http.Handler, error) {
	svc, err := intake.NewService(intake.Config{
		DB:            d.pool,
		Jobs:          jobs.Inserter{Client: client},
		Metrics:       d.metrics,
		Now:           d.now,
		ReplayHorizon: d.opts.replayHorizon,
		PendingGrace:  d.opts.pendingGrace,
	})
	if err != nil {
		return nil, err
	}
	ui, err := ops.RiverUI(ctx, client, d.opts.apiToken, d.logger)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", intake.NewHandler(intake.HandlerConfig{
		Service:     svc,
		Logger:      d.logger,
		APIToken:    d.opts.apiToken,
		MaxInflight: d.opts.maxInflight,
	}))
	mux.Handle("GET /metrics", ops.RequireToken(d.opts.apiToken, ops.MetricsHandler(reg)))
	mux.Handle(ops.RiverUIPrefix, ui)
	return mux, nil
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
