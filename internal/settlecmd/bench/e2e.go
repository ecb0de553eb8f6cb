package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/events"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/settlecmd/workerproc"
)

// e2eRun is what one end-to-end run measured.
type e2eRun struct {
	perS float64
	// jobsPerSettlement is River jobs attempted per settlement.
	jobsPerSettlement float64
	// commits and rows are the database's committed transactions and rows
	// written per settlement (pg_stat_database: the worker's, River's and
	// intake's; the benchmark's own polls are taken off).
	commits, rows float64
	rssMB         float64
	// cost is what the run cost per settlement: WAL, CPU, bank calls and
	// the latency from receipt to confirmed.
	cost e2eCost
	// With an events sink: the outcome events delivered per second, from
	// the first submission to the last delivery, and events per
	// settlement.
	eventsPerS, eventsPerSettlement float64
}

// measureE2E pays cfg.E2ESettlements settlements through a settle worker
// on its defaults against a fakebank at zero latency, then
// cfg.LatencySettlements against one that answers in cfg.BankLatency, then
// counts the send job's own cost in process.
func measureE2E(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, trips *tripCounter, r *Result) error {
	run, err := runE2E(ctx, cfg, pool, dbURL, fakebank.Faults{}, cfg.E2ESettlements, "e2e")
	if err != nil {
		return err
	}
	r.E2EPerS, r.JobsPerSettlement, r.WorkerPeakRSSMB = run.perS, run.jobsPerSettlement, run.rssMB
	r.SettlementsPerJob = ratio(1, run.jobsPerSettlement)
	r.CommitsPerSettlement, r.E2ECommitsPerSettlement, r.RowsPerSettlement = run.commits, run.commits, run.rows
	c := run.cost
	r.WALBytesPerSettlement, r.WALFPIPerSettlement, r.BankCallsPerSettlement = c.walBytes, c.walFPI, c.bankCalls
	r.WorkerCPUSPer1k, r.PostgresCPUSPer1k = c.workerCPU, c.serverCPU
	r.E2EConfirmP50MS, r.E2EConfirmP99MS = ms(c.p50), ms(c.p99)
	cfg.Logf("e2e: wal_bytes_per_settlement %.0f (%.2f full-page images), bank_calls_per_settlement %.2f, CPU s per 1,000: worker %.2f, PostgreSQL %.2f; receipt to confirmed p50 %s, p99 %s",
		c.walBytes, c.walFPI, c.bankCalls, c.workerCPU, c.serverCPU, c.p50, c.p99)
	cfg.Logf("e2e_per_s %.1f, jobs_per_settlement %.2f, commits_per_settlement %.2f, rows_per_settlement %.1f, worker_peak_rss_mb %.1f",
		r.E2EPerS, r.JobsPerSettlement, r.CommitsPerSettlement, r.RowsPerSettlement, r.WorkerPeakRSSMB)
	if err := truncate(ctx, pool); err != nil {
		return err
	}

	// The same run with a webhook sink: every outcome event is queued for
	// it and relayed by the worker to a receiver answering 200 at once.
	// Twice, then once more without: A B B A, so that a load that drifts
	// during the runs weighs on both sides alike; the ratio is that of the
	// means.
	sinkURL, closeSink, err := startSink()
	if err != nil {
		return err
	}
	defer closeSink()
	var withSink []e2eRun
	for i := range 2 {
		ev, err := runE2E(ctx, cfg, pool, dbURL, fakebank.Faults{}, cfg.E2ESettlements, fmt.Sprintf("e2e-events%d", i+1), sinkURL)
		if err != nil {
			return fmt.Errorf("with a webhook sink: %w", err)
		}
		withSink = append(withSink, ev)
		r.WorkerPeakRSSMB = max(r.WorkerPeakRSSMB, ev.rssMB)
		cfg.Logf("e2e-events%d: %.1f settlements/s, %.1f events delivered/s", i+1, ev.perS, ev.eventsPerS)
		if err := truncate(ctx, pool); err != nil {
			return err
		}
	}
	again, err := runE2E(ctx, cfg, pool, dbURL, fakebank.Faults{}, cfg.E2ESettlements, "e2e-again")
	if err != nil {
		return err
	}
	r.WorkerPeakRSSMB = max(r.WorkerPeakRSSMB, again.rssMB)
	r.E2ENoEventsPerS = (run.perS + again.perS) / 2
	r.E2EEventsPerS = (withSink[0].perS + withSink[1].perS) / 2
	r.EventsDeliveredPerS = (withSink[0].eventsPerS + withSink[1].eventsPerS) / 2
	r.EventsPerSettlement = withSink[1].eventsPerSettlement
	cfg.Logf("e2e-again: %.1f settlements/s; e2e_events_per_s %.1f / e2e_no_events_per_s %.1f = %.2f, events_delivered_per_s %.1f, events_per_settlement %.2f",
		again.perS, r.E2EEventsPerS, r.E2ENoEventsPerS, r.E2EEventsPerS/r.E2ENoEventsPerS, r.EventsDeliveredPerS, r.EventsPerSettlement)
	if err := truncate(ctx, pool); err != nil {
		return err
	}

	ms := cfg.BankLatency.Milliseconds()
	slow, err := runE2E(ctx, cfg, pool, dbURL, fakebank.Faults{LatencyMinMS: ms, LatencyMaxMS: ms}, cfg.LatencySettlements, "e2e-slow")
	if err != nil {
		return fmt.Errorf("with a bank answering in %s: %w", cfg.BankLatency, err)
	}
	r.E2ELatency100PerS = slow.perS
	r.E2ELatency100BoundPerS = float64(r.BankConcurrency) / cfg.BankLatency.Seconds()
	r.E2ELatency100ReachablePerS = min(r.E2ELatency100BoundPerS, r.E2EPerS)
	r.WorkerPeakRSSMB = max(r.WorkerPeakRSSMB, slow.rssMB)
	cfg.Logf("e2e_latency100_per_s %.1f against a bound of %.0f (bank concurrency %d / %s) and %.1f reachable (the lesser of the bound and e2e_per_s)",
		r.E2ELatency100PerS, r.E2ELatency100BoundPerS, r.BankConcurrency, cfg.BankLatency, r.E2ELatency100ReachablePerS)
	if err := truncate(ctx, pool); err != nil {
		return err
	}
	for _, l := range []struct {
		latency     time.Duration
		perS, bound *float64
	}{
		{10 * time.Millisecond, &r.E2ELatency10PerS, &r.E2ELatency10BoundPerS},
		{time.Second, &r.E2ELatency1000PerS, &r.E2ELatency1000BoundPerS},
	} {
		if err := measureLatency(ctx, cfg, pool, dbURL, r, l.latency, l.perS, l.bound); err != nil {
			return err
		}
	}
	return measureSendCost(ctx, cfg, pool, dbURL, trips, r)
}

// measureLatency pays settlements through a fakebank that answers every
// request in latency and sets perS and its bound, the bank concurrency
// divided by latency. It pays as many as the bound allows in twice
// cfg.Duration (at least 20, at most cfg.LatencySettlements), so that a
// slow bank's run stays short.
func measureLatency(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, r *Result, latency time.Duration, perS, bound *float64) error {
	*bound = float64(r.BankConcurrency) / latency.Seconds()
	n := min(cfg.LatencySettlements, max(20, int(*bound*2*cfg.Duration.Seconds())))
	ms := latency.Milliseconds()
	run, err := runE2E(ctx, cfg, pool, dbURL, fakebank.Faults{LatencyMinMS: ms, LatencyMaxMS: ms}, n, fmt.Sprintf("e2e-latency%d", ms))
	if err != nil {
		return fmt.Errorf("with a bank answering in %s: %w", latency, err)
	}
	*perS = run.perS
	r.WorkerPeakRSSMB = max(r.WorkerPeakRSSMB, run.rssMB)
	cfg.Logf("e2e_latency%d_per_s %.1f against a bound of %.0f (bank concurrency %d / %s; %d settlements)",
		ms, *perS, *bound, r.BankConcurrency, latency, n)
	return truncate(ctx, pool)
}

// runE2E pays n settlements through a settle worker subprocess and a
// fakebank with faults: submitted in batches through the worker's API, timed
// until every one is confirmed with its ledger movement. It also counts the
// River jobs worked, the commits and rows written, and reads the worker's
// peak RSS. With sinkURL, the worker relays the outcome events there
// (--events-url) and the run also times them until every one is delivered.
func runE2E(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, faults fakebank.Faults, n int, prefix string, sinkURL ...string) (e2eRun, error) {
	return runE2EWith(ctx, cfg, pool, dbURL, e2eOptions{faults: faults, n: n, prefix: prefix, sinkURL: sinkURL})
}

// e2eOptions configure one end-to-end run.
type e2eOptions struct {
	faults  fakebank.Faults
	n       int
	prefix  string
	sinkURL []string
	// fundsCheck runs the worker with --funds-check, each account credited
	// beforehand with more than it pays; accounts, when positive, is how
	// many accounts the payouts come from (default newEvent's 997).
	fundsCheck bool
	accounts   int
	// args are added to the worker's command line.
	args []string
	// watchWait, when positive, keeps the worker running that long after
	// the last settlement is confirmed, so that the run's cost includes the
	// return watch that follows (a short --return-watch in args).
	watchWait time.Duration
}

// runE2EWith is runE2E configured by o.
func runE2EWith(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, o e2eOptions) (e2eRun, error) {
	faults, n, prefix, sinkURL := o.faults, o.n, o.prefix, o.sinkURL
	var run e2eRun
	bank, err := fakebank.New(fakebank.Options{Faults: faults})
	if err != nil {
		return run, err
	}
	bankURL, err := bank.Start("127.0.0.1:0")
	if err != nil {
		return run, err
	}
	defer bank.Close()
	var env []string
	if len(sinkURL) > 0 {
		env = []string{events.EnvSecret + "=" + benchSecret(), "SETTLE_EVENTS_URL=" + strings.Join(sinkURL, " ")}
	}
	if o.fundsCheck {
		env = append(env, "SETTLE_FUNDS_CHECK=true")
		if err := fund(ctx, pool, o.accounts, prefix); err != nil {
			return run, err
		}
	}
	wcfg := cfg
	wcfg.WorkerArgs = append(slices.Clone(cfg.WorkerArgs), o.args...)
	w, err := startWorker(ctx, wcfg, dbURL, bankURL, env...)
	if err != nil {
		return run, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = stopWorker(w)
		}
	}()

	// The benchmark's own statements run on one connection, so that they
	// can be counted and taken off.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return run, fmt.Errorf("error acquiring a connection: %w", err)
	}
	defer conn.Release()
	before, err := readCounters(ctx, conn)
	if err != nil {
		return run, fmt.Errorf("error reading the database's counters: %w", err)
	}
	server := findServerCPU(ctx, conn)
	mark, err := markCost(ctx, conn, server, w, bank)
	if err != nil {
		return run, err
	}
	start := time.Now()
	if err := submit(ctx, cfg, w, n, prefix, o.accounts); err != nil {
		return run, err
	}
	cfg.Logf("%s: %d settlements submitted in %s", prefix, n, time.Since(start).Round(time.Millisecond))

	deadline := time.Now().Add(5 * time.Minute)
	var moved int
	var polls int64
	for {
		polls++
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM ledger_movements").Scan(&moved); err != nil {
			return run, fmt.Errorf("error counting movements: %w", err)
		}
		if moved >= n {
			break
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("error in the %s run: %d of %d settlements confirmed after 5 minutes; the worker's log ends:\n%s", prefix, moved, n, workerLog(w))
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return run, ctx.Err()
		}
	}
	run.perS = float64(n) / time.Since(start).Seconds()
	if o.watchWait > 0 {
		cfg.Logf("%s: every settlement confirmed; the return watch runs for %s", prefix, o.watchWait)
		select {
		case <-time.After(o.watchWait):
		case <-ctx.Done():
			return run, ctx.Err()
		}
	}
	if len(sinkURL) > 0 {
		var delivered, total int
		for {
			polls++
			if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FROM event_deliveries`).Scan(&delivered, &total); err != nil {
				return run, fmt.Errorf("error counting event deliveries: %w", err)
			}
			if delivered == total {
				break
			}
			if time.Now().After(deadline) {
				return run, fmt.Errorf("error in the %s run: %d of %d outcome events delivered after 5 minutes", prefix, delivered, total)
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return run, ctx.Err()
			}
		}
		run.eventsPerS = float64(delivered) / time.Since(start).Seconds()
		run.eventsPerSettlement = float64(delivered) / float64(n)
	}

	if run.rssMB, err = w.PeakRSSMB(); err != nil {
		return run, err
	}
	workerCPU, err := procCPU(w.PID(), false)
	if err != nil {
		return run, fmt.Errorf("error reading the worker's CPU time: %w", err)
	}
	// A backend publishes its counts when it exits: stop the worker before
	// reading them.
	stopped = true
	if err := stopWorker(w); err != nil {
		return run, err
	}
	var confirmed, worked int
	err = conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM settlements s JOIN ledger_movements m USING (settlement_id) WHERE s.state = 'confirmed'),
		(SELECT count(*) FROM river_job WHERE attempted_at IS NOT NULL)`).Scan(&confirmed, &worked)
	if err != nil {
		return run, fmt.Errorf("error checking the %s run: %w", prefix, err)
	}
	if confirmed != n {
		return run, fmt.Errorf("error in the %s run: %d settlements confirmed with a movement, want %d", prefix, confirmed, n)
	}
	run.jobsPerSettlement = float64(worked) / float64(n)
	if err := waitBackendsGone(ctx, conn, workerAppName); err != nil {
		return run, err
	}
	after, err := readCounters(ctx, conn)
	if err != nil {
		return run, fmt.Errorf("error reading the database's counters: %w", err)
	}
	d := after.since(before, polls+1)
	run.commits, run.rows = float64(d.commits)/float64(n), float64(d.rows)/float64(n)
	if run.cost, err = mark.since(ctx, conn, server, workerCPU, bank, n); err != nil {
		return run, err
	}
	if run.cost.p50, run.cost.p99, err = confirmLatency(ctx, conn, prefix); err != nil {
		return run, err
	}
	return run, nil
}

// submit posts n new events to the worker's API in batches of
// cfg.BatchSize from cfg.Concurrency clients, from accounts accounts when
// it is positive (else newEvent's).
func submit(ctx context.Context, cfg Config, w *workerproc.Proc, n int, prefix string, accounts int) error {
	client := newHTTPClient(cfg.Concurrency)
	defer client.CloseIdleConnections()
	batches := make(chan int)
	errs := make(chan error, cfg.Concurrency)
	for range cfg.Concurrency {
		go func() {
			for b := range batches {
				evs := make([]intake.Event, min(cfg.BatchSize, n-b))
				for k := range evs {
					evs[k] = newEvent(fmt.Sprintf("%s-%d", prefix, b+k), b+k)
					if accounts > 0 {
						evs[k].AccountID = fundedAccount((b + k) % accounts)
					}
				}
				// Delivered again on 503, as a producer does: the funds
				// phase's hot account queues on its lock, and batches of
				// 1,000 (--grid) can outlast the intake's timeout on a
				// loaded machine.
				if err := postBatchAgain(ctx, client, w.URL(), evs); err != nil {
					errs <- err
					for range batches { //nolint:revive // drain so the feeder ends
					}
					return
				}
			}
			errs <- nil
		}()
	}
	go func() {
		defer close(batches)
		for b := 0; b < n; b += cfg.BatchSize {
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	var first error
	for range cfg.Concurrency {
		if err := <-errs; err != nil && first == nil {
			first = fmt.Errorf("error submitting the %s settlements: %w", prefix, err)
		}
	}
	return first
}

// benchSecret is a fresh secret to sign the benchmark's outcome events
// (the receiver does not check: it measures the sender).
func benchSecret() string {
	key := make([]byte, 24)
	_, _ = rand.Read(key)
	return events.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// startSink starts a webhook receiver that answers 200 at once to every
// event, as the cheapest receiver can.
func startSink() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("error starting the benchmark's webhook receiver: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/hooks", func() { _ = srv.Close() }, nil
}
