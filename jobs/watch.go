package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/settle/settle/reconcile"
)

// ReturnWatchArgs starts a round of the return watch: it enqueues one
// watch_returns job per bank served. It is a periodic job.
type ReturnWatchArgs struct{}

// Kind is the River job kind.
func (ReturnWatchArgs) Kind() string { return "return_watch" }

// InsertOpts puts the job on the maintenance queue.
func (ReturnWatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance}
}

// WatchReturnsArgs is one round of the return watch of one bank
// (reconcile.Resolver.Watch), on that bank's queue.
type WatchReturnsArgs struct {
	Bank string `json:"bank"`
}

// Kind is the River job kind.
func (WatchReturnsArgs) Kind() string { return "watch_returns" }

// InsertOpts puts the job on the bank queue (ReturnWatchWorker names the
// bank's own).
func (WatchReturnsArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueBank} }

// ReturnWatchWorker works return_watch: it enqueues a watch_returns job on
// the queue of each bank this worker serves and of each bank another
// worker serves now (inspect.LiveBanks), unique by bank and period, so
// that a round runs once a period whichever process leads.
type ReturnWatchWorker struct {
	river.WorkerDefaults[ReturnWatchArgs]
	pool   *pgxpool.Pool
	period time.Duration
	served []string
}

// Work enqueues the round of each bank.
func (w *ReturnWatchWorker) Work(ctx context.Context, job *river.Job[ReturnWatchArgs]) error {
	client, banks, err := clientAndBanks(ctx, w.pool, w.served)
	if err != nil {
		return fmt.Errorf("error starting the return watch: %w", err)
	}
	params := make([]river.InsertManyParams, len(banks))
	for i, bank := range banks {
		params[i] = river.InsertManyParams{Args: WatchReturnsArgs{Bank: bank},
			InsertOpts: &river.InsertOpts{Queue: QueueFor(bank), UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: w.period}}}
	}
	if _, err := client.InsertMany(ctx, params); err != nil {
		return fmt.Errorf("error starting the return watch: %w", err)
	}
	return nil
}

// WatchReturnsWorker works watch_returns: one round of the return watch
// of the bank whose queue it is on, by its Resolver (reconcile.Resolver.Watch),
// when that Resolver watches in bulk; a Resolver that watches each
// settlement with a check of its own has nothing to do here.
type WatchReturnsWorker struct {
	river.WorkerDefaults[WatchReturnsArgs]
	router  *bankRouter
	period  time.Duration
	timeout time.Duration
	logger  *slog.Logger
}

// Timeout lets a round that asks payment by payment run for a period.
func (w *WatchReturnsWorker) Timeout(*river.Job[WatchReturnsArgs]) time.Duration {
	return max(w.timeout, w.period)
}

// Work runs the round.
func (w *WatchReturnsWorker) Work(ctx context.Context, job *river.Job[WatchReturnsArgs]) error {
	bank, ok := BankOfQueue(job.Queue)
	r := w.router.resolvers[bank]
	if !ok || r == nil || !r.WatchInBulk {
		return nil
	}
	res, err := r.Watch(ctx, w.period)
	if err != nil {
		return fmt.Errorf("error in the return watch of bank %s: %w", bank, err)
	}
	if res.Watched > 0 {
		w.logger.LogAttrs(ctx, slog.LevelDebug, "return watch round",
			slog.String("bank", bank), slog.Int("watched", res.Watched), slog.Bool("listed", res.Listed),
			slog.Int("list_calls", res.ListCalls), slog.Int("checked", res.Checked),
			slog.Int("unanswered", res.Unanswered), slog.Int("changed", res.Changed))
	}
	return nil
}

// watchPeriod is the period of the return watch's rounds: Deps.WatchInterval,
// else the shortest --max-check-interval of the Resolvers (a watched
// settlement's own checks were never closer together).
func watchPeriod(d Deps) time.Duration {
	if d.WatchInterval > 0 {
		return max(d.WatchInterval, time.Second)
	}
	p := reconcile.DefaultMaxCheckInterval
	for _, r := range d.Resolvers {
		if r.MaxCheckInterval > 0 {
			p = min(p, r.MaxCheckInterval)
		}
	}
	return max(p, time.Second)
}
