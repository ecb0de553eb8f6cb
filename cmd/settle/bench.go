package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/settlecmd/bench"
)

const benchDescription = `
Measures what a settlement costs on this machine and database, and measures
every figure's baseline in the same run on the same database: the claim is
the ratio. It works in a database of its own, settle_bench (dropped and
created afresh on every run, next to the one DATABASE_URL or the embedded
default points at); it never touches settle's data. It starts a fakebank in
this process (zero latency, no faults; then one answering in 100 ms) and a "settle worker" subprocess, and
stops both before it exits.

Figures and their baselines:
  insert_baseline_per_s  a bare one-row INSERT … COMMIT loop at --concurrency:
                         the commit rate of this database on this machine
  intake_single_per_s    events/s through POST /v1/settlements at --concurrency
                         (the intake API in-process, River only inserting),
                         after an untimed second of the same load and an
                         ANALYZE (a running database's plans, not an empty
                         one's); target >= 0.5 x insert_baseline_per_s
  intake_batch_per_s     events/s through POST /v1/settlements/batch, --batch
                         events per request; target >= 5 x insert_baseline_per_s
  source_nats_per_s      events/s drained by one worker's source loop from a
                         stream of an in-process JetStream server fsyncing
                         every write (as the embedded default does), batches
                         of 1000; target >= 0.8 x intake_batch_per_s; its
                         baseline source_nats_broker_per_s is the same server
                         drained by a consumer that only fetches and
                         acknowledges (no database): the broker's ceiling;
                         both fsync on this machine's disk, taking turns, so
                         source_nats_reachable: >= 0.8 x 1/(1/intake_batch_per_s
                         + 1/source_nats_broker_per_s)
  source_kafka_per_s     the same from a topic of kfake, an in-process
                         stand-in for Kafka (settle's side of the cost);
                         target >= 0.8 x intake_batch_per_s
  source_sqs_per_s       events/s drained by one worker from a queue of
                         moto_server, a local stand-in for SQS (100 to 500
                         events): moto's speed, not SQS's; no target; left
                         out when moto_server is not on PATH
  round_trips_per_event  client round trips to PostgreSQL of one single event
                         (pgx tracer), with commits_per_event and
                         rows_per_event (pg_stat_database)
  river_noop_jobs_per_s  River working no-op jobs with the worker's default
                         client settings and pool size, first insert to last
                         completion
  river_noop_best_jobs_per_s
                         the best of a small search over the queue's
                         MaxWorkers and FetchCooldown (river_best_settings,
                         every run in river_search): River's ceiling here
  e2e_per_s              settlements/s from submission (batches to the API of
                         a worker on its defaults) to confirmed with a ledger
                         movement, fakebank at zero latency;
                         target >= 1.0 x insert_baseline_per_s / 3 (three
                         commits per settlement is the line group commit
                         beats); e2e_river: at most 0.5 of River's ceiling
                         for settlements, river_noop_best_jobs_per_s x
                         settlements_per_job (River is not the limit)
  e2e_events_per_s       e2e_per_s with a webhook sink configured (--events-url
                         to a receiver in this process answering 200 at once):
                         every outcome event queued for it and relayed; the
                         mean of two runs between two without a sink (A B B
                         A), whose mean is e2e_no_events_per_s;
                         target >= 0.8 x e2e_no_events_per_s (the outbox rows
                         are written in both: this is the delivery's cost)
  events_delivered_per_s outcome events delivered per second in that run,
                         first submission to last delivery, with
                         events_per_settlement
  e2e_funds_per_s        e2e_per_s with --funds-check, payouts from 1,000 funded
                         accounts, against e2e_no_funds_per_s (the same
                         without the check, a run before and one after);
                         target >= 0.8; e2e_funds_hot_per_s and e2e_hot_per_s
                         the same from one account, with and without the
                         check (its intakes queue on that account's row)
  jobs_per_settlement    River jobs worked per settlement in the e2e run, and
                         settlements_per_job its inverse (a send_batch job
                         carries many)
  commits_per_settlement every commit of the e2e run per settlement (also as
                         e2e_db_commits_per_settlement), with
                         rows_per_settlement (pg_stat_database)
  wal_bytes_per_settlement
                         WAL written over the e2e run (pg_current_wal_lsn)
                         per settlement, with wal_fpi_per_settlement (its
                         full-page images, pg_stat_wal) and
                         bank_calls_per_settlement (requests the bank got)
  worker_cpu_s_per_1k_settlements, postgres_cpu_s_per_1k_settlements
                         CPU seconds per 1,000 settlements of the e2e run: the
                         worker process, and every PostgreSQL process (0 when
                         the server is not on this machine)
  e2e_confirm_p50_ms, e2e_confirm_p99_ms
                         latency from receipt to confirmed in the e2e run
  e2e_latency100_per_s   e2e_per_s with a bank answering in 100 ms, against
                         e2e_latency100_bound_per_s = bank concurrency / 100 ms;
                         target >= 0.8 x the bound. Where the bound is above
                         what the machine pays at zero latency, the database
                         and the CPU are the limit, not the bank: so also
                         e2e_latency100_reachable_per_s = min(the bound,
                         e2e_per_s of the same run); target >= 0.8 x it
                         (e2e_latency100_reachable)
  e2e_latency10_per_s, e2e_latency1000_per_s
                         the same at 10 ms and at 1 s, each against its bound
                         (e2e_latency10_bound_per_s, e2e_latency1000_bound_per_s;
                         target >= 0.8 x); as many settlements as the bound
                         pays in twice --duration
  life_bank_calls_per_settlement, life_wal_bytes_per_settlement,
  life_rows_per_settlement, life_commits_per_settlement,
  life_jobs_per_settlement
                         what a settlement costs over its whole life, the
                         return watch included: paid at once by a worker with
                         a short --return-watch (life_return_watch_s, its
                         checks scaled down alike) and measured until the
                         watch is over; the watch in rounds (the default),
                         and as life_own_checks_* with a check of its own per
                         settlement (--return-watch-rounds=false)
  replay_p50/p99_us_1e4  latency of one redelivery (200, Idempotent-Replayed)
  replay_p50/p99_us_1e6  with 10^4 and 10^6 receipts in the table (filled with
                         generate_series in chunks, with no statement
                         timeout), each the median of three passes over the
                         samples; target p99 at 1e6 <= 1.3 x at 1e4
  worker_peak_rss_mb     the worker's peak resident set (VmHWM) over the e2e
                         runs; target <= 150

--grid runs the intake baseline and then e2e_per_s for each intake batch
size (10, 100, 1000) and worker bank concurrency (16, 100), and prints the
grid as a Markdown table for BENCHMARKS.md (JSON: grid).

Every phase either finishes or fails naming itself and why.
--quick runs every figure in a few minutes on a small machine (the 10^6
fill takes most of it on a loaded one).`

func cmdBench(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("bench", "[--quick] [--json] [--duration D] [--concurrency N]", benchDescription, s)
	quick := fs.Bool("quick", false, "short loops and fewer settlements (every figure, a few minutes)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	duration := fs.Duration("duration", 0, "how long each throughput loop runs (default 20s, 5s with --quick)")
	concurrency := fs.Int("concurrency", 0, "clients of each throughput loop (default 16)")
	batch := fs.Int("batch", 0, "events per batch request, at most 1000 (default 100)")
	bankConcurrency := fs.Int("bank-concurrency", 0, "the worker's --bank-concurrency, also used by the River baseline (default: the worker's default)")
	cpuProfile := fs.String("worker-cpuprofile", "", "write a CPU profile of the worker under the e2e load to this file")
	poolSize := fs.Int("db-max-conns", 0, "the worker's --db-max-conns, also the River baseline's pool size (default: the worker's default)")
	grid := fs.Bool("grid", false, "run the grid instead: e2e_per_s over intake batch sizes and the worker's bank concurrency, as a Markdown table")
	only := fs.String("only", "", "run only these phases, comma-separated ("+strings.Join(bench.Phases, ", ")+"); for experiments")
	var workerArgs stringList
	fs.Var(&workerArgs, "worker-arg", "add this argument to the worker's command line (repeatable; for experiments: the figures of record use the worker's defaults)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.Err, "settle bench: unexpected arguments %q\n", fs.Args())
		return exitError
	}
	cfg := bench.Full()
	if *quick {
		cfg = bench.Quick()
	}
	if *duration > 0 {
		cfg.Duration = *duration
	}
	if *concurrency > 0 {
		cfg.Concurrency = *concurrency
	}
	if *batch > 0 {
		cfg.BatchSize = *batch
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
		for _, p := range cfg.Only {
			if !slices.Contains(bench.Phases, p) {
				fmt.Fprintf(s.Err, "settle bench: unknown phase %q in --only; the phases are %s\n", p, strings.Join(bench.Phases, ", "))
				return exitError
			}
		}
	}
	cfg.Grid = *grid
	cfg.WorkerArgs = workerArgs
	cfg.WorkerPoolSize = *poolSize
	if cfg.BatchSize > intake.MaxBatch || *duration < 0 || *concurrency < 0 || *batch < 0 || *bankConcurrency < 0 || *poolSize < 0 {
		fmt.Fprintf(s.Err, "settle bench: --batch is at most %d; --duration, --concurrency and --batch must not be negative\n", intake.MaxBatch)
		return exitError
	}
	cfg.WorkerCPUProfile = *cpuProfile
	cfg.BankConcurrency = *bankConcurrency
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(s.Err, "settle bench: error finding the settle binary: %v\n", err)
		return exitError
	}
	cfg.WorkerCommand = []string{self, "worker"}
	cfg.DatabaseLabel = "embedded default"
	if os.Getenv("DATABASE_URL") != "" {
		cfg.DatabaseLabel = "DATABASE_URL"
	}
	start := time.Now()
	cfg.Logf = func(format string, args ...any) {
		fmt.Fprintf(s.Err, "settle bench: [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	db, done := openDatabase(ctx, s, ownCluster, database.Config{NoPool: true})
	if db == nil {
		return exitError
	}
	defer done()
	cfg.URL = db.URL

	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(s.Err, "settle bench: %v\n", err)
		return exitError
	}
	cfg.Logf("done")
	if *asJSON {
		enc := json.NewEncoder(s.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(s.Err, "settle bench: %v\n", err)
			return exitError
		}
		return exitOK
	}
	if err := res.WriteTable(s.Out); err != nil {
		fmt.Fprintf(s.Err, "settle bench: %v\n", err)
		return exitError
	}
	return exitOK
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, " ") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}
