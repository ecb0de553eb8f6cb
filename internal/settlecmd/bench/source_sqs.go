package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/settle/settle/internal/motoserver"
	"github.com/settle/settle/source"
	sqssrc "github.com/settle/settle/source/sqs"
)

// benchSQSMaxEvents bounds the events of the SQS phase. moto_server's
// calls cost more the more its queue holds (on this project's 2-core
// machine: 500 events sent in 2.8 s and drained in 20 s, 1000 in 11 s and
// 120 s), so a queue of the NATS phase's size would measure moto's scan of
// its own queue, for many minutes, rather than anything of settle's.
const benchSQSMaxEvents = 500

// sqsEvents is the SQS phase's size: 25 events per second of cfg.Duration,
// at least 100 and at most benchSQSMaxEvents.
func sqsEvents(cfg Config) int {
	return min(max(int(cfg.Duration.Seconds()*25), 100), benchSQSMaxEvents)
}

// measureSQS fills SourceSQSPerS: events/s drained by one worker's source
// loop from a queue of moto_server, a local stand-in for Amazon SQS (its
// HTTP API, kept in memory by one Python process: not SQS), holding
// sqsEvents(cfg) events, into the database, each batch deleted after its
// transaction. The events are sent before the clock starts. The figure is
// moto_server's: every receive, visibility change and delete is a call to
// one Python process whose cost grows with the queue, so it shows that the
// path runs end to end and bounds nothing of SQS's (a real queue serves
// receives of 10 from many receivers at once, at a network round trip
// each). Without moto_server on PATH the phase is left out and says so
// (SourceSQSPerS 0).
func measureSQS(ctx context.Context, cfg Config, dbURL string, r *Result) error {
	n := sqsEvents(cfg)
	srv, err := motoserver.Start(ctx, nil)
	if errors.Is(err, motoserver.ErrNotInstalled) {
		cfg.Logf("source_sqs_per_s left out: %v", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer srv.Close()
	queue, err := srv.CreateQueue(ctx, "settle-bench", sqssrc.DefaultVisibility)
	if err != nil {
		return err
	}
	api := srv.Client()
	if err := sendEvents(ctx, api, queue, n); err != nil {
		return err
	}
	el, err := drain(ctx, cfg, dbURL, "settle-bench-source-sqs", n, func(ctx context.Context) (source.Source, error) {
		return sqssrc.Open(ctx, sqssrc.Config{QueueURL: queue, Client: api})
	})
	if err != nil {
		return err
	}
	r.SourceSQSPerS = float64(n) / el.Seconds()
	r.SourceSQSEvents = n
	cfg.Logf("source_sqs_per_s %.1f (%d events drained from a queue of moto_server, a local stand-in for SQS, in batches of %d)",
		r.SourceSQSPerS, n, SourceBatchSize)
	return nil
}

// sendEvents sends n events to queue in batches of 10, 16 batches at once.
func sendEvents(ctx context.Context, api sqssrc.API, queue string, n int) error {
	pub, err := sqssrc.NewPublisher(ctx, queue, api)
	if err != nil {
		return err
	}
	batches := make(chan [][]byte)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for b := range batches {
				if _, err := pub.PublishBatch(ctx, b); err != nil {
					mu.Lock()
					first = firstErr(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := 0; i < n; i += sqssrc.MaxReceive {
		var b [][]byte
		for k := i; k < min(i+sqssrc.MaxReceive, n); k++ {
			body, err := json.Marshal(newEvent(fmt.Sprintf("sqs-%d", k), k))
			if err != nil {
				close(batches)
				wg.Wait()
				return err
			}
			b = append(b, body)
		}
		batches <- b
	}
	close(batches)
	wg.Wait()
	if first != nil {
		return fmt.Errorf("error sending the benchmark's events: %w", first)
	}
	return nil
}
