package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/fakebank"
)

// lifeReturnWatch is the --return-watch of the watch phase: a week's
// watch scaled down to seconds, its checks (--max-check-interval) and
// rounds (--return-watch-interval) scaled alike. A settlement's own watch
// checks are taken by the sweep once due and a lease has passed
// (next_check_at is the check's time plus the lease), so the phase runs
// the worker with a short job timeout and lease: its own checks come at
// about 2.7 s and 8 s after confirmation. The job timeout (2 s) leaves a
// loaded machine's sends time to answer: at 1 s, sends timed out at a
// load average of 28 and were checked as lost answers.
const lifeReturnWatch = 10 * time.Second

// lifeArgs are the worker's flags of the watch phase.
var lifeArgs = []string{
	"--return-watch", lifeReturnWatch.String(),
	"--check-interval", "125ms", "--max-check-interval", "125ms",
	"--return-watch-interval", "1s",
	"--job-timeout", "2s", "--rescue-after", "3s", "--lease", "2500ms", "--sweep-interval", "250ms",
}

// measureLife measures what a settlement costs over its whole life, the
// return watch included: a quarter of cfg.LatencySettlements paid at once by a worker
// with a short --return-watch, the run kept going until every
// settlement's watch is over (and a round more). Twice: with a check of
// its own for each settlement, as before the watch in rounds, then in
// rounds, the worker's default.
func measureLife(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, r *Result) error {
	r.LifeReturnWatchS = lifeReturnWatch.Seconds()
	n := max(20, cfg.LatencySettlements/4) // enough for steady costs per settlement; the watch adds its window to each run
	wait := lifeReturnWatch + 2*time.Second
	for _, v := range []struct {
		name                           string
		rounds                         string
		calls, wal, rows, commits, jbs *float64
	}{
		{"life-own-checks", "false", &r.LifeOwnChecksBankCallsPerSettlement, &r.LifeOwnChecksWALBytesPerSettlement,
			&r.LifeOwnChecksRowsPerSettlement, &r.LifeOwnChecksCommitsPerSettlement, &r.LifeOwnChecksJobsPerSettlement},
		{"life-rounds", "true", &r.LifeBankCallsPerSettlement, &r.LifeWALBytesPerSettlement,
			&r.LifeRowsPerSettlement, &r.LifeCommitsPerSettlement, &r.LifeJobsPerSettlement},
	} {
		run, err := runE2EWith(ctx, cfg, pool, dbURL, e2eOptions{faults: fakebank.Faults{}, n: n, prefix: v.name,
			args: slices.Concat(lifeArgs, []string{"--return-watch-rounds=" + v.rounds}), watchWait: wait})
		if err != nil {
			return fmt.Errorf("paying and watching %d settlements (%s): %w", n, v.name, err)
		}
		*v.calls, *v.wal, *v.rows, *v.commits, *v.jbs = run.cost.bankCalls, run.cost.walBytes, run.rows, run.commits, run.jobsPerSettlement
		r.WorkerPeakRSSMB = max(r.WorkerPeakRSSMB, run.rssMB)
		cfg.Logf("%s: %d settlements paid and watched for %s: %.2f bank calls, %.0f bytes of WAL, %.1f rows, %.2f commits, %.2f jobs per settlement",
			v.name, n, lifeReturnWatch, *v.calls, *v.wal, *v.rows, *v.commits, *v.jbs)
		if err := truncate(ctx, pool); err != nil {
			return err
		}
	}
	return nil
}
