package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
)

// bankRouter hands a bank job to the Resolver of the bank whose queue it
// came from, and moves a job that does not belong there to its
// settlement's bank's queue: a worker never sends, checks or resolves a
// settlement of a bank it does not serve, and never drops such a job.
type bankRouter struct {
	pool      *pgxpool.Pool
	resolvers map[string]*reconcile.Resolver
	metrics   *metrics.Metrics
	logger    *slog.Logger
	// slots holds, per bank served, a token for each bank call in flight
	// (Deps.BankConcurrency): the sends of batches and the jobs of one
	// settlement share them, so a process never calls a bank more often at
	// once than its concurrency, whatever the jobs carry.
	slots map[string]chan struct{}
	// sends holds, per bank served, a token for each send between its
	// start and its recorded answer (sendsPerSlot for each slot). A send
	// holds a slot only while the bank has its calls (reconcile.
	// WithBankSlot): the next sends load and claim while the bank answers
	// this one, and take its slot while its answer is written. This bounds
	// the sends claimed and waiting for a slot and the answers waiting for
	// the database, so that sends to a fast bank cannot outrun their
	// recording.
	sends map[string]chan struct{}
}

// sendsPerSlot is how many sends per bank slot may be under way at once:
// 2, one at the bank and one claiming or writing its answer.
const sendsPerSlot = 2

// errHandover is acquireSend's answer when stop came first.
var errHandover = errors.New("hand-over time reached before a send could start")

// sendTokens is what one send holds: a place among its bank's sends under
// way, and the slots it lends the Resolver (bankSlot).
type sendTokens struct {
	slots, send chan struct{}
}

// bankSlot is the slot of the bank's concurrency the Resolver takes for
// the send's bank calls and gives back once its POST is answered.
func (t *sendTokens) bankSlot() reconcile.BankSlot {
	return reconcile.BankSlot{
		Acquire: func(ctx context.Context) error { return takeSlot(ctx, t.slots) },
		Release: func() { <-t.slots },
	}
}

// done gives the send's place back, once its answer is recorded.
func (t *sendTokens) done() { <-t.send }

// acquireSend waits for a place among bank's sends under way. It returns
// errHandover when stop fires first, or ctx's error.
func (rt *bankRouter) acquireSend(ctx context.Context, bank string, stop <-chan time.Time) (*sendTokens, error) {
	t := &sendTokens{slots: rt.slots[bank], send: rt.sends[bank]}
	select {
	case t.send <- struct{}{}:
		return t, nil
	case <-stop:
		return nil, errHandover
	case <-ctx.Done():
		return nil, fmt.Errorf("error waiting for a send of %s: %w", bank, ctx.Err())
	}
}

// acquire waits for a slot of bank's concurrency and returns its release,
// or ctx's error.
func (rt *bankRouter) acquire(ctx context.Context, bank string) (release func(), err error) {
	slots := rt.slots[bank]
	if err := takeSlot(ctx, slots); err != nil {
		return nil, fmt.Errorf("error waiting for a bank slot of %s: %w", bank, err)
	}
	return func() { <-slots }, nil
}

// takeSlot waits for a place in slots (given back by receiving from it),
// or returns ctx's error.
func takeSlot(ctx context.Context, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resolverFor returns the Resolver of job's queue's bank. A job on a queue
// of no bank this worker serves (the queue of before banks had their own)
// is moved to its settlement's bank's queue; then the Resolver is nil and
// the error is the job's result.
func resolverFor[T river.JobArgs](ctx context.Context, rt *bankRouter, job *river.Job[T], id string) (*reconcile.Resolver, error) {
	if bank, ok := BankOfQueue(job.Queue); ok {
		if r := rt.resolvers[bank]; r != nil {
			return r, nil
		}
	}
	var bank string
	err := rt.pool.QueryRow(ctx, "SELECT bank FROM settlements WHERE settlement_id = $1", id).Scan(&bank)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, jobError(fmt.Errorf("error routing job %d: settlement %s: %w", job.ID, id, settlement.ErrNotFound))
	}
	if err != nil {
		return nil, fmt.Errorf("error routing job %d: %w", job.ID, err)
	}
	rt.logger.LogAttrs(ctx, slog.LevelInfo, "job moved to its bank's queue",
		slog.Int64("job_id", job.ID), slog.String("kind", job.Kind), slog.String("settlement_id", id),
		slog.String("from_queue", job.Queue), slog.String("to_queue", QueueFor(bank)))
	return nil, move(ctx, rt, job, bank)
}

// refuse answers a job whose Resolver refused its settlement as another
// bank's: loudly (an error log line and settle_wrong_bank_jobs_total), and
// the job is moved to the queue of the settlement's bank for a worker of
// it. Nothing was sent.
func refuse[T river.JobArgs](ctx context.Context, rt *bankRouter, job *river.Job[T], wb *reconcile.WrongBankError) error {
	served, _ := BankOfQueue(job.Queue)
	rt.metrics.WrongBankJobs.WithLabelValues(served).Inc()
	rt.logger.LogAttrs(ctx, slog.LevelError, "job refused: its settlement belongs to another bank; nothing sent, moved to that bank's queue",
		slog.Int64("job_id", job.ID), slog.String("kind", job.Kind), slog.String("settlement_id", wb.SettlementID),
		slog.String("settlement_bank", wb.Bank), slog.String("queue", job.Queue), slog.String("to_queue", QueueFor(wb.Bank)))
	return move(ctx, rt, job, wb.Bank)
}

// move inserts job's args again on bank's queue and completes job, in one
// transaction: the work is handed over, never lost and never doubled.
func move[T river.JobArgs](ctx context.Context, rt *bankRouter, job *river.Job[T], bank string) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("error moving job %d: %w", job.ID, err)
	}
	err = pgx.BeginFunc(ctx, rt.pool, func(tx pgx.Tx) error {
		if _, err := client.InsertTx(ctx, tx, job.Args, &river.InsertOpts{Queue: QueueFor(bank)}); err != nil {
			return err
		}
		return completeTx(ctx, tx, job, rt.logger)
	})
	if err != nil {
		return fmt.Errorf("error moving job %d to %s: %w", job.ID, QueueFor(bank), err)
	}
	return nil
}

// refuseOne answers a settlement of a send_batch job that its Resolver
// refused as another bank's: loudly, as refuse does, and the settlement is
// handed alone to a send_instruction job on its bank's queue. Nothing was
// sent; the rest of the batch goes on.
func refuseOne(ctx context.Context, rt *bankRouter, job *river.Job[SendBatchArgs], wb *reconcile.WrongBankError) error {
	served, _ := BankOfQueue(job.Queue)
	rt.metrics.WrongBankJobs.WithLabelValues(served).Inc()
	rt.logger.LogAttrs(ctx, slog.LevelError, "send refused: its settlement belongs to another bank; nothing sent, handed to that bank's queue",
		slog.Int64("job_id", job.ID), slog.String("kind", job.Kind), slog.String("settlement_id", wb.SettlementID),
		slog.String("settlement_bank", wb.Bank), slog.String("queue", job.Queue), slog.String("to_queue", QueueFor(wb.Bank)))
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err == nil {
		_, err = client.Insert(ctx, SendInstructionArgs{SettlementID: wb.SettlementID}, &river.InsertOpts{Queue: QueueFor(wb.Bank)})
	}
	if err != nil {
		return fmt.Errorf("error handing settlement %s to %s: %w", wb.SettlementID, QueueFor(wb.Bank), err)
	}
	return nil
}
