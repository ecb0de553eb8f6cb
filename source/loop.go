package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/metrics"
)

// Defaults of Config.
const (
	// DefaultBatchSize is how many messages one fetch asks for: the most
	// one intake transaction takes (intake.MaxBatch). One loop records one
	// batch at a time, in stream order, so the cost of a commit is shared
	// by as many events as possible: 1000 drained about 1.6 times as fast
	// as 250 (BENCHMARKS.md). A batch given back during an outage is a
	// harmless redelivery whatever its size.
	DefaultBatchSize = intake.MaxBatch
	// DefaultMaxFailures is how many times a message may fail for an
	// unexpected reason before it is rejected as poison
	// (--source-max-failures).
	DefaultMaxFailures = 5
	// DefaultLeaseEvery is how often the leases of a batch in work are
	// extended; well under the adapters' lease (30 s for JetStream).
	DefaultLeaseEvery = 5 * time.Second
	// DefaultRetryDelay is how long a message that failed waits before it
	// is delivered again.
	DefaultRetryDelay = time.Second
	// DefaultPauseMax is the longest wait between two probes of the
	// database during an outage.
	DefaultPauseMax = 5 * time.Second
	// DefaultParallel is how many transactions one fetched batch is
	// recorded in at once (--source-parallel). One transaction is one
	// database backend: with 1, a worker uses one of the database's cores
	// however large the batch; 4 kept both cores of the bench's machine
	// busy (BENCHMARKS.md).
	DefaultParallel = 4
	// minPart is the fewest events worth a transaction of their own when a
	// fetched batch is split: below it the commit, not the work, is the
	// cost.
	minPart = 100
)

// ReasonPoison is the reason of a message rejected after failing
// MaxFailures times for an unexpected reason.
const ReasonPoison = "poison"

// Intake is what the loop needs of intake: the batch path with work added
// to its transaction, a probe of the database, and whether it checks
// funds (then an account's payouts must share a transaction to be decided
// in one order). *intake.Service satisfies it.
type Intake interface {
	SubmitBatchTx(ctx context.Context, evs []intake.Event, inTx intake.InTx) ([]intake.Outcome, error)
	Ping(ctx context.Context) error
	ChecksFunds() bool
}

// Config configures a Loop. Source and Intake are required.
type Config struct {
	Source Source
	Intake Intake
	// Metrics receives the source metrics (default: registered nowhere).
	Metrics *metrics.Metrics
	// Logger receives the loop's logs (default: discarded).
	Logger *slog.Logger
	// BatchSize is the most messages one fetch asks for (default
	// DefaultBatchSize, at most intake.MaxBatch).
	BatchSize int
	// Parallel is the most transactions one fetched batch is recorded in
	// at once (default DefaultParallel; 1 records a fetch in one
	// transaction).
	Parallel int
	// MaxFailures is how many unexpected failures make a message poison
	// (default DefaultMaxFailures).
	MaxFailures int
	// LeaseEvery is how often the leases of a batch in work are extended
	// (default DefaultLeaseEvery).
	LeaseEvery time.Duration
	// RetryDelay is how long a message given back after a failure waits
	// before its next delivery (default DefaultRetryDelay).
	RetryDelay time.Duration
	// PauseMax is the longest wait between two probes of the database
	// during an outage (default DefaultPauseMax).
	PauseMax time.Duration
	// ReplayHorizon is the worker's --replay-horizon, which the broker's
	// retention is compared with at start (default
	// intake.DefaultReplayHorizon).
	ReplayHorizon time.Duration
	// Now is the clock of received_at (default time.Now).
	Now func() time.Time
}

// Loop is the one engine loop over a Source: fetch, validate, record,
// commit, acknowledge. It has one fetched batch in work at a time and
// records it in up to Config.Parallel transactions at once, split so that
// the events of one settlement_id, and when intake checks funds those of
// one account_id, always share a transaction in their stream order: the
// first delivery of a settlement_id decides, later ones are replays of it
// or conflicts with it, and the funds check sees an account's payouts in
// order. Run it once
// per Source (two workers on one consumer run two Loops, each with its own
// adapter).
type Loop struct {
	cfg  Config
	kind string
	log  *slog.Logger
	m    *metrics.Metrics

	mu sync.Mutex
	// failures counts the unexpected failures of a message by its
	// transport id. It lives as long as the process: a message that kills
	// the process is not counted, and one that fails in two workers is
	// counted in each (so it takes up to MaxFailures deliveries per
	// worker to be quarantined).
	failures map[string]int
	lastLag  time.Time
}

// NewLoop returns a Loop for cfg.
func NewLoop(cfg Config) (*Loop, error) {
	if cfg.Source == nil || cfg.Intake == nil {
		return nil, errors.New("error creating the source loop: Source and Intake are required")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	cfg.BatchSize = min(cfg.BatchSize, intake.MaxBatch)
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.MaxFailures <= 0 {
		cfg.MaxFailures = DefaultMaxFailures
	}
	if cfg.LeaseEvery <= 0 {
		cfg.LeaseEvery = DefaultLeaseEvery
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = DefaultRetryDelay
	}
	if cfg.PauseMax <= 0 {
		cfg.PauseMax = DefaultPauseMax
	}
	if cfg.ReplayHorizon <= 0 {
		cfg.ReplayHorizon = intake.DefaultReplayHorizon
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewUnregistered()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	kind := cfg.Source.Kind()
	return &Loop{cfg: cfg, kind: kind, log: cfg.Logger.With("source", kind), m: cfg.Metrics, failures: map[string]int{}}, nil
}

// Run consumes the source until ctx ends. A batch in work when ctx ends is
// finished (recorded and acknowledged) before Run returns. Errors of the
// broker or the database are logged and waited out, never returned: Run
// returns nil once ctx has ended.
func (l *Loop) Run(ctx context.Context) error {
	l.checkRetention(ctx)
	l.run(ctx)
	return nil
}

// run is Run's fetch-and-record cycle.
func (l *Loop) run(ctx context.Context) {
	backoff := l.cfg.RetryDelay / 4
	for ctx.Err() == nil {
		msgs, err := l.cfg.Source.Fetch(ctx, l.cfg.BatchSize)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			l.log.Warn("error fetching from the source; trying again", "error", err, "retry_in", backoff)
			sleep(ctx, backoff)
			backoff = min(2*backoff, l.cfg.PauseMax)
			continue
		}
		backoff = l.cfg.RetryDelay / 4
		if len(msgs) > 0 {
			// The batch is finished even when ctx ends meanwhile: what was
			// fetched is recorded and acknowledged, or given back.
			l.Handle(context.WithoutCancel(ctx), msgs)
			if ctx.Err() == nil && !l.healthy(ctx) {
				l.pause(ctx)
			}
		}
		l.updateLag(ctx)
	}
}

// checkRetention says in one line whether a message could outlive its
// receipt: a broker that keeps messages longer than the replay horizon can
// deliver a message whose receipt retention has deleted (it is then
// refused as too old if it carries occurred_at).
func (l *Loop) checkRetention(ctx context.Context) {
	ret, err := l.cfg.Source.Retention(ctx)
	switch {
	case err != nil:
		l.log.Warn("could not read the source's retention to compare it with --replay-horizon", "error", err)
	case ret == 0 || ret > l.cfg.ReplayHorizon:
		shown := "unlimited"
		if ret > 0 {
			shown = ret.String()
		}
		l.log.Warn("the source keeps messages longer than --replay-horizon: a message could outlive its receipt (redelivered after that, it is rejected as too old when it carries occurred_at)",
			"retention", shown, "replay_horizon", l.cfg.ReplayHorizon)
	default:
		l.log.Info("the source's retention is within --replay-horizon: no message outlives its receipt",
			"retention", ret, "replay_horizon", l.cfg.ReplayHorizon)
	}
}

// healthy reports whether the database answers; the loop pauses when it
// does not.
func (l *Loop) healthy(ctx context.Context) bool {
	return l.cfg.Intake.Ping(ctx) == nil
}

// pause waits, probing the database with growing intervals, until it
// answers or ctx ends. Nothing is fetched meanwhile.
func (l *Loop) pause(ctx context.Context) {
	wait := 100 * time.Millisecond
	l.log.Warn("database unavailable: the source stops fetching until it answers")
	start := time.Now()
	for ctx.Err() == nil {
		sleep(ctx, wait)
		if l.healthy(ctx) {
			l.log.Info("database available again: the source resumes", "paused", time.Since(start).Round(time.Millisecond))
			return
		}
		wait = min(2*wait, l.cfg.PauseMax)
	}
}

// updateLag refreshes the lag gauge, at most once a second.
func (l *Loop) updateLag(ctx context.Context) {
	l.mu.Lock()
	due := time.Since(l.lastLag) >= time.Second
	if due {
		l.lastLag = time.Now()
	}
	l.mu.Unlock()
	if !due {
		return
	}
	if n, err := l.cfg.Source.Lag(ctx); err == nil {
		l.m.SourceLag.WithLabelValues(l.kind).Set(float64(n))
	}
}

// Result says what became of a batch handed to Handle.
type Result struct {
	// Acked counts the messages whose outcome committed and that were
	// then acknowledged (or whose acknowledgement was attempted).
	Acked int
	// GivenBack counts the messages given back for a later delivery.
	GivenBack int
	// Outage is true when the database could not be reached: nothing of
	// the batch was recorded or acknowledged.
	Outage bool
}

// reject is one message refused for good, with its index in the batch.
type reject struct {
	msg    Message
	reason string
}

// Handle takes one fetched batch through: validate, record (receipts,
// replays, conflicts and rejects), commit, acknowledge. While it works the
// batch's leases are extended. The batch is split into up to
// Config.Parallel parts recorded at once, each in its own transaction and
// acknowledged after its commit (see Loop). A database outage gives a part
// back; an unexpected failure of a part takes its messages one by one, and
// a message that fails MaxFailures times is rejected as poison.
func (l *Loop) Handle(ctx context.Context, msgs []Message) Result {
	stop := l.keepLeases(ctx, msgs)
	defer stop()
	for _, m := range msgs {
		if m.Deliveries > 1 {
			l.m.SourceRedeliveries.WithLabelValues(l.kind).Inc()
		}
	}
	parts := split(decode(msgs), l.cfg.Parallel, l.cfg.Intake.ChecksFunds())
	if len(parts) == 1 {
		return l.handle(ctx, parts[0])
	}
	results := make([]Result, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() { results[i] = l.handle(ctx, p) })
	}
	wg.Wait()
	var res Result
	for _, r := range results {
		res.add(r)
	}
	return res
}

// add counts r into res.
func (res *Result) add(r Result) {
	res.Acked += r.Acked
	res.GivenBack += r.GivenBack
	res.Outage = res.Outage || r.Outage
}

// handle records items in one transaction and acknowledges them after
// its commit, or gives them back, or takes them one by one.
func (l *Loop) handle(ctx context.Context, items []item) Result {
	start := time.Now()
	outcomes, err := l.record(ctx, items)
	if err == nil {
		msgs := messages(items)
		crash.Point(crash.SourceAfterCommit)
		l.ack(ctx, msgs)
		crash.Point(crash.SourceAfterAck)
		for _, o := range outcomes {
			l.m.SourceMessages.WithLabelValues(l.kind, o).Inc()
		}
		l.mu.Lock()
		for _, m := range msgs {
			delete(l.failures, m.TransportID)
		}
		l.mu.Unlock()
		l.m.SourceBatch.Observe(time.Since(start).Seconds())
		return Result{Acked: len(msgs)}
	}
	if l.outage(ctx, err) {
		l.log.Warn("database unavailable: batch given back, nothing acknowledged", "messages", len(items), "error", err)
		l.giveBack(ctx, messages(items))
		return Result{GivenBack: len(items), Outage: true}
	}
	if len(items) > 1 {
		// One message spoiled the batch: find it by taking them one by one.
		l.log.Warn("batch failed for an unexpected reason; taking its messages one by one", "messages", len(items), "error", err)
		var res Result
		for _, it := range items {
			res.add(l.handle(ctx, []item{it}))
		}
		return res
	}
	return l.failed(ctx, items[0].msg, err)
}

// failed counts an unexpected failure of message m and gives it back, or
// rejects it as poison once it has failed MaxFailures times.
func (l *Loop) failed(ctx context.Context, m Message, cause error) Result {
	l.mu.Lock()
	l.failures[m.TransportID]++
	n := l.failures[m.TransportID]
	l.mu.Unlock()
	if n < l.cfg.MaxFailures {
		l.log.Warn("message failed for an unexpected reason; given back", "transport_id", m.TransportID,
			"failures", n, "max_failures", l.cfg.MaxFailures, "error", cause)
		l.giveBack(ctx, []Message{m})
		return Result{GivenBack: 1}
	}
	l.log.Error("message failed too often: rejected as poison", "transport_id", m.TransportID,
		"failures", n, "error", cause)
	_, err := l.cfg.Intake.SubmitBatchTx(ctx, nil, func(ctx context.Context, tx pgx.Tx, _ []error) error {
		return l.insertRejects(ctx, tx, []reject{{msg: m, reason: ReasonPoison}})
	})
	if err != nil {
		l.log.Warn("error recording a poison message; given back", "transport_id", m.TransportID, "error", err)
		l.giveBack(ctx, []Message{m})
		return Result{GivenBack: 1, Outage: l.outage(ctx, err)}
	}
	crash.Point(crash.SourceAfterCommit)
	l.ack(ctx, []Message{m})
	crash.Point(crash.SourceAfterAck)
	l.mu.Lock()
	delete(l.failures, m.TransportID)
	l.mu.Unlock()
	l.m.SourceMessages.WithLabelValues(l.kind, ReasonPoison).Inc()
	return Result{Acked: 1}
}

// outage reports whether err means the database could not be reached
// (rather than a failure of this batch): intake says so, or the database
// does not answer a probe now.
func (l *Loop) outage(ctx context.Context, err error) bool {
	return errors.Is(err, intake.ErrUnavailable) || !l.healthy(ctx)
}

// record records items in one transaction: the receipts and replays of
// the valid events and the rejects, then (as the batch endpoint does) the
// conflicts in one more. It returns the outcome of each item: created,
// replayed, conflict, insufficient_funds or rejected. A panic in the
// handling of the batch is an unexpected failure, returned as an error.
func (l *Loop) record(ctx context.Context, items []item) (outcomes []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("error handling a batch: panic: %v", r)
		}
	}()
	outcomes = make([]string, len(items))
	var rejects []reject
	var evs []intake.Event
	var idx []int // the item index of each event
	for i, it := range items {
		if it.err != nil {
			rejects = append(rejects, reject{msg: it.msg, reason: reasonOf(it.err)})
			outcomes[i] = "rejected"
			continue
		}
		evs = append(evs, it.ev)
		idx = append(idx, i)
	}
	outs, err := l.cfg.Intake.SubmitBatchTx(ctx, evs, func(ctx context.Context, tx pgx.Tx, refused []error) error {
		all := rejects
		for j, e := range refused {
			if e != nil {
				all = append(all[:len(all):len(all)], reject{msg: items[idx[j]].msg, reason: reasonOf(e)})
			}
		}
		if err := l.insertRejects(ctx, tx, all); err != nil {
			return err
		}
		crash.Point(crash.SourceBeforeCommit)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for j, o := range outs {
		i := idx[j]
		var ie *intake.InvalidError
		switch {
		case errors.Is(o.Err, intake.ErrConflict):
			outcomes[i] = "conflict"
		case errors.Is(o.Err, intake.ErrInsufficientFunds):
			// Recorded as its receipt's outcome (--funds-check): a
			// redelivery is refused again, from the receipt.
			outcomes[i] = "insufficient_funds"
		case errors.As(o.Err, &ie):
			outcomes[i] = "rejected"
		case o.Err != nil:
			return nil, fmt.Errorf("error recording message %s: %w", items[i].msg.TransportID, o.Err)
		case o.Result.Replayed:
			outcomes[i] = "replayed"
		default:
			outcomes[i] = "created"
		}
	}
	return outcomes, nil
}

// reasonOf is the reason recorded for a refused event: the kind, field
// and rule at fault (never the payload).
func reasonOf(err error) string {
	return err.Error()
}

// insertRejects records rejects in tx, once per (source, transport_id): a
// redelivered reject is not stored twice.
func (l *Loop) insertRejects(ctx context.Context, tx pgx.Tx, rs []reject) error {
	if len(rs) == 0 {
		return nil
	}
	ids, reasons, raws := make([]string, len(rs)), make([]string, len(rs)), make([][]byte, len(rs))
	for i, r := range rs {
		ids[i], reasons[i], raws[i] = r.msg.TransportID, r.reason, r.msg.Data
		if raws[i] == nil {
			raws[i] = []byte{}
		}
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO intake_rejects (source, transport_id, received_at, reason, raw)
		SELECT $1, t, $2, r, b FROM unnest($3::text[], $4::text[], $5::bytea[]) AS x(t, r, b)
		ON CONFLICT (source, transport_id) DO NOTHING`,
		l.kind, l.cfg.Now(), ids, reasons, raws)
	if err != nil {
		return fmt.Errorf("error recording rejected messages: %w", err)
	}
	return nil
}

// ack acknowledges msgs. A failed acknowledgement is logged and left: the
// broker delivers the messages again and they are replays.
func (l *Loop) ack(ctx context.Context, msgs []Message) {
	if err := l.cfg.Source.Ack(ctx, msgs); err != nil {
		l.log.Warn("error acknowledging a committed batch; it will be delivered again and replayed", "messages", len(msgs), "error", err)
	}
}

// giveBack returns msgs to the broker for a delivery after RetryDelay.
func (l *Loop) giveBack(ctx context.Context, msgs []Message) {
	if err := l.cfg.Source.GiveBack(ctx, msgs, l.cfg.RetryDelay); err != nil {
		l.log.Warn("error giving messages back; they come back when their lease expires", "messages", len(msgs), "error", err)
	}
}

// keepLeases extends the leases of msgs every LeaseEvery until the
// returned function is called.
func (l *Loop) keepLeases(ctx context.Context, msgs []Message) func() {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(l.cfg.LeaseEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := l.cfg.Source.Extend(ctx, msgs); err != nil && ctx.Err() == nil {
					l.log.Warn("error extending the leases of a batch in work", "messages", len(msgs), "error", err)
				}
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
