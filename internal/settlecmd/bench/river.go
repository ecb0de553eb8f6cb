package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/reconcile"
)

// noopArgs is the job of River's baseline: it does nothing, on the queue
// settle's bank jobs use.
type noopArgs struct{}

func (noopArgs) Kind() string { return "settle_bench_noop" }

func (noopArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: jobs.QueueBank} }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverAppName is the application_name of the River runs' connections.
const riverAppName = "settle-bench-river"

// RiverSettings are the River client settings of one no-op run.
type RiverSettings struct {
	// MaxWorkers is the bank queue's concurrency.
	MaxWorkers int `json:"max_workers"`
	// FetchCooldownMS is the least time between two fetches of one queue.
	FetchCooldownMS float64 `json:"fetch_cooldown_ms"`
	// JobsPerS is what River did with these settings.
	JobsPerS float64 `json:"jobs_per_s"`
}

func (s RiverSettings) String() string {
	return fmt.Sprintf("MaxWorkers %d, FetchCooldown %gms", s.MaxWorkers, s.FetchCooldownMS)
}

// riverSearch is the grid of the River ceiling: the bank queue's
// concurrency times the fetch cooldown (River's minimum is 1 ms). A no-op
// queue works at most MaxWorkers jobs per cooldown, so the grid spans
// ceilings from 2,500 to a million jobs/s and finds where the database, not
// the configuration, is the limit.
var riverSearch = []RiverSettings{
	{MaxWorkers: 50, FetchCooldownMS: 20}, {MaxWorkers: 50, FetchCooldownMS: 5}, {MaxWorkers: 50, FetchCooldownMS: 1},
	{MaxWorkers: 200, FetchCooldownMS: 20}, {MaxWorkers: 200, FetchCooldownMS: 5}, {MaxWorkers: 200, FetchCooldownMS: 1},
	{MaxWorkers: 1000, FetchCooldownMS: 20}, {MaxWorkers: 1000, FetchCooldownMS: 5}, {MaxWorkers: 1000, FetchCooldownMS: 1},
}

// measureRiver measures River working no-op jobs first with the worker's
// own settings (river_noop_jobs_per_s), then with each setting of the
// search, and keeps the best (river_noop_best_jobs_per_s and its
// settings). river_job is emptied between runs, so no run works on another
// run's rows.
func measureRiver(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, r *Result) error {
	defaults := jobs.NewRiverConfig(jobs.Deps{Pool: pool, Resolver: &reconcile.Resolver{}, BankConcurrency: cfg.BankConcurrency})
	own := RiverSettings{
		MaxWorkers:      defaults.Queues[jobs.QueueFor(jobs.DefaultBank)].MaxWorkers,
		FetchCooldownMS: float64(defaults.FetchCooldown) / float64(time.Millisecond),
	}
	var err error
	if r.RiverNoopJobsPerS, err = measureRiverNoop(ctx, cfg, dbURL, own); err != nil {
		return err
	}
	r.RiverWorkerSettings = own.String()
	cfg.Logf("river_noop_jobs_per_s %.1f (the worker's defaults: %s)", r.RiverNoopJobsPerS, own)
	for _, s := range riverSearch {
		if err := truncateJobs(ctx, pool); err != nil {
			return err
		}
		if s.JobsPerS, err = measureRiverNoop(ctx, cfg, dbURL, s); err != nil {
			return err
		}
		cfg.Logf("river no-op: %.1f jobs/s with %s", s.JobsPerS, s)
		r.RiverSearch = append(r.RiverSearch, s)
		if s.JobsPerS > r.RiverNoopBestJobsPerS {
			r.RiverNoopBestJobsPerS, r.RiverBestSettings = s.JobsPerS, s.String()
		}
	}
	cfg.Logf("river_noop_best_jobs_per_s %.1f (%s)", r.RiverNoopBestJobsPerS, r.RiverBestSettings)
	// Their last counts must not land in the next phase's.
	return waitBackendsGone(ctx, pool, riverAppName)
}

// measureRiverNoop returns how many no-op jobs per second River works with
// the worker's client settings (jobs.NewRiverConfig: timeouts, poll
// interval) but the queue concurrency and fetch cooldown of s, and a pool
// of the worker's size, counted from the first insert to the last
// completion, inserts included as the e2e run includes its submissions. A
// run ends after cfg.NoopJobs jobs or after a time limit (the rate is then
// what completed within it), so a slow setting cannot stall the search.
func measureRiverNoop(ctx context.Context, cfg Config, dbURL string, s RiverSettings) (float64, error) {
	pool, err := database.Connect(ctx, dbURL, database.PoolOptions{MaxConns: int32(cfg.workerPoolSize()), ApplicationName: riverAppName})
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	rc := jobs.NewRiverConfig(jobs.Deps{Pool: pool, Resolver: &reconcile.Resolver{}, BankConcurrency: s.MaxWorkers})
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	rc.Workers = workers
	rc.PeriodicJobs = nil
	rc.Queues = map[string]river.QueueConfig{jobs.QueueBank: {MaxWorkers: s.MaxWorkers}}
	rc.FetchCooldown = time.Duration(s.FetchCooldownMS * float64(time.Millisecond))
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return 0, fmt.Errorf("error creating the River client (%s): %w", s, err)
	}
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: cfg.NoopJobs + 1, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancelSub()
	if err := client.Start(ctx); err != nil {
		return 0, fmt.Errorf("error starting River: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()

	insertCtx, stopInserting := context.WithCancel(ctx)
	defer stopInserting()
	start := time.Now()
	insertErr := make(chan error, 1)
	go func() {
		for done := 0; done < cfg.NoopJobs; {
			n := min(1000, cfg.NoopJobs-done)
			params := make([]river.InsertManyParams, n)
			for i := range params {
				params[i] = river.InsertManyParams{Args: noopArgs{}}
			}
			if _, err := client.InsertManyFast(insertCtx, params); err != nil {
				insertErr <- fmt.Errorf("error inserting no-op jobs: %w", err)
				return
			}
			done += n
		}
		insertErr <- nil
	}()
	limit := time.NewTimer(cfg.riverTrialLimit())
	defer limit.Stop()
	completed := 0
	for completed < cfg.NoopJobs {
		select {
		case <-events:
			completed++
		case err := <-insertErr:
			if err != nil && insertCtx.Err() == nil {
				return 0, err
			}
		case <-limit.C:
			if completed > 0 {
				return float64(completed) / time.Since(start).Seconds(), nil
			}
			if time.Since(start) > riverFirstJobLimit {
				return 0, fmt.Errorf("error in the River baseline (%s): no no-op job completed in %s", s, riverFirstJobLimit)
			}
			// Nothing yet (a loaded machine): wait for the first.
			limit.Reset(riverFirstJobLimit)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return float64(completed) / time.Since(start).Seconds(), nil
}

// riverFirstJobLimit is how long a River run waits for its first
// completion before it reports the run as failed.
const riverFirstJobLimit = 2 * time.Minute

// truncateJobs empties River's jobs between no-op runs.
func truncateJobs(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		return fmt.Errorf("error emptying river_job: %w", err)
	}
	return nil
}
