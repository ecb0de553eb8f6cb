package bench

import (
	"context"
	"fmt"
	"time"

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

// measureRiverNoop returns how many no-op jobs per second River works with
// the worker's client settings (jobs.NewRiverConfig: queue concurrency,
// fetch cooldown and poll interval, timeouts) and pool size, counted from
// the first insert to the last completion, inserts included as the e2e run
// includes its submissions.
func measureRiverNoop(ctx context.Context, cfg Config, dbURL string) (float64, error) {
	pool, err := database.Connect(ctx, dbURL, database.PoolOptions{MaxConns: 20, ApplicationName: "settle-bench-river"})
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	rc := jobs.NewRiverConfig(jobs.Deps{Pool: pool, Resolver: &reconcile.Resolver{}, BankConcurrency: cfg.BankConcurrency})
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	rc.Workers = workers
	rc.PeriodicJobs = nil
	rc.Queues = map[string]river.QueueConfig{jobs.QueueBank: rc.Queues[jobs.QueueBank]}
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return 0, fmt.Errorf("error creating the River client: %w", err)
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

	start := time.Now()
	insertErr := make(chan error, 1)
	go func() {
		for done := 0; done < cfg.NoopJobs; {
			n := min(1000, cfg.NoopJobs-done)
			params := make([]river.InsertManyParams, n)
			for i := range params {
				params[i] = river.InsertManyParams{Args: noopArgs{}}
			}
			if _, err := client.InsertManyFast(ctx, params); err != nil {
				insertErr <- fmt.Errorf("error inserting no-op jobs: %w", err)
				return
			}
			done += n
		}
		insertErr <- nil
	}()
	timeout := time.NewTimer(5 * time.Minute)
	defer timeout.Stop()
	for completed := 0; completed < cfg.NoopJobs; {
		select {
		case <-events:
			completed++
		case err := <-insertErr:
			if err != nil {
				return 0, err
			}
		case <-timeout.C:
			return 0, fmt.Errorf("error in the River baseline: %d of %d no-op jobs completed after 5 minutes", completed, cfg.NoopJobs)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return float64(cfg.NoopJobs) / time.Since(start).Seconds(), nil
}
