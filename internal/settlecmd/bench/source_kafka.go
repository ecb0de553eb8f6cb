package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/settle/settle/source"
	kafkasrc "github.com/settle/settle/source/kafka"
)

// The benchmark's Kafka topic: partitions as a topic meant for several
// workers would have.
const (
	benchKafkaTopic      = "settle.bench"
	benchKafkaPartitions = 3
)

// measureKafka fills SourceKafkaPerS: events/s drained by one worker's
// source loop from a topic of kfake, an in-process stand-in for Kafka
// speaking its wire protocol (kept in memory, not Kafka), holding as many
// events as the NATS phase drained, into the database, each batch's
// offsets committed after its transaction. The events are produced before
// the clock starts. It measures settle's side (the client, the loop, the
// database) with a broker that costs next to nothing; a real cluster adds
// its network and disk.
func measureKafka(ctx context.Context, cfg Config, dbURL string, n int, r *Result) error {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(benchKafkaPartitions, benchKafkaTopic))
	if err != nil {
		return fmt.Errorf("error starting kfake: %w", err)
	}
	defer kc.Close()
	brokers := kc.ListenAddrs()
	if err := produceEvents(ctx, brokers, n); err != nil {
		return err
	}
	el, err := drain(ctx, cfg, dbURL, "settle-bench-source-kafka", n, func(ctx context.Context) (source.Source, error) {
		return kafkasrc.Open(ctx, kafkasrc.Config{Brokers: brokers, Topic: benchKafkaTopic, Name: "settle-bench"})
	})
	if err != nil {
		return err
	}
	r.SourceKafkaPerS = float64(n) / el.Seconds()
	cfg.Logf("source_kafka_per_s %.1f (%d events drained from a topic of kfake, the in-process stand-in for Kafka, in batches of %d)",
		r.SourceKafkaPerS, n, SourceBatchSize)
	return nil
}

// produceEvents produces n events keyed by settlement id to the
// benchmark's topic and waits until the broker acknowledged them all.
func produceEvents(ctx context.Context, brokers []string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(benchKafkaTopic))
	if err != nil {
		return fmt.Errorf("error creating the kafka client: %w", err)
	}
	defer cl.Close()
	var mu sync.Mutex
	var first error
	for k := range n {
		ev := newEvent(fmt.Sprintf("kafka-%d", k), k)
		body, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		cl.Produce(ctx, &kgo.Record{Key: []byte(ev.SettlementID), Value: body}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				first = firstErr(first, err)
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("error producing the benchmark's events: %w", err)
	}
	if first != nil {
		return fmt.Errorf("error producing the benchmark's events: %w", first)
	}
	return nil
}

// firstErr keeps the first error.
func firstErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
