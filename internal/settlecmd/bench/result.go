package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Result is every figure of one run. Each throughput or latency figure has
// its baseline, measured in the same run on the same database.
type Result struct {
	// Run conditions.
	Concurrency int     `json:"concurrency"`
	DurationS   float64 `json:"duration_s"`
	BatchSize   int     `json:"batch_size"`
	// BankConcurrency is the worker's bank queue concurrency, also the
	// River baseline's.
	BankConcurrency int `json:"bank_concurrency"`
	// Database says which server was measured ("embedded default" or
	// "DATABASE_URL") and Fsync its fsync setting.
	Database string `json:"database"`
	Fsync    string `json:"fsync"`

	// InsertBaselinePerS is a bare one-row INSERT … COMMIT loop at the
	// same concurrency: the commit rate of this database on this machine.
	InsertBaselinePerS float64 `json:"insert_baseline_per_s"`
	// IntakeSinglePerS is events/s through POST /v1/settlements, timed
	// after an untimed warm-up and an ANALYZE (warmUp).
	IntakeSinglePerS float64 `json:"intake_single_per_s"`
	// IntakeBatchPerS is events/s through POST /v1/settlements/batch.
	IntakeBatchPerS float64 `json:"intake_batch_per_s"`
	// SourceNATSPerS is events/s drained from a JetStream stream by one
	// worker's source loop (DESIGN.md section 18), each batch of
	// SourceBatchSize recorded in one transaction and then acknowledged.
	SourceNATSPerS float64 `json:"source_nats_per_s"`
	// SourceNATSBrokerPerS is its baseline: events/s the same embedded
	// JetStream server gives one consumer that fetches the same batches
	// and acknowledges them, with no database: the broker's ceiling on
	// this machine (each acknowledgement of its work-queue stream removes
	// the message with a write and an fsync of its own).
	SourceNATSBrokerPerS float64 `json:"source_nats_broker_per_s"`
	// SourceKafkaPerS is the same from a Kafka topic of kfake, an
	// in-process stand-in for Kafka (not Kafka): settle's side of it,
	// with a broker that costs next to nothing.
	SourceKafkaPerS float64 `json:"source_kafka_per_s"`
	// SourceSQSPerS is the same from a queue of moto_server, a local
	// stand-in for Amazon SQS (not SQS: one Python process, in memory, no
	// network), over SourceSQSEvents events; 0 when moto_server is not
	// installed. It is moto's figure, not SQS's, so no target is set on
	// it: the table shows its ratio to intake_batch_per_s.
	SourceSQSPerS   float64 `json:"source_sqs_per_s"`
	SourceSQSEvents int     `json:"source_sqs_events"`
	SourceBatchSize int     `json:"source_batch_size"`

	// RoundTripsPerEvent is the client round trips to PostgreSQL of one
	// event through POST /v1/settlements (pgx tracer: statements sent on
	// their own, pipelined batches, COPYs); RoundTripsPerBatchEvent the
	// same per event of a batch.
	RoundTripsPerEvent      float64 `json:"round_trips_per_event"`
	RoundTripsPerBatchEvent float64 `json:"round_trips_per_batch_event"`
	// CommitsPerEvent and RowsPerEvent are the database's committed
	// transactions and rows written (inserted, updated, deleted) per event
	// of the single intake loop (pg_stat_database).
	CommitsPerEvent float64 `json:"commits_per_event"`
	RowsPerEvent    float64 `json:"rows_per_event"`

	// RiverNoopJobsPerS is River working no-op jobs with the worker's
	// default client settings (RiverWorkerSettings) on the same database.
	RiverNoopJobsPerS   float64 `json:"river_noop_jobs_per_s"`
	RiverWorkerSettings string  `json:"river_worker_settings"`
	// RiverNoopBestJobsPerS is the best of River's no-op runs over a small
	// search of queue concurrency and fetch cooldown (RiverSearch), with
	// the settings that gave it: River's ceiling on this machine.
	RiverNoopBestJobsPerS float64         `json:"river_noop_best_jobs_per_s"`
	RiverBestSettings     string          `json:"river_best_settings"`
	RiverSearch           []RiverSettings `json:"river_search"`
	// E2EPerS is settlements/s from submission to confirmed with its
	// ledger movement, through a settle worker and the fakebank.
	E2EPerS float64 `json:"e2e_per_s"`
	// JobsPerSettlement is River jobs worked per settlement in the e2e run.
	JobsPerSettlement float64 `json:"jobs_per_settlement"`
	// SettlementsPerJob is its inverse: the settlements one River job
	// carries (a send_batch job sends many), so that River's ceiling for
	// settlements is river_noop_best_jobs_per_s times it.
	SettlementsPerJob float64 `json:"settlements_per_job"`
	// E2ECommitsPerSettlement is the database's committed transactions
	// per settlement during the e2e run (every client's, from
	// pg_stat_database; approximate).
	E2ECommitsPerSettlement float64 `json:"e2e_db_commits_per_settlement"`
	// CommitsPerSettlement is the same figure under its new name: every
	// commit of the e2e run per settlement, intake's and River's included,
	// the benchmark's own polls taken off. RowsPerSettlement is the rows
	// written (inserted, updated, deleted) per settlement.
	CommitsPerSettlement float64 `json:"commits_per_settlement"`
	RowsPerSettlement    float64 `json:"rows_per_settlement"`
	// WALBytesPerSettlement is the WAL written during the e2e run
	// (pg_current_wal_lsn before and after, the whole server's) per
	// settlement, and WALFPIPerSettlement the full-page images among it
	// (pg_stat_wal). The run ends when the last settlement is confirmed and
	// the worker has stopped: the return watch's later checks are not in it.
	WALBytesPerSettlement float64 `json:"wal_bytes_per_settlement"`
	WALFPIPerSettlement   float64 `json:"wal_fpi_per_settlement"`
	// BankCallsPerSettlement is the requests the fakebank received during
	// the e2e run per settlement.
	BankCallsPerSettlement float64 `json:"bank_calls_per_settlement"`
	// WorkerCPUSPer1k and PostgresCPUSPer1k are the CPU seconds (user and
	// system) per 1,000 settlements of the e2e run: the worker process
	// (its intake, River, the send job), and every process of the
	// PostgreSQL server (backends, exited ones included, and its
	// background processes; 0 when the server is not on this machine).
	WorkerCPUSPer1k   float64 `json:"worker_cpu_s_per_1k_settlements"`
	PostgresCPUSPer1k float64 `json:"postgres_cpu_s_per_1k_settlements"`
	// E2EConfirmP50MS and E2EConfirmP99MS are the latency of the e2e run
	// from receipt (the intake transaction) to confirmed (the outcome
	// transaction), in milliseconds.
	E2EConfirmP50MS float64 `json:"e2e_confirm_p50_ms"`
	E2EConfirmP99MS float64 `json:"e2e_confirm_p99_ms"`
	// RoundTripsPerSend, CommitsPerSend and RowsPerSend are what the send
	// job (reconcile.Resolver.Send) costs per settlement, counted in
	// process; River's fetch and the job's completion are not included.
	RoundTripsPerSend float64 `json:"round_trips_per_send"`
	CommitsPerSend    float64 `json:"commits_per_send"`
	RowsPerSend       float64 `json:"rows_per_send"`
	// E2EEventsPerS is e2e_per_s with a webhook sink configured: every
	// outcome event queued for it and relayed by the worker to a receiver
	// answering 200 at once (the outbox rows themselves are written in
	// both runs), the mean of two runs; E2ENoEventsPerS its baseline, the
	// mean of the e2e run before them and one after (A B B A).
	// EventsDeliveredPerS is the events delivered per second of those
	// runs, from the first submission to the last delivery, and
	// EventsPerSettlement the events each settlement wrote.
	E2EEventsPerS       float64 `json:"e2e_events_per_s"`
	E2ENoEventsPerS     float64 `json:"e2e_no_events_per_s"`
	EventsDeliveredPerS float64 `json:"events_delivered_per_s"`
	EventsPerSettlement float64 `json:"events_per_settlement"`
	// E2EFundsPerS is e2e_per_s with --funds-check, payouts from 1,000
	// funded accounts; E2ENoFundsPerS the same without the check (mean of
	// a run before and one after). E2EFundsHotPerS is e2e_per_s with the
	// check and every payout from one account, E2EHotPerS the same account
	// without the check (issue 31).
	E2EFundsPerS    float64 `json:"e2e_funds_per_s"`
	E2ENoFundsPerS  float64 `json:"e2e_no_funds_per_s"`
	E2EFundsHotPerS float64 `json:"e2e_funds_hot_per_s"`
	E2EHotPerS      float64 `json:"e2e_hot_per_s"`
	// E2ELatency100PerS is e2e_per_s with a fakebank that answers every
	// request in 100 ms (Config.BankLatency); its bound is the bank
	// concurrency divided by that latency.
	E2ELatency100PerS      float64 `json:"e2e_latency100_per_s"`
	E2ELatency100BoundPerS float64 `json:"e2e_latency100_bound_per_s"`
	// E2ELatency100ReachablePerS is what the 100 ms run could reach on
	// this machine: the lesser of its bound and e2e_per_s of the same run
	// (the bank at zero latency). Where the bound is above e2e_per_s, the
	// database and the CPU are the limit, not the bank, and this is the
	// yardstick that says how much the bank's latency costs.
	E2ELatency100ReachablePerS float64 `json:"e2e_latency100_reachable_per_s"`
	// E2ELatency10PerS and E2ELatency1000PerS are the same with a bank
	// answering in 10 ms and in 1 s, each against its bound.
	E2ELatency10PerS        float64 `json:"e2e_latency10_per_s"`
	E2ELatency10BoundPerS   float64 `json:"e2e_latency10_bound_per_s"`
	E2ELatency1000PerS      float64 `json:"e2e_latency1000_per_s"`
	E2ELatency1000BoundPerS float64 `json:"e2e_latency1000_bound_per_s"`

	// The cost of a settlement over its whole life, the return watch
	// included (the watch phase): settlements paid at once by a worker
	// with a short --return-watch (LifeReturnWatchS seconds, its checks
	// scaled down alike: --max-check-interval 125ms, rounds every second),
	// measured until the watch is over. Life* is the worker's default, the
	// watch in rounds (--return-watch-rounds); LifeOwnChecks* the same with
	// a check of its own for each settlement (--return-watch-rounds=false),
	// as before the rounds.
	LifeReturnWatchS                    float64 `json:"life_return_watch_s"`
	LifeBankCallsPerSettlement          float64 `json:"life_bank_calls_per_settlement"`
	LifeWALBytesPerSettlement           float64 `json:"life_wal_bytes_per_settlement"`
	LifeRowsPerSettlement               float64 `json:"life_rows_per_settlement"`
	LifeCommitsPerSettlement            float64 `json:"life_commits_per_settlement"`
	LifeJobsPerSettlement               float64 `json:"life_jobs_per_settlement"`
	LifeOwnChecksBankCallsPerSettlement float64 `json:"life_own_checks_bank_calls_per_settlement"`
	LifeOwnChecksWALBytesPerSettlement  float64 `json:"life_own_checks_wal_bytes_per_settlement"`
	LifeOwnChecksRowsPerSettlement      float64 `json:"life_own_checks_rows_per_settlement"`
	LifeOwnChecksCommitsPerSettlement   float64 `json:"life_own_checks_commits_per_settlement"`
	LifeOwnChecksJobsPerSettlement      float64 `json:"life_own_checks_jobs_per_settlement"`

	// Grid is e2e_per_s over intake batch sizes and the worker's bank
	// concurrency (--grid).
	Grid []GridCell `json:"grid,omitempty"`

	// Replay latency (a redelivery through the API) at the two receipt
	// counts of Config.ReplayRows.
	ReplayP50US1e4 float64 `json:"replay_p50_us_1e4"`
	ReplayP99US1e4 float64 `json:"replay_p99_us_1e4"`
	ReplayP50US1e6 float64 `json:"replay_p50_us_1e6"`
	ReplayP99US1e6 float64 `json:"replay_p99_us_1e6"`
	ReplayRows     [2]int  `json:"replay_rows"`

	// WorkerPeakRSSMB is the worker process's peak resident set (VmHWM)
	// after the e2e run.
	WorkerPeakRSSMB float64 `json:"worker_peak_rss_mb"`

	// Targets are the ratios of issues 8 and 19 with their verdicts.
	Targets []Target `json:"targets"`
}

// Target is one ratio and the bound it should meet.
type Target struct {
	Name string `json:"name"`
	// Ratio is the measured value of the ratio (for the RSS target, the
	// megabytes themselves).
	Ratio float64 `json:"ratio"`
	// Op is ">=" or "<=" and Bound the bound.
	Op    string  `json:"op"`
	Bound float64 `json:"bound"`
	Pass  bool    `json:"pass"`
	// Formula says what the ratio divides by what.
	Formula string `json:"formula"`
}

func target(name, formula string, ratio float64, op string, bound float64) Target {
	pass := ratio >= bound
	if op == "<=" {
		// A ratio of 0 is a figure not measured (or a division by one),
		// never a pass.
		pass = ratio > 0 && ratio <= bound
	}
	return Target{Name: name, Formula: formula, Ratio: ratio, Op: op, Bound: bound, Pass: pass}
}

// computeTargets fills r.Targets from the figures.
func (r *Result) computeTargets() {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	r.Targets = []Target{
		target("intake_single", "intake_single_per_s / insert_baseline_per_s",
			div(r.IntakeSinglePerS, r.InsertBaselinePerS), ">=", 0.5),
		target("intake_batch", "intake_batch_per_s / insert_baseline_per_s",
			div(r.IntakeBatchPerS, r.InsertBaselinePerS), ">=", 5),
		target("source_nats", "source_nats_per_s / intake_batch_per_s",
			div(r.SourceNATSPerS, r.IntakeBatchPerS), ">=", 0.8),
		target("source_nats_reachable", "source_nats_per_s / (1 / (1/intake_batch_per_s + 1/source_nats_broker_per_s)): the broker and the database take turns on this machine's one disk, each fsync waiting for the other's",
			div(r.SourceNATSPerS, inTurn(r.IntakeBatchPerS, r.SourceNATSBrokerPerS)), ">=", 0.8),
		target("source_kafka", "source_kafka_per_s / intake_batch_per_s (kfake, an in-process stand-in for Kafka)",
			div(r.SourceKafkaPerS, r.IntakeBatchPerS), ">=", 0.8),
		target("e2e_commit_bound", "e2e_per_s / (insert_baseline_per_s / 3)",
			div(r.E2EPerS, r.InsertBaselinePerS/3), ">=", 1),
		target("e2e_river", "e2e_per_s / (river_noop_best_jobs_per_s x settlements_per_job): the share of River's ceiling e2e uses",
			div(r.E2EPerS, r.RiverNoopBestJobsPerS*r.SettlementsPerJob), "<=", 0.5),
		target("e2e_events", "e2e_events_per_s / e2e_no_events_per_s",
			div(r.E2EEventsPerS, r.E2ENoEventsPerS), ">=", 0.8),
		target("e2e_funds", "e2e_funds_per_s / e2e_no_funds_per_s (1,000 accounts)",
			div(r.E2EFundsPerS, r.E2ENoFundsPerS), ">=", 0.8),
		target("e2e_latency100", "e2e_latency100_per_s / e2e_latency100_bound_per_s",
			div(r.E2ELatency100PerS, r.E2ELatency100BoundPerS), ">=", 0.8),
		target("e2e_latency100_reachable", "e2e_latency100_per_s / e2e_latency100_reachable_per_s (min(bound, e2e_per_s))",
			div(r.E2ELatency100PerS, r.E2ELatency100ReachablePerS), ">=", 0.8),
		target("e2e_latency10", "e2e_latency10_per_s / e2e_latency10_bound_per_s",
			div(r.E2ELatency10PerS, r.E2ELatency10BoundPerS), ">=", 0.8),
		target("e2e_latency1000", "e2e_latency1000_per_s / e2e_latency1000_bound_per_s",
			div(r.E2ELatency1000PerS, r.E2ELatency1000BoundPerS), ">=", 0.8),
		target("replay_growth", "replay_p99_us_1e6 / replay_p99_us_1e4",
			div(r.ReplayP99US1e6, r.ReplayP99US1e4), "<=", 1.3),
		target("worker_rss", "worker_peak_rss_mb",
			r.WorkerPeakRSSMB, "<=", 150),
	}
}

// WriteTable prints r as two aligned tables: the figures with their
// baselines, then the targets.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "settle bench: %s (fsync %s), concurrency %d, %gs per loop, batches of %d, bank concurrency %d\n\n",
		r.Database, r.Fsync, r.Concurrency, r.DurationS, r.BatchSize, r.BankConcurrency)
	fmt.Fprintln(tw, "figure\tvalue\tunit")
	rows := []struct {
		name string
		v    float64
		unit string
	}{
		{"insert_baseline_per_s", r.InsertBaselinePerS, "tx/s (bare INSERT+COMMIT)"},
		{"intake_single_per_s", r.IntakeSinglePerS, "events/s"},
		{"intake_batch_per_s", r.IntakeBatchPerS, "events/s"},
		{"source_nats_per_s", r.SourceNATSPerS, fmt.Sprintf("events/s drained from JetStream by one worker (batches of %d)", r.SourceBatchSize)},
		{"source_nats_broker_per_s", r.SourceNATSBrokerPerS, "events/s the same JetStream server gives a consumer that fetches and acknowledges, no database: the broker's ceiling"},
		{"source_kafka_per_s", r.SourceKafkaPerS, fmt.Sprintf("events/s drained from a topic of kfake, an in-process stand-in for Kafka, by one worker (batches of %d)", r.SourceBatchSize)},
		{"source_sqs_per_s", r.SourceSQSPerS, fmt.Sprintf("events/s drained from a queue of moto_server, a local stand-in for SQS, by one worker (%d events; %.3f of intake_batch_per_s): moto's speed, not SQS's", r.SourceSQSEvents, ratio(r.SourceSQSPerS, r.IntakeBatchPerS))},
		{"round_trips_per_event", r.RoundTripsPerEvent, "round trips to PostgreSQL per single event (pgx tracer)"},
		{"round_trips_per_batch_event", r.RoundTripsPerBatchEvent, "round trips per event of a batch"},
		{"commits_per_event", r.CommitsPerEvent, "commits per single event (pg_stat_database)"},
		{"rows_per_event", r.RowsPerEvent, "rows written per single event"},
		{"river_noop_jobs_per_s", r.RiverNoopJobsPerS, "jobs/s, the worker's defaults: " + r.RiverWorkerSettings},
		{"river_noop_best_jobs_per_s", r.RiverNoopBestJobsPerS, "jobs/s, the best of the search: " + r.RiverBestSettings},
		{"e2e_per_s", r.E2EPerS, "settlements/s (the worker's defaults, bank at zero latency)"},
		{"jobs_per_settlement", r.JobsPerSettlement, "jobs"},
		{"settlements_per_job", r.SettlementsPerJob, "settlements a River job carries in the e2e run"},
		{"commits_per_settlement", r.CommitsPerSettlement, "commits (pg_stat_database, every client's)"},
		{"rows_per_settlement", r.RowsPerSettlement, "rows written (pg_stat_database)"},
		{"wal_bytes_per_settlement", r.WALBytesPerSettlement, "bytes of WAL per settlement (pg_current_wal_lsn over the e2e run)"},
		{"wal_fpi_per_settlement", r.WALFPIPerSettlement, "full-page images per settlement (pg_stat_wal)"},
		{"bank_calls_per_settlement", r.BankCallsPerSettlement, "requests the bank received per settlement in the e2e run"},
		{"worker_cpu_s_per_1k_settlements", r.WorkerCPUSPer1k, "CPU seconds of the worker process per 1,000 settlements"},
		{"postgres_cpu_s_per_1k_settlements", r.PostgresCPUSPer1k, "CPU seconds of every PostgreSQL process per 1,000 settlements"},
		{"e2e_confirm_p50_ms", r.E2EConfirmP50MS, "ms from receipt to confirmed, p50"},
		{"e2e_confirm_p99_ms", r.E2EConfirmP99MS, "ms from receipt to confirmed, p99"},
		{"round_trips_per_send", r.RoundTripsPerSend, "round trips of the send job per settlement (in process; River's share not included)"},
		{"commits_per_send", r.CommitsPerSend, "commits of the send job per settlement"},
		{"rows_per_send", r.RowsPerSend, "rows written by the send job per settlement"},
		{"e2e_events_per_s", r.E2EEventsPerS, "settlements/s, the same with a webhook sink answering 200 at once (mean of 2 runs)"},
		{"e2e_no_events_per_s", r.E2ENoEventsPerS, "settlements/s without a sink, the runs before and after them (A B B A)"},
		{"events_delivered_per_s", r.EventsDeliveredPerS, "outcome events/s delivered in that run, first submission to last delivery"},
		{"events_per_settlement", r.EventsPerSettlement, "outcome events per settlement"},
		{"e2e_funds_per_s", r.E2EFundsPerS, "settlements/s with --funds-check, payouts from 1,000 funded accounts"},
		{"e2e_no_funds_per_s", r.E2ENoFundsPerS, "settlements/s, the same 1,000 accounts without the check (runs before and after)"},
		{"e2e_funds_hot_per_s", r.E2EFundsHotPerS, "settlements/s with --funds-check, every payout from one account (each intake waits for the one before it to commit, on that account's row)"},
		{"e2e_hot_per_s", r.E2EHotPerS, "settlements/s, one account without the check (its holds and postings spread over the shards of its balance, one per connection)"},
		{"e2e_latency100_per_s", r.E2ELatency100PerS, "settlements/s, bank answering in 100 ms"},
		{"e2e_latency100_bound_per_s", r.E2ELatency100BoundPerS, fmt.Sprintf("settlements/s (bank concurrency %d / 100 ms)", r.BankConcurrency)},
		{"e2e_latency100_reachable_per_s", r.E2ELatency100ReachablePerS, "settlements/s, the lesser of that bound and e2e_per_s (what this machine can pay)"},
		{"e2e_latency10_per_s", r.E2ELatency10PerS, "settlements/s, bank answering in 10 ms"},
		{"e2e_latency10_bound_per_s", r.E2ELatency10BoundPerS, fmt.Sprintf("settlements/s (bank concurrency %d / 10 ms)", r.BankConcurrency)},
		{"e2e_latency1000_per_s", r.E2ELatency1000PerS, "settlements/s, bank answering in 1 s"},
		{"e2e_latency1000_bound_per_s", r.E2ELatency1000BoundPerS, fmt.Sprintf("settlements/s (bank concurrency %d / 1 s)", r.BankConcurrency)},
		{"life_return_watch_s", r.LifeReturnWatchS, "s of --return-watch in the watch phase (checks scaled down alike)"},
		{"life_bank_calls_per_settlement", r.LifeBankCallsPerSettlement, "requests the bank received per settlement, paid and watched to the end (watch in rounds, the default)"},
		{"life_wal_bytes_per_settlement", r.LifeWALBytesPerSettlement, "bytes of WAL per settlement over its whole life (rounds)"},
		{"life_rows_per_settlement", r.LifeRowsPerSettlement, "rows written per settlement over its whole life (rounds)"},
		{"life_commits_per_settlement", r.LifeCommitsPerSettlement, "commits per settlement over its whole life (rounds)"},
		{"life_jobs_per_settlement", r.LifeJobsPerSettlement, "River jobs worked per settlement over its whole life (rounds)"},
		{"life_own_checks_bank_calls_per_settlement", r.LifeOwnChecksBankCallsPerSettlement, "the same with a check of its own per settlement (--return-watch-rounds=false)"},
		{"life_own_checks_wal_bytes_per_settlement", r.LifeOwnChecksWALBytesPerSettlement, "bytes of WAL, own checks"},
		{"life_own_checks_rows_per_settlement", r.LifeOwnChecksRowsPerSettlement, "rows written, own checks"},
		{"life_own_checks_commits_per_settlement", r.LifeOwnChecksCommitsPerSettlement, "commits, own checks"},
		{"life_own_checks_jobs_per_settlement", r.LifeOwnChecksJobsPerSettlement, "River jobs worked, own checks"},
		{"replay_p50_us_1e4", r.ReplayP50US1e4, fmt.Sprintf("µs at %d receipts", r.ReplayRows[0])},
		{"replay_p99_us_1e4", r.ReplayP99US1e4, fmt.Sprintf("µs at %d receipts", r.ReplayRows[0])},
		{"replay_p50_us_1e6", r.ReplayP50US1e6, fmt.Sprintf("µs at %d receipts", r.ReplayRows[1])},
		{"replay_p99_us_1e6", r.ReplayP99US1e6, fmt.Sprintf("µs at %d receipts", r.ReplayRows[1])},
		{"worker_peak_rss_mb", r.WorkerPeakRSSMB, "MB (VmHWM)"},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%s\n", row.name, row.v, row.unit)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "target\tratio\twant\tresult\tformula")
	for _, t := range r.Targets {
		verdict := "pass"
		if !t.Pass {
			verdict = "MISS"
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s %g\t%s\t%s\n", t.Name, t.Ratio, t.Op, t.Bound, verdict, t.Formula)
	}
	if len(r.Grid) > 0 {
		fmt.Fprintln(tw)
		if err := tw.Flush(); err != nil {
			return err
		}
		if err := r.WriteGrid(w); err != nil {
			return err
		}
	}
	if len(r.RiverSearch) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "river search	jobs/s")
		for _, s := range r.RiverSearch {
			fmt.Fprintf(tw, "%s\t%.1f\n", s, s.JobsPerS)
		}
	}
	return tw.Flush()
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// inTurn is the rate of two stages that take turns on one resource, at
// rates a and b alone: 1/(1/a + 1/b); 0 when either is not measured. The
// bench's JetStream server and PostgreSQL fsync on the same disk: with the
// JetStream store on tmpfs (fsync free), source_nats_per_s was 0.97 of
// intake_batch_per_s; on the disk, 0.46 to 0.59, near this bound
// (BENCHMARKS.md).
func inTurn(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a * b / (a + b) // 1/(1/a + 1/b)
}
