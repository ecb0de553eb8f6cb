package main

import (
	"context"
	"time"

	"github.com/settle/settle/source"
	kafkasrc "github.com/settle/settle/source/kafka"
)

// kafkaPrefix starts the SPEC of a Kafka topic:
// kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?group=G].
const kafkaPrefix = "kafka://"

// openKafkaSource opens the Kafka source of spec for a worker: a member of
// the SPEC's consumer group whose session lasts lease (--source-lease), and
// which a rebalance waits for as long: a worker killed with its partitions
// holds them up that long at most.
func openKafkaSource(ctx context.Context, spec string, lease time.Duration, name string) (source.Source, error) {
	sp, err := kafkasrc.ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return kafkasrc.Open(ctx, kafkasrc.Config{Brokers: sp.Brokers, Topic: sp.Topic, Group: sp.Group, SessionTimeout: lease, RebalanceTimeout: lease, Name: name})
}

// kafkaPublisher produces to a Kafka topic, each line keyed by its
// settlement_id: Kafka has no message id, and the idempotent producer
// stores a record once however often the client retried it.
type kafkaPublisher struct{ *kafkasrc.Publisher }

func (p kafkaPublisher) Publish(ctx context.Context, data []byte, _ string) (published, error) {
	_, err := p.PublishEvent(ctx, data)
	return published{}, err
}

// openKafkaPublisher opens the producer of spec (its group plays no part).
func openKafkaPublisher(ctx context.Context, spec string) (publisher, func(), error) {
	sp, err := kafkasrc.ParseSpec(spec)
	if err != nil {
		return nil, nil, err
	}
	pub, err := kafkasrc.NewPublisher(ctx, sp.Brokers, sp.Topic, "settle-submit")
	if err != nil {
		return nil, nil, err
	}
	return kafkaPublisher{pub}, pub.Close, nil
}
