package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/natsembed"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/source"
	natssrc "github.com/settle/settle/source/nats"
)

// SourceBatchSize is the batch one fetch of the benchmark's source asks
// for: the worker's default (--source-batch), so the figure is the
// worker's (BENCHMARKS.md says why that size).
const SourceBatchSize = source.DefaultBatchSize

// measureSource fills SourceNATSPerS: events/s drained by one worker's
// source loop from a JetStream stream (an in-process server fsyncing every
// write, as the embedded default does) holding about as many events as
// the batch loop took in cfg.Duration, into the database, with
// acknowledgements. The events are published before the clock starts.
func measureSource(ctx context.Context, cfg Config, dbURL string, r *Result) error {
	dir, err := os.MkdirTemp("", "settle-bench-nats-")
	if err != nil {
		return fmt.Errorf("error creating the JetStream store: %w", err)
	}
	defer os.RemoveAll(dir)
	ns, err := natsembed.NewServer(dir, 0, false)
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()

	n := int(r.IntakeBatchPerS * cfg.Duration.Seconds())
	n = min(max(n, 4*SourceBatchSize), 200_000)
	if err := publishEvents(ctx, ns.ClientURL(), "broker", n); err != nil {
		return err
	}
	bel, err := drainBroker(ctx, ns.ClientURL(), n)
	if err != nil {
		return err
	}
	r.SourceNATSBrokerPerS = float64(n) / bel.Seconds()
	cfg.Logf("source_nats_broker_per_s %.1f (%d events fetched and acknowledged, no database)", r.SourceNATSBrokerPerS, n)
	if err := publishEvents(ctx, ns.ClientURL(), "source", n); err != nil {
		return err
	}
	el, err := drain(ctx, cfg, dbURL, "settle-bench-source", n, func(ctx context.Context) (source.Source, error) {
		return natssrc.Open(ctx, natssrc.Config{URL: ns.ClientURL(), Name: "settle-bench"})
	})
	if err != nil {
		return err
	}
	r.SourceNATSPerS = float64(n) / el.Seconds()
	r.SourceBatchSize = SourceBatchSize
	cfg.Logf("source_nats_per_s %.1f (%d events drained from JetStream in batches of %d)", r.SourceNATSPerS, n, SourceBatchSize)
	if err := measureKafka(ctx, cfg, dbURL, n, r); err != nil {
		return err
	}
	return measureSQS(ctx, cfg, dbURL, r)
}

// drain runs one worker's source loop, with an intake of its own over a
// pool named name, over the source open returns, until n messages are
// acknowledged (each after its outcome committed), and returns how long
// that took from the loop's start. It waits on the acknowledgements, not on
// polling the database: a count(*) over a table of 10^5 rows every few
// milliseconds took about half a core of PostgreSQL from the loop it
// measured. Once n are acknowledged it checks that n more settlements
// exist.
func drain(ctx context.Context, cfg Config, dbURL, name string, n int, open func(context.Context) (source.Source, error)) (time.Duration, error) {
	pool, err := openMeasured(ctx, dbURL, name, max(20, cfg.Concurrency+4), nil)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return 0, fmt.Errorf("error creating the River client: %w", err)
	}
	svc, err := intake.NewService(intake.Config{DB: pool, Jobs: jobs.Inserter{Client: rc, SendBatch: jobs.DefaultSendBatch}})
	if err != nil {
		return 0, err
	}
	inner, err := open(ctx)
	if err != nil {
		return 0, err
	}
	defer inner.Close()
	src := &ackCounter{Source: inner, want: int64(n), done: make(chan struct{})}
	warned := &lastLine{}
	loop, err := source.NewLoop(source.Config{Source: src, Intake: svc, BatchSize: SourceBatchSize,
		Logger: slog.New(slog.NewTextHandler(warned, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return 0, err
	}
	before, err := countSettlements(ctx, pool)
	if err != nil {
		return 0, err
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() { _ = loop.Run(lctx) })
	defer func() { stop(); wg.Wait() }()
	// The loop waits out every error of the broker or the database, so a
	// drain that stops moving fails after drainStall, saying how far it got
	// and what the loop last complained of, instead of waiting for ever.
	stalled := func(what string, got int64) error {
		return fmt.Errorf("the source loop made no progress for %s: %d of %d messages acknowledged, %d of %d settlements %s; the loop's last warning: %s",
			drainStall, src.acked.Load(), n, got, n, what, warned.String())
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	acks := progress{last: src.acked.Load(), moved: time.Now()}
acked:
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-src.done:
			break acked
		case <-tick.C:
			if acks.stuck(src.acked.Load()) {
				got, err := countSettlements(ctx, pool)
				if err != nil {
					return 0, err
				}
				return 0, stalled("recorded", int64(got-before))
			}
		}
	}
	// A message delivered again (a lease run out) is acknowledged twice;
	// then the count lags the acknowledgements, and the clock runs on.
	count := progress{last: -1, moved: time.Now()}
	for {
		got, err := countSettlements(ctx, pool)
		if err != nil {
			return 0, err
		}
		if got-before >= n {
			return time.Since(start), nil
		}
		if count.stuck(int64(got)) {
			return 0, stalled("recorded after the last acknowledgement", int64(got-before))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// drainStall is how long a drain may go without a message acknowledged
// (or, once all are, without a settlement recorded) before it fails.
var drainStall = 2 * time.Minute

// progress is a count and when it last moved.
type progress struct {
	last  int64
	moved time.Time
}

// stuck records v and reports whether the count has not moved for
// drainStall.
func (p *progress) stuck(v int64) bool {
	if v != p.last {
		p.last, p.moved = v, time.Now()
		return false
	}
	return time.Since(p.moved) > drainStall
}

// lastLine is an io.Writer that keeps the last line written to it: the
// source loop's last warning, for the error of a drain that stalled.
type lastLine struct {
	mu   sync.Mutex
	line string
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.line = strings.TrimSpace(string(p))
	return len(p), nil
}

func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.line == "" {
		return "none"
	}
	return l.line
}

// ackCounter is a Source that counts the messages acknowledged and closes
// done once want have been.
type ackCounter struct {
	source.Source
	want  int64
	acked atomic.Int64
	once  sync.Once
	done  chan struct{}
}

// Ack acknowledges msgs and counts them once the broker took the
// acknowledgement (a failed one leaves them to be delivered again).
func (a *ackCounter) Ack(ctx context.Context, msgs []source.Message) error {
	err := a.Source.Ack(ctx, msgs)
	if err != nil {
		return err
	}
	if a.acked.Add(int64(len(msgs))) >= a.want {
		a.once.Do(func() { close(a.done) })
	}
	return nil
}

// drainBroker is drain without a database: one consumer of the stream at
// url fetches batches of SourceBatchSize and acknowledges each as soon as
// it has it, until n are acknowledged (as drain's clock stops). It then
// waits, off the clock, until the broker has removed them all.
func drainBroker(ctx context.Context, url string, n int) (time.Duration, error) {
	src, err := natssrc.Open(ctx, natssrc.Config{URL: url, Name: "settle-bench-broker"})
	if err != nil {
		return 0, err
	}
	defer src.Close()
	start := time.Now()
	for got := 0; got < n; {
		msgs, err := src.Fetch(ctx, SourceBatchSize)
		if err != nil {
			return 0, err
		}
		if err := src.Ack(ctx, msgs); err != nil {
			return 0, err
		}
		got += len(msgs)
	}
	el := time.Since(start)
	if err := waitStreamEmpty(ctx, url); err != nil {
		return 0, err
	}
	return el, nil
}

// waitStreamEmpty waits until the default stream at url holds no message.
func waitStreamEmpty(ctx context.Context, url string) error {
	nc, js, err := natssrc.ConnectJetStream(url, "settle-bench-check")
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := js.Stream(ctx, natssrc.DefaultStream)
	if err != nil {
		return fmt.Errorf("error reading the stream: %w", err)
	}
	for {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("error reading the stream: %w", err)
		}
		if info.State.Msgs == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// publishEvents publishes n events, their settlement ids starting with
// prefix, to the default stream at url (created if absent),
// asynchronously, and waits until the stream holds them all.
func publishEvents(ctx context.Context, url, prefix string, n int) error {
	pub, err := natssrc.NewPublisher(ctx, url, "", "")
	if err != nil {
		return err
	}
	pub.Close()
	nc, err := natssrc.Connect(url, "settle-bench-publisher")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return fmt.Errorf("error opening JetStream: %w", err)
	}
	// In windows of 1000, each waited for, so the client never stalls.
	for i := 0; i < n; i += 1000 {
		for k := i; k < min(i+1000, n); k++ {
			body, err := json.Marshal(newEvent(fmt.Sprintf("%s-%d", prefix, k), k))
			if err != nil {
				return err
			}
			if _, err := js.PublishAsync(natssrc.DefaultSubject, body); err != nil {
				return fmt.Errorf("error publishing the benchmark's events: %w", err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
			return fmt.Errorf("error publishing the benchmark's events: %d still unacknowledged after a minute", js.PublishAsyncPending())
		}
	}
	st, err := js.Stream(ctx, natssrc.DefaultStream)
	if err != nil {
		return fmt.Errorf("error reading the stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("error reading the stream: %w", err)
	}
	if int(info.State.Msgs) != n {
		return fmt.Errorf("the stream holds %d messages, %d were published", info.State.Msgs, n)
	}
	return nil
}

func countSettlements(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM settlements`).Scan(&n); err != nil {
		return 0, fmt.Errorf("error counting settlements: %w", err)
	}
	return n, nil
}
