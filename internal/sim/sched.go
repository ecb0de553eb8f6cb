package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/reconcile"
)

// errCrashed is what every database statement and bank call of a crashed
// actor returns: the simulated process is dead, its open transaction is
// rolled back (as PostgreSQL does when a connection drops) and nothing it
// would still do reaches the database or the bank.
var errCrashed = errors.New("simulated crash: process is dead")

// scheduler runs actors (engine calls on goroutines) one at a time. An
// actor runs until its next yield point (a database statement or bank call
// outside a transaction), parks, and the scheduler picks which parked actor
// runs next with the seeded source. A transaction is never preempted, so
// no actor ever waits on a lock held by a parked one.
type scheduler struct {
	rng    *rand.Rand
	events chan *actor
}

// actor is one engine call in flight: its goroutine, its fault plan and
// its simulated process state.
type actor struct {
	name  string
	sched *scheduler
	grant chan struct{}
	done  bool

	ctx    context.Context
	cancel context.CancelFunc

	// ops counts database statements and bank calls so far.
	ops int
	// crashAt, when >= 0, kills the actor at its op number crashAt: that op
	// and every later one fail with errCrashed (an open transaction is
	// rolled back). A crash at a bank call's successor is a process that
	// died after the bank acted but before recording the answer.
	crashAt int
	crashed bool
	// cancelAt, when >= 0, ends the actor's context at its bank call number
	// cancelAt (a job timeout), in the way cancelMode says.
	cancelAt   int
	cancelMode int
	// crashAfterBank, when >= 0, kills the actor as its bank call number
	// crashAfterBank returns: the bank acted, the answer dies with the
	// process (crash point send.after_bank).
	crashAfterBank int
	bankCalls      int
	inTx           bool
	onCommit       func()
	notes          []string
	panicValue     any
	// plant is Config.Plant; the return plants act on the statements the
	// actor sends (pool is where one commits on its own).
	plant string
	pool  *pgxpool.Pool
	// crashBeforeReturnCommit kills the actor at the commit of a
	// transaction that wrote a reversal: after the transition to returned
	// and the reversal, before either is committed.
	crashBeforeReturnCommit bool
}

func newScheduler(rng *rand.Rand) *scheduler {
	return &scheduler{rng: rng, events: make(chan *actor)}
}

// run starts every actor's fn on its goroutine and interleaves them until
// all are done.
func (s *scheduler) run(actors []*actor, fns []func(ctx context.Context)) {
	for i, a := range actors {
		a.sched = s
		a.grant = make(chan struct{})
		fn := fns[i]
		go func() {
			defer func() {
				if v := recover(); v != nil {
					a.panicValue = v
				}
				a.done = true
				a.cancel()
				s.events <- a
			}()
			<-a.grant
			fn(a.ctx)
		}()
	}
	live := append([]*actor(nil), actors...)
	for len(live) > 0 {
		i := 0
		if len(live) > 1 {
			i = s.rng.IntN(len(live))
		}
		a := live[i]
		a.grant <- struct{}{}
		if got := <-s.events; got != a {
			panic(fmt.Sprintf("sim: actor %s ran while %s held the turn", got.name, a.name))
		}
		if a.done {
			live = append(live[:i], live[i+1:]...)
		}
	}
}

// yield parks the actor until the scheduler gives it the turn again;
// inside a transaction it keeps the turn.
func (a *actor) yield() {
	if a.inTx || a.sched == nil {
		return
	}
	a.sched.events <- a
	<-a.grant
}

// op is called before every statement and bank call: it yields, counts
// the op and reports whether the actor is (now) dead.
func (a *actor) op(what string) error {
	if a.crashed {
		return errCrashed
	}
	a.yield()
	a.ops++
	if a.crashAt >= 0 && a.ops > a.crashAt {
		a.crashed = true
		a.note("crashed before %s (op %d)", what, a.ops)
		return errCrashed
	}
	return nil
}

func (a *actor) note(format string, args ...any) {
	a.notes = append(a.notes, fmt.Sprintf(format, args...))
}

// actorDB is the database as one actor sees it.
type actorDB struct {
	a    *actor
	pool *pgxpool.Pool
}

func (d actorDB) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := d.a.op("begin"); err != nil {
		return nil, err
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	d.a.inTx = true
	return &actorTx{Tx: tx, a: d.a}, nil
}

func (d actorDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := d.a.op("exec"); err != nil {
		return pgconn.CommandTag{}, err
	}
	return d.pool.Exec(ctx, sql, args...)
}

func (d actorDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := d.a.op("query"); err != nil {
		return nil, err
	}
	return d.pool.Query(ctx, sql, args...)
}

func (d actorDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := d.a.op("query"); err != nil {
		return errRow{err}
	}
	return d.pool.QueryRow(ctx, sql, args...)
}

func (d actorDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := d.a.op("batch"); err != nil {
		return errBatch{err}
	}
	return d.pool.SendBatch(ctx, b)
}

func (d actorDB) Ping(ctx context.Context) error {
	if err := d.a.op("ping"); err != nil {
		return err
	}
	return d.pool.Ping(ctx)
}

// actorTx is a transaction of one actor; a crash inside it rolls it back.
type actorTx struct {
	pgx.Tx
	a      *actor
	closed bool
	// reversal is set once the transaction wrote a reversal movement.
	reversal bool
}

func (t *actorTx) dead(what string) error {
	if err := t.a.op(what); err != nil {
		return err
	}
	return nil
}

func (t *actorTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.dead("tx exec"); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

// queueMovement is the Resolver's QueueMovement hook as actor a runs it:
// it marks the transaction that writes a reversal (the crash before a
// return's commit acts on it) and plants the return faults there:
// "second-reversal" writes the reversal twice in the transaction (the
// plant dropped the UNIQUE that would refuse it);
// "reversal-outside-transition" commits it on a connection of its own and
// dies before the transaction of the transition commits. The engine sends
// the movement in one batch with its answer and facts, so the plant acts
// where that batch is sent.
func (a *actor) queueMovement(ctx context.Context, tx pgx.Tx, b *pgx.Batch, m reconcile.Movement) error {
	reconcile.QueueMovement(b, m)
	t, ok := tx.(*actorTx)
	if !ok || m.Kind != "reversal" {
		return nil
	}
	t.reversal = true
	switch a.plant {
	case "second-reversal":
		reconcile.QueueMovement(b, m)
		a.note("planted: reversal written twice")
	case "reversal-outside-transition":
		if err := t.dead("tx batch"); err != nil {
			return err
		}
		return t.reversalApart(ctx, m.SettlementID)
	}
	return nil
}

// reversalApart is the "reversal-outside-transition" plant: the reversal
// of settlement id committed on a connection of its own (so not waiting
// for the transition the engine's statement is conditioned on), then the
// process dies before the transaction of the transition commits.
func (t *actorTx) reversalApart(ctx context.Context, id any) error {
	if _, err := t.a.pool.Exec(ctx, `
		INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency, created_at)
		SELECT settlement_id, 'reversal', account_id, amount_cents, currency, now()
		FROM settlements WHERE settlement_id = $1`, id); err != nil {
		return err
	}
	t.a.crashed = true
	t.a.note("planted: reversal committed on its own, crashed before the transition committed")
	t.end()
	return errCrashed
}

func (t *actorTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.dead("tx query"); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *actorTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.dead("tx query"); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t *actorTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.dead("tx batch"); err != nil {
		return errBatch{err}
	}
	return t.Tx.SendBatch(ctx, b)
}

func (t *actorTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	if err := t.dead("commit"); err != nil {
		t.end()
		return err
	}
	if t.reversal && t.a.crashBeforeReturnCommit {
		t.a.crashed = true
		t.a.note("crashed before committing the move to returned and its reversal")
		t.end()
		return errCrashed
	}
	t.closed = true
	t.a.inTx = false
	err := t.Tx.Commit(ctx)
	if err == nil && t.a.onCommit != nil {
		t.a.onCommit()
	}
	return err
}

func (t *actorTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.end()
	return nil
}

// end rolls the real transaction back (on a context of its own: a dead
// process's connection is closed whatever its context).
func (t *actorTx) end() {
	t.closed = true
	t.a.inTx = false
	_ = t.Tx.Rollback(context.Background())
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }

// The ways a context ends at a bank call.
const (
	// cancelBefore: the context ends before the request leaves.
	cancelBefore = iota
	// cancelAfterExecuted: the bank executes the request, the context ends
	// before the answer arrives.
	cancelAfterExecuted
	// cancelInFlight: the request leaves, the context ends, the bank never
	// processes it.
	cancelInFlight
	numCancelModes
)

// actorBank is the bank as one actor sees it: crashes and cancellations
// happen here.
type actorBank struct {
	a    *actor
	bank *Bank
}

func (b actorBank) Send(ctx context.Context, key string, req bankclient.PaymentRequest) (bankclient.SendResult, error) {
	if err := b.a.op("bank send"); err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payment %s: %w", key, err)
	}
	if b.a.plant == "grant-dropped" && req.Grant != "" {
		// A connector that sends the payment without the account
		// holder's token.
		req.Grant = ""
		b.a.note("planted: payment %s sent without the account holder's token", key)
	}
	call := b.a.bankCalls
	b.a.bankCalls++
	if call == b.a.crashAfterBank {
		_, _ = b.bank.Send(ctx, key, req)
		b.a.crashed = true
		b.a.note("crashed after bank send %d returned", call)
		return bankclient.SendResult{}, fmt.Errorf("error sending payment %s: %w", key, errCrashed)
	}
	if call != b.a.cancelAt {
		return b.bank.Send(ctx, key, req)
	}
	b.a.note("context ended at bank send (mode %d)", b.a.cancelMode)
	switch b.a.cancelMode {
	case cancelBefore:
		b.a.cancel()
		return b.bank.Send(b.a.ctx, key, req)
	case cancelAfterExecuted:
		_, _ = b.bank.Send(ctx, key, req)
	}
	b.a.cancel()
	return bankclient.SendResult{}, fmt.Errorf("error sending payment %s: %w", key,
		&bankclient.AmbiguousError{Op: bankclient.OpSend, Attempts: 1, Err: fmt.Errorf("%w (request in flight)", context.Canceled)})
}

func (b actorBank) StatusByKey(ctx context.Context, key string) (bankclient.Payment, error) {
	return b.status(ctx, "bank status", key, b.bank.StatusByKey)
}

// StatusByID is StatusByKey by the bank's id.
func (b actorBank) StatusByID(ctx context.Context, id string) (bankclient.Payment, error) {
	return b.status(ctx, "bank status by id", id, b.bank.StatusByID)
}

// status runs one status call (of lookup, about subject) through the
// actor's plan: a crash after the bank answered, or the context ending
// before the request left or while it was in flight.
func (b actorBank) status(ctx context.Context, what, subject string, lookup func(context.Context, string) (bankclient.Payment, error)) (bankclient.Payment, error) {
	if err := b.a.op(what); err != nil {
		return bankclient.Payment{}, fmt.Errorf("error getting payment status %s: %w", subject, err)
	}
	call := b.a.bankCalls
	b.a.bankCalls++
	if call == b.a.crashAfterBank {
		_, _ = lookup(ctx, subject)
		b.a.crashed = true
		b.a.note("crashed after %s %d returned", what, call)
		return bankclient.Payment{}, fmt.Errorf("error getting payment status %s: %w", subject, errCrashed)
	}
	if call != b.a.cancelAt {
		return lookup(ctx, subject)
	}
	b.a.note("context ended at %s (mode %d)", what, b.a.cancelMode)
	b.a.cancel()
	if b.a.cancelMode == cancelBefore {
		return lookup(b.a.ctx, subject)
	}
	return bankclient.Payment{}, fmt.Errorf("error getting payment status %s: %w", subject,
		&bankclient.AmbiguousError{Op: bankclient.OpStatus, Attempts: 1, Err: fmt.Errorf("%w (request in flight)", context.Canceled)})
}

func (b actorBank) Statement(ctx context.Context, after string, limit int) (bankclient.StatementPage, error) {
	if err := b.a.op("bank statement"); err != nil {
		return bankclient.StatementPage{}, err
	}
	return b.bank.Statement(ctx, after, limit)
}
