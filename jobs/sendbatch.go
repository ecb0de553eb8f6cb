package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
)

// SendBatchWorker works send_batch: reconcile.Resolver.Send for each of
// the job's settlements, concurrently within the bank concurrency: a send
// holds a slot of it only while the bank has its calls, from just after
// its claim commits to its POST's answer (reconcile.WithBankSlot), so the
// next sends claim while the bank answers and take the slot while this
// answer is recorded (at most two sends per slot under way,
// sendsPerSlot). Each
// answer is recorded in a transaction of its own (or in an outcome group),
// with its follow-up check when one is due, exactly as a send_instruction
// records it; the job itself completes once every send has recorded its
// answer (River completes it after Work returns: nothing is marked complete
// before its effect commits, and a job run again after a crash finds the
// settlements already answered with nothing left to do).
//
// A send that fails (the bank unreachable, the database gone) fails the
// job, which River runs again later: every settlement of it still
// claimable is then sent (one claimed before is asked about by key first,
// the lost-answer path), the others are left as they are. Settlements not
// yet started when half the job's time has passed are handed to a new
// send_batch job, in the transaction that completes this one, so that a
// batch waiting for the bank concurrency is never cut off by its timeout.
type SendBatchWorker struct {
	river.WorkerDefaults[SendBatchArgs]
	router *bankRouter
	logger *slog.Logger
	now    func() time.Time
}

// Work sends the job's settlements through the Resolver of the job's
// queue's bank. A job on the queue of a bank this worker does not serve is
// moved whole to its first settlement's bank's queue; a settlement of
// another bank within it is refused and handed, alone, to a send_instruction
// job on its bank's queue.
func (w *SendBatchWorker) Work(ctx context.Context, job *river.Job[SendBatchArgs]) error {
	ids := job.Args.SettlementIDs
	if len(ids) == 0 {
		return nil
	}
	if len(ids) > MaxSendBatch {
		return river.JobCancel(fmt.Errorf("error in send_batch job %d: %d settlements, more than %d", job.ID, len(ids), MaxSendBatch))
	}
	r, err := resolverFor(ctx, w.router, job, ids[0])
	if r == nil {
		return err
	}
	handover := handoverAt(ctx, w.now())

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		left []string
	)
	for i, id := range ids {
		tokens, err := w.router.acquireSend(ctx, bankOf(r), handover)
		if err != nil {
			left = ids[i:]
			break
		}
		wg.Go(func() {
			defer tokens.done()
			ctx, release := reconcile.WithBankSlot(ctx, tokens.bankSlot())
			defer release()
			if err := w.send(ctx, r, job, id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("error in send_batch job %d (%d of %d sends failed; the job runs again): %w", job.ID, len(errs), len(ids), err)
	}
	if len(left) > 0 {
		return w.handOver(ctx, job, left)
	}
	return nil
}

// handoverAt is when a batch stops starting sends and hands the rest to a
// new job: half way to ctx's deadline (never, without one).
func handoverAt(ctx context.Context, now time.Time) <-chan time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	return time.After(deadline.Sub(now) / 2)
}

// send sends one settlement of job's batch and records its answer, with its
// follow-up check when one is due.
func (w *SendBatchWorker) send(ctx context.Context, r *reconcile.Resolver, job *river.Job[SendBatchArgs], id string) error {
	_, err := r.Send(ctx, id, func(ctx context.Context, tx pgx.Tx, out reconcile.Outcome) error {
		if !out.Done && !out.NextCheckAt.IsZero() {
			return insertReconcileTx(ctx, tx, id, job.Queue, out.NextCheckAt)
		}
		return nil
	})
	if wb := (*reconcile.WrongBankError)(nil); errors.As(err, &wb) {
		return refuseOne(ctx, w.router, job, wb)
	}
	if errors.Is(err, settlement.ErrNotFound) {
		// As a send_instruction of it is cancelled: it never will exist.
		w.logger.LogAttrs(ctx, slog.LevelWarn, "send_batch: settlement not found, skipped",
			slog.Int64("job_id", job.ID), slog.String("settlement_id", id))
		return nil
	}
	return err
}

// handOver inserts a job for the settlements of job not yet started and
// completes job, in one transaction.
func (w *SendBatchWorker) handOver(ctx context.Context, job *river.Job[SendBatchArgs], left []string) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("error handing over %d sends of job %d: %w", len(left), job.ID, err)
	}
	var args river.JobArgs = SendBatchArgs{SettlementIDs: left}
	if len(left) == 1 {
		args = SendInstructionArgs{SettlementID: left[0]}
	}
	err = pgx.BeginFunc(ctx, w.router.pool, func(tx pgx.Tx) error {
		if _, err := client.InsertTx(ctx, tx, args, &river.InsertOpts{Queue: job.Queue}); err != nil {
			return err
		}
		return completeTx(ctx, tx, job, w.logger)
	})
	if err != nil {
		return fmt.Errorf("error handing over %d sends of job %d: %w", len(left), job.ID, err)
	}
	w.logger.LogAttrs(ctx, slog.LevelInfo, "send_batch: sends not started in time handed to a new job",
		slog.Int64("job_id", job.ID), slog.Int("sends", len(left)), slog.String("queue", job.Queue))
	return nil
}
