package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
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
	if err := publishEvents(ctx, ns.ClientURL(), n); err != nil {
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
// pool named name, over the source open returns, until n more settlements
// exist, and returns how long that took (from the loop's start).
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
	src, err := open(ctx)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	loop, err := source.NewLoop(source.Config{Source: src, Intake: svc, BatchSize: SourceBatchSize})
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
	for {
		got, err := countSettlements(ctx, pool)
		if err != nil {
			return 0, err
		}
		if got-before >= n {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// publishEvents publishes n events to the default stream at url (created
// if absent), asynchronously, and waits until the stream holds them all.
func publishEvents(ctx context.Context, url string, n int) error {
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
			body, err := json.Marshal(newEvent(fmt.Sprintf("source-%d", k), k))
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
