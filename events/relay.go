package events

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/crash"
)

// Defaults of the relay (the worker's --events-* flags).
const (
	DefaultRetryMin = time.Second
	DefaultRetryMax = 10 * time.Minute
	DefaultRetryFor = 72 * time.Hour
	DefaultBatch    = 32
	DefaultPoll     = 200 * time.Millisecond
	// DefaultHeartbeat is how often a running relay registers its sinks
	// again (event_sinks.seen_at), so that `settle events sinks` tells a
	// sink some worker relays to from one no worker has any more.
	DefaultHeartbeat = 30 * time.Second
)

// Observer is told of every attempt (the worker's metrics).
type Observer interface {
	EventAttempt(sink string, delivered bool)
}

// Relay delivers pending events to its sinks. Run it in every worker
// process: the claim of each delivery is a row lock, so processes share
// the work without sending one event twice at once.
type Relay struct {
	Pool  *pgxpool.Pool
	Sinks []Sink
	// RetryMin is the first retry interval; each next one doubles, up to
	// RetryMax. RetryFor is how long after its first attempt a delivery is
	// retried before it is marked dead.
	RetryMin, RetryMax, RetryFor time.Duration
	// Batch is how many deliveries one claim takes (each of another
	// settlement); they are sent at once.
	Batch int
	// Poll is how long the relay waits when nothing was due.
	Poll time.Duration
	// Heartbeat is how often Run registers the sinks again (default
	// DefaultHeartbeat).
	Heartbeat time.Duration
	Now       func() time.Time
	Logger    *slog.Logger
	Observer  Observer
}

func (r *Relay) defaults() {
	if r.RetryMin <= 0 {
		r.RetryMin = DefaultRetryMin
	}
	if r.RetryMax < r.RetryMin {
		r.RetryMax = max(DefaultRetryMax, r.RetryMin)
	}
	if r.RetryFor <= 0 {
		r.RetryFor = DefaultRetryFor
	}
	if r.Batch <= 0 {
		r.Batch = DefaultBatch
	}
	if r.Poll <= 0 {
		r.Poll = DefaultPoll
	}
	if r.Heartbeat <= 0 {
		r.Heartbeat = DefaultHeartbeat
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
}

// Register records the relay's sinks as relayed to now (seen_at), so that
// every event committed after it returns is queued for each of them. The
// worker calls it before it takes anything in; Run calls it too, and
// again every Heartbeat. A sink an operator had forgotten (ForgetSink) is
// taken back, with a warning: a configured sink is never skipped.
func (r *Relay) Register(ctx context.Context) error {
	r.defaults()
	names := make([]string, len(r.Sinks))
	for i, s := range r.Sinks {
		names[i] = s.Name()
	}
	if len(names) == 0 {
		return nil
	}
	var revived []string
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT sink FROM event_sinks WHERE sink = ANY($1) AND forgotten_at IS NOT NULL ORDER BY sink FOR UPDATE`, names)
		if err != nil {
			return err
		}
		if revived, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO event_sinks (sink, seen_at) SELECT unnest($1::text[]), $2
			ON CONFLICT (sink) DO UPDATE SET seen_at = EXCLUDED.seen_at, forgotten_at = NULL, forgotten_by = NULL`, names, r.Now())
		return err
	})
	if err != nil {
		return fmt.Errorf("error registering event sinks: %w", err)
	}
	for _, s := range revived {
		r.Logger.Warn("events: a forgotten sink is configured here and relayed to again; events written while it was forgotten are not queued for it (settle events redeliver --settlement sends them)", "sink", s)
	}
	return nil
}

// Run registers the sinks and relays to each until ctx ends, registering
// them again every Heartbeat. A database error is logged and retried
// after a pause; Run returns only when ctx ends (nil).
func (r *Relay) Run(ctx context.Context) error {
	r.defaults()
	if len(r.Sinks) == 0 {
		return nil
	}
	for registered := false; !registered; {
		if err := r.Register(ctx); err != nil {
			r.Logger.Warn("events: cannot register sinks yet", "error", err)
		} else {
			registered = true
		}
		if !registered && !sleep(ctx, time.Second) {
			r.Logger.Warn("events: gave up registering sinks: the worker is stopping")
			return nil
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for sleep(ctx, r.Heartbeat) {
			if err := r.Register(ctx); err != nil && ctx.Err() == nil {
				r.Logger.Warn("events: cannot register sinks again", "error", err)
			}
		}
	})
	for _, s := range r.Sinks {
		wg.Go(func() { r.relay(ctx, s) })
	}
	wg.Wait()
	return nil
}

// relay is the loop of one sink.
func (r *Relay) relay(ctx context.Context, s Sink) {
	pause := r.Poll
	for ctx.Err() == nil {
		n, err := r.Once(ctx, s)
		switch {
		case err != nil && ctx.Err() == nil:
			r.Logger.Warn("events: relay pass failed", "sink", s.Name(), "error", err)
			pause = min(max(2*pause, time.Second), 30*time.Second)
		case n < r.Batch:
			pause = r.Poll
		default:
			continue // more may be due at once
		}
		if !sleep(ctx, pause) {
			return
		}
	}
}

// claimed is one delivery taken by a pass.
type claimed struct {
	Event
	attempts     int
	firstAttempt *time.Time
}

// Once makes one pass for sink s: it claims the due deliveries (the first
// pending one of each settlement there), sends them at once, records each
// attempt and commits. It returns how many it claimed.
func (r *Relay) Once(ctx context.Context, s Sink) (int, error) {
	r.defaults()
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("error beginning a relay pass: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	now := r.Now()
	rows, err := tx.Query(ctx, `
		SELECT d.event_seq, e.event_id, e.settlement_id, e.type, e.payload, e.created_at, d.attempts, d.first_attempt_at
		FROM event_deliveries d JOIN settlement_events e ON e.seq = d.event_seq
		WHERE d.sink = $1 AND d.state = 'pending' AND d.next_attempt_at <= $2
		  AND d.n = (
			SELECT p.n FROM event_deliveries p
			WHERE p.sink = d.sink AND p.settlement_id = d.settlement_id AND p.state = 'pending'
			ORDER BY p.n LIMIT 1)
		ORDER BY d.next_attempt_at
		LIMIT $3
		FOR UPDATE OF d SKIP LOCKED`, s.Name(), now, r.Batch)
	if err != nil {
		return 0, fmt.Errorf("error claiming events for %s: %w", s.Name(), err)
	}
	batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		return c, row.Scan(&c.Seq, &c.ID, &c.SettlementID, &c.Type, &c.Payload, &c.CreatedAt, &c.attempts, &c.firstAttempt)
	})
	if err != nil {
		return 0, fmt.Errorf("error claiming events for %s: %w", s.Name(), err)
	}
	if len(batch) == 0 {
		return 0, nil
	}

	results := make([]Result, len(batch))
	took := make([]time.Duration, len(batch))
	var wg sync.WaitGroup
	for i, c := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			crash.Point(crash.EventsBeforeSend)
			start := time.Now()
			results[i] = s.Deliver(ctx, c.Event)
			took[i] = time.Since(start)
			if results[i].Err == nil {
				crash.Point(crash.EventsAfterSend)
			}
		}()
	}
	wg.Wait()

	at := r.Now()
	b := &pgx.Batch{}
	for i, c := range batch {
		res := results[i]
		var status *int
		if res.Status != 0 {
			status = &res.Status
		}
		first := at
		if c.firstAttempt != nil {
			first = *c.firstAttempt
		}
		state, next, detail := "delivered", at, ""
		if res.Err != nil {
			detail = keepable([]byte(res.Err.Error()))
			state, next = "pending", at.Add(r.backoff(c.attempts+1))
			if at.Sub(first) >= r.RetryFor {
				state = "dead"
			}
		}
		b.Queue(`UPDATE event_deliveries
			SET state = $3, attempts = attempts + 1, last_status = $4, last_error = NULLIF($5, ''), last_body = NULLIF($6, ''),
			    first_attempt_at = coalesce(first_attempt_at, $7), last_attempt_at = $7, next_attempt_at = $8,
			    delivered_at = CASE WHEN $3 = 'delivered' THEN $7 END
			WHERE event_seq = $1 AND sink = $2`,
			c.Seq, s.Name(), state, status, detail, res.Body, at, next)
		b.Queue(`INSERT INTO event_attempts (event_seq, sink, at, duration_ms, http_status, ok, detail)
			VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''))`,
			c.Seq, s.Name(), at.Add(-took[i]), took[i].Milliseconds(), status, res.Err == nil, detail)
		r.log(ctx, s, c, res, state)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return len(batch), fmt.Errorf("error recording deliveries to %s: %w", s.Name(), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return len(batch), fmt.Errorf("error recording deliveries to %s: %w", s.Name(), err)
	}
	if r.Observer != nil {
		for _, res := range results {
			r.Observer.EventAttempt(s.Name(), res.Err == nil)
		}
	}
	return len(batch), nil
}

func (r *Relay) log(ctx context.Context, s Sink, c claimed, res Result, state string) {
	if res.Err == nil {
		return
	}
	level := slog.LevelInfo
	if state == "dead" {
		level = slog.LevelWarn
	}
	r.Logger.LogAttrs(ctx, level, "events: delivery failed", slog.String("sink", s.Name()),
		slog.String("event_id", c.ID), slog.Int("attempt", c.attempts+1), slog.Int("status", res.Status),
		slog.String("state", state), slog.String("error", res.Err.Error()))
}

// backoff is the wait before attempt n+1 after n failed ones: RetryMin
// doubled n-1 times, at most RetryMax, less up to a tenth at random so
// that relays do not retry in step.
func (r *Relay) backoff(n int) time.Duration {
	d := r.RetryMin
	for i := 1; i < n && d < r.RetryMax; i++ {
		d *= 2
	}
	d = min(d, r.RetryMax)
	return d - time.Duration(rand.Int64N(int64(d)/10+1))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
