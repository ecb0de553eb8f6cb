package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/events"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/statement/importer"
)

// SweepArgs finds non-terminal settlements whose next check is due and
// enqueues the job that moves each one on. It is a periodic job.
type SweepArgs struct{}

// Kind is the River job kind.
func (SweepArgs) Kind() string { return "sweep" }

// InsertOpts puts the job on the maintenance queue.
func (SweepArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueMaintenance} }

// RetentionArgs deletes receipts older than the replay horizon of terminal
// settlements. It is a periodic job.
type RetentionArgs struct{}

// Kind is the River job kind.
func (RetentionArgs) Kind() string { return "retention" }

// InsertOpts puts the job on the maintenance queue.
func (RetentionArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueMaintenance} }

// RematchArgs examines again the statement lines no settlement explained
// when they were imported (importer.Rematcher). It is a periodic job.
type RematchArgs struct{}

// Kind is the River job kind.
func (RematchArgs) Kind() string { return "statement_rematch" }

// InsertOpts puts the job on the maintenance queue.
func (RematchArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueMaintenance} }

// RematchWorker works statement_rematch: a line imported before its
// settlement existed, or before its reference was known, is matched to it
// and booked (paid or returned, as the import books a matched line).
// Suggestions are left to settle reconcile bank --statements, which asks
// for them: they compare each unmatched line with every settlement of its
// amount.
type RematchWorker struct {
	river.WorkerDefaults[RematchArgs]
	pool   *pgxpool.Pool
	now    func() time.Time
	logger *slog.Logger
}

// Work examines the unmatched lines once.
func (w *RematchWorker) Work(ctx context.Context, _ *river.Job[RematchArgs]) error {
	r := &importer.Rematcher{DB: w.pool, Returns: &reconcile.Resolver{DB: w.pool, Now: w.now}, Now: w.now, Log: w.logger}
	if _, err := r.Run(ctx); err != nil {
		return fmt.Errorf("error examining the unmatched statement lines: %w", err)
	}
	return nil
}

// SweepWorker works sweep. It claims due settlements by pushing their
// next_check_at one lease ahead, and in the same transaction enqueues for
// each a send_instruction (pending, never attempted: its job was lost) or a
// reconcile_settlement (anything else), unique by args and period so that
// a dead job still marked running cannot block the new one, and completes
// itself.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	pool   *pgxpool.Pool
	now    func() time.Time
	lease  time.Duration
	period time.Duration
	batch  int
	logger *slog.Logger
	// served are the banks of this worker; the sweep claims their
	// settlements and those of the banks another worker serves now
	// (inspect.LiveBanks), each job on its bank's queue.
	served []string
}

// Work sweeps.
func (w *SweepWorker) Work(ctx context.Context, job *river.Job[SweepArgs]) error {
	client, banks, err := clientAndBanks(ctx, w.pool, w.served)
	if err != nil {
		return fmt.Errorf("error sweeping: %w", err)
	}
	total := map[string]int{}
	for {
		now := w.now()
		var n int
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			due, err := reconcile.ClaimDueOf(ctx, tx, now, w.lease, w.batch, banks)
			if err != nil {
				return err
			}
			params := make([]river.InsertManyParams, 0, len(due))
			unique := river.UniqueOpts{ByArgs: true, ByPeriod: w.period}
			for _, d := range due {
				var args river.JobArgs = ReconcileSettlementArgs{SettlementID: d.SettlementID, Sweep: true}
				if d.NeverAttempted {
					args = SendInstructionArgs{SettlementID: d.SettlementID}
				}
				total[args.Kind()]++
				params = append(params, river.InsertManyParams{Args: args, InsertOpts: &river.InsertOpts{Queue: QueueFor(d.Bank), UniqueOpts: unique}})
			}
			n = len(params)
			if n > 0 {
				if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
					return err
				}
			}
			if n < w.batch {
				_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
				return err
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("error sweeping due settlements: %w", err)
		}
		if n < w.batch {
			break
		}
	}
	if len(total) > 0 {
		w.logger.LogAttrs(ctx, slog.LevelInfo, "sweep enqueued due settlements",
			slog.Int(SendInstructionArgs{}.Kind(), total[SendInstructionArgs{}.Kind()]),
			slog.Int(ReconcileSettlementArgs{}.Kind(), total[ReconcileSettlementArgs{}.Kind()]))
	}
	return nil
}

// clientAndBanks is the River client of a job's ctx and the banks a
// maintenance job works for: those served, and those another worker
// serves now (inspect.LiveBanks), each once.
func clientAndBanks(ctx context.Context, pool *pgxpool.Pool, served []string) (*river.Client[pgx.Tx], []string, error) {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil, nil, err
	}
	live, err := inspect.LiveBanks(ctx, pool)
	if err != nil {
		return nil, nil, err
	}
	return client, slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(served), live...)))), nil
}

// RetentionWorker works retention: it deletes, in batches, the outcome
// events created before now − the replay horizon that every sink has
// (events.Prune), and the receipts received before then whose settlement
// is terminal. Receipts of settlements still moving, and events pending or
// dead at a sink, are kept whatever their age.
type RetentionWorker struct {
	river.WorkerDefaults[RetentionArgs]
	pool    *pgxpool.Pool
	now     func() time.Time
	horizon time.Duration
	batch   int
	logger  *slog.Logger
}

// Work deletes old delivered outcome events, then old receipts.
func (w *RetentionWorker) Work(ctx context.Context, job *river.Job[RetentionArgs]) error {
	cutoff := w.now().Add(-w.horizon)
	// Outcome events delivered everywhere and older than the horizon go
	// first (the last batch of receipts completes the job); one pending or
	// dead at any sink is kept whatever its age.
	var pruned int64
	for {
		n, err := events.Prune(ctx, w.pool, cutoff, w.batch)
		if err != nil {
			return err
		}
		pruned += n
		if n < int64(w.batch) {
			break
		}
	}
	if pruned > 0 {
		w.logger.LogAttrs(ctx, slog.LevelInfo, "retention deleted delivered events",
			slog.Int64("deleted", pruned), slog.Time("created_before", cutoff))
	}
	var deleted int64
	for {
		var n int64
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			var err error
			n, err = intake.DeleteOldReceipts(ctx, tx, cutoff, w.batch)
			if err != nil {
				return err
			}
			if n < int64(w.batch) {
				_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
				return err
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("error deleting old receipts: %w", err)
		}
		deleted += n
		if n < int64(w.batch) {
			break
		}
	}
	if deleted > 0 {
		w.logger.LogAttrs(ctx, slog.LevelInfo, "retention deleted receipts",
			slog.Int64("deleted", deleted), slog.Time("received_before", cutoff))
	}
	return nil
}
