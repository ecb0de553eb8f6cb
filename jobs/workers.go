package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
)

// SendWorker works send_instruction: reconcile.Resolver.Send, with the job
// completed (and its follow-up reconcile_settlement inserted, scheduled for
// the first status check) in the transaction that records the bank's answer.
type SendWorker struct {
	river.WorkerDefaults[SendInstructionArgs]
	router *bankRouter
	logger *slog.Logger
	now    func() time.Time
}

// Work sends the instruction through the Resolver of the job's queue's
// bank; a settlement of another bank is refused and its job moved.
func (w *SendWorker) Work(ctx context.Context, job *river.Job[SendInstructionArgs]) error {
	id := job.Args.SettlementID
	r, err := resolverFor(ctx, w.router, job, id)
	if r == nil {
		return err
	}
	tokens, err := w.router.acquireSend(ctx, bankOf(r), nil)
	if err != nil {
		return err
	}
	defer tokens.done()
	ctx, release := reconcile.WithBankSlot(ctx, tokens.bankSlot())
	defer release()
	_, err = r.Send(ctx, id, func(ctx context.Context, tx pgx.Tx, out reconcile.Outcome) error {
		if !out.Done && !out.NextCheckAt.IsZero() {
			if err := insertReconcileTx(ctx, tx, id, job.Queue, out.NextCheckAt); err != nil {
				return err
			}
		}
		return completeTx(ctx, tx, job, w.logger)
	})
	if wb := (*reconcile.WrongBankError)(nil); errors.As(err, &wb) {
		return refuse(ctx, w.router, job, wb)
	}
	return jobError(err)
}

// NextRetry retries a failed send soon: the bank call itself is bounded and
// idempotent, and the sweep is the backstop.
func (w *SendWorker) NextRetry(job *river.Job[SendInstructionArgs]) time.Time {
	return w.now().Add(retryDelay(job.Attempt))
}

// ReconcileWorker works reconcile_settlement: reconcile.Resolver.Resolve.
// While the bank says accepted/processing, or gives no definitive answer, it
// snoozes with growing intervals (the Resolver computes them from the
// settlement's check count and stores next_check_at); once the settlement is
// terminal or waits for a human, the job completes in the transaction that
// recorded the answer.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileSettlementArgs]
	router *bankRouter
	logger *slog.Logger
	now    func() time.Time
}

// Work checks the settlement's status at the bank.
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileSettlementArgs]) error {
	if wait := job.Args.NotBefore.Sub(w.now()); wait > 0 {
		return river.JobSnooze(wait)
	}
	r, err := resolverFor(ctx, w.router, job, job.Args.SettlementID)
	if r == nil {
		return err
	}
	release, err := w.router.acquire(ctx, bankOf(r))
	if err != nil {
		return err
	}
	defer release()
	rctx := reconcile.WithSource(ctx, job.Args.source())
	resolve := func() (reconcile.Outcome, error) {
		return r.Resolve(rctx, job.Args.SettlementID, func(ctx context.Context, tx pgx.Tx, out reconcile.Outcome) error {
			if !out.Done {
				return nil // snoozed after the commit
			}
			return completeTx(ctx, tx, job, w.logger)
		})
	}
	out, err := resolve()
	// Another process moved the settlement while this check asked the
	// bank: ask again, from the state it is in now. A hint's news may be
	// newer than what moved it (a bank pushes "settled" before its answer
	// to our POST has been recorded as sent), rather than leave the news
	// to the next scheduled check. And the settlement's own check is the
	// one that keeps its schedule: a hint that moved it onward (the
	// account holder's redirect, checked at once, pays a consent
	// authorised since) ends without scheduling anything, so the own check
	// completing on a lost race would leave the settlement to the sweep,
	// a lease later.
	for try := 0; err == nil && out.LostRace && !out.State.Terminal() && try < lostRaceRetries; try++ {
		out, err = resolve()
	}
	if wb := (*reconcile.WrongBankError)(nil); errors.As(err, &wb) {
		return refuse(ctx, w.router, job, wb)
	}
	if err != nil {
		return jobError(err)
	}
	if out.Done || out.NextCheckAt.IsZero() || job.Args.Hint {
		// A hint's check ends here: the next scheduled check is the
		// settlement's own job's (or the sweep's, from next_check_at).
		return nil
	}
	return river.JobSnooze(max(out.NextCheckAt.Sub(w.now()), 0))
}

// lostRaceRetries bounds how often a check asks again after another
// process moved the settlement under it.
const lostRaceRetries = 3

// NextRetry retries a failed check soon.
func (w *ReconcileWorker) NextRetry(job *river.Job[ReconcileSettlementArgs]) time.Time {
	return w.now().Add(retryDelay(job.Attempt))
}

// retryDelay grows 1s, 2s, 4s … up to a minute.
func retryDelay(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// jobError turns a Resolver error into what River should do: a settlement
// that does not exist never will, so its job is cancelled; anything else is
// retried.
func jobError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, settlement.ErrNotFound) {
		return river.JobCancel(err)
	}
	return err
}

// insertReconcileTx schedules the status check of a settlement in tx, on
// queue (its bank's).
func insertReconcileTx(ctx context.Context, tx pgx.Tx, id, queue string, at time.Time) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("error scheduling reconcile_settlement for %s: %w", id, err)
	}
	if _, err := client.InsertTx(ctx, tx, ReconcileSettlementArgs{SettlementID: id, NotBefore: at}, &river.InsertOpts{Queue: queue}); err != nil {
		return fmt.Errorf("error scheduling reconcile_settlement for %s: %w", id, err)
	}
	return nil
}

// completeTx completes job in tx. A job that is no longer running under
// this attempt (rescued and taken by another worker) is not an error: the
// outcome in tx stands, and the other run finds nothing left to do.
func completeTx[T river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[T], logger *slog.Logger) error {
	_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
	if errors.Is(err, rivertype.ErrNotFound) {
		logger.LogAttrs(ctx, slog.LevelInfo, "job no longer running under this attempt; outcome kept",
			slog.Int64("job_id", job.ID), slog.String("kind", job.Kind))
		return nil
	}
	if err != nil {
		return fmt.Errorf("error completing job %d: %w", job.ID, err)
	}
	return nil
}
