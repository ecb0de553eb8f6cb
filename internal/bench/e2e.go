package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
)

// measureE2E pays cfg.E2ESettlements settlements through a settle worker
// subprocess and a fakebank at zero latency with no faults: submitted in
// batches through the worker's API, timed until every one is confirmed with
// its ledger movement. It also counts the River jobs worked and reads the
// worker's peak RSS.
func measureE2E(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, r *Result) error {
	bank, err := fakebank.New(fakebank.Options{})
	if err != nil {
		return err
	}
	bankURL, err := bank.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer bank.Close()
	w, err := startWorker(ctx, cfg, dbURL, bankURL)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = stopWorker(w)
		}
	}()

	commitsBefore, err := dbCommits(ctx, pool)
	if err != nil {
		return err
	}
	client := newHTTPClient(cfg.Concurrency)
	defer client.CloseIdleConnections()
	batches := make(chan int)
	errs := make(chan error, cfg.Concurrency)
	start := time.Now()
	for range cfg.Concurrency {
		go func() {
			for b := range batches {
				n := min(cfg.BatchSize, cfg.E2ESettlements-b)
				evs := make([]intake.Event, n)
				for k := range evs {
					evs[k] = newEvent(fmt.Sprintf("e2e-%d", b+k), b+k)
				}
				if err := postBatch(ctx, client, w.URL(), evs); err != nil {
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
		for b := 0; b < cfg.E2ESettlements; b += cfg.BatchSize {
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range cfg.Concurrency {
		if err := <-errs; err != nil {
			return fmt.Errorf("error submitting the e2e settlements: %w", err)
		}
	}
	cfg.Logf("e2e: %d settlements submitted in %s", cfg.E2ESettlements, time.Since(start).Round(time.Millisecond))

	deadline := time.Now().Add(5 * time.Minute)
	var moved int
	for {
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM ledger_movements").Scan(&moved); err != nil {
			return fmt.Errorf("error counting movements: %w", err)
		}
		if moved >= cfg.E2ESettlements {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("error in the e2e run: %d of %d settlements confirmed after 5 minutes; the worker's log ends:\n%s", moved, cfg.E2ESettlements, workerLog(w))
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.E2EPerS = float64(cfg.E2ESettlements) / time.Since(start).Seconds()

	var confirmed, worked int
	err = pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM settlements s JOIN ledger_movements m USING (settlement_id) WHERE s.state = 'confirmed'),
		(SELECT count(*) FROM river_job WHERE attempted_at IS NOT NULL)`).Scan(&confirmed, &worked)
	if err != nil {
		return fmt.Errorf("error checking the e2e run: %w", err)
	}
	if confirmed != cfg.E2ESettlements {
		return fmt.Errorf("error in the e2e run: %d settlements confirmed with a movement, want %d", confirmed, cfg.E2ESettlements)
	}
	r.JobsPerSettlement = float64(worked) / float64(cfg.E2ESettlements)
	time.Sleep(1100 * time.Millisecond) // let the backends publish their counts
	commitsAfter, err := dbCommits(ctx, pool)
	if err != nil {
		return err
	}
	r.E2ECommitsPerSettlement = float64(commitsAfter-commitsBefore) / float64(cfg.E2ESettlements)
	if r.WorkerPeakRSSMB, err = w.PeakRSSMB(); err != nil {
		return err
	}
	cfg.Logf("e2e_per_s %.1f, jobs_per_settlement %.2f, commits per settlement %.1f, worker_peak_rss_mb %.1f",
		r.E2EPerS, r.JobsPerSettlement, r.E2ECommitsPerSettlement, r.WorkerPeakRSSMB)
	stopped = true
	return stopWorker(w)
}

// dbCommits returns the committed transactions of the benchmark's database
// so far (every client's: the worker's, River's, the benchmark's polls).
// PostgreSQL publishes the count with a delay of up to a second.
func dbCommits(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	if _, err := pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return 0, fmt.Errorf("error reading commit count: %w", err)
	}
	if err := pool.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
		return 0, fmt.Errorf("error reading commit count: %w", err)
	}
	return n, nil
}
