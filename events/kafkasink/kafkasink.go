// Package kafkasink is the Kafka sink of the outcome events (DESIGN.md
// section 19, `settle worker --events-publish kafka://HOST:PORT/TOPIC`):
// each event is produced to the topic with the settlement id as its record
// key, so one settlement's events share a partition and keep their order
// there, by an idempotent producer, and counts as delivered only once the
// broker acknowledged it (every in-sync replica has it). The relay
// (package events) decides what to publish and when, so a settlement's
// events reach the topic in order.
//
// Kafka has no message id to deduplicate by: an event published again
// (after a crash between the broker's acknowledgement and its record, or
// `settle events redeliver`) is a second record with the same event id,
// which every record carries in its Settle-Event-Id header and its body's
// data.event_id; a consumer deduplicates by it. The topic must exist:
// settle creates none.
//
// It shares its producer with the Kafka source (source/kafka) and never
// logs a credential.
package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/settle/settle/events"
	kafkasrc "github.com/settle/settle/source/kafka"
)

// DefaultTimeout bounds one publish, the broker's acknowledgement
// included.
const DefaultTimeout = 10 * time.Second

// Headers the sink sets on each record (the names of the NATS sink's).
const (
	HeaderEventID      = "Settle-Event-Id"
	HeaderSettlementID = "Settle-Settlement-Id"
	HeaderType         = "Settle-Event-Type"
)

// Spec is a parsed --events-publish kafka:// SPEC.
type Spec struct {
	Brokers []string
	Topic   string
}

// ParseSpec parses kafka://HOST:PORT[,HOST:PORT…]/TOPIC (a consumer group
// plays no part in publishing and is refused).
func ParseSpec(spec string) (Spec, error) {
	if _, query, ok := strings.Cut(spec, "?"); ok {
		return Spec{}, fmt.Errorf("kafka sink %q: no parameters (%q): want kafka://HOST:PORT[,HOST:PORT…]/TOPIC", spec, query)
	}
	sp, err := kafkasrc.ParseSpec(spec)
	if err != nil {
		return Spec{}, err
	}
	return Spec{Brokers: sp.Brokers, Topic: sp.Topic}, nil
}

// Config configures Open. Brokers and Topic are required.
type Config struct {
	Brokers []string
	Topic   string
	// Timeout bounds one publish (default DefaultTimeout).
	Timeout time.Duration
	// Name is the client id, shown by the brokers.
	Name string
	// Opts are more client options (tests).
	Opts []kgo.Opt
}

// Sink produces outcome events to a Kafka topic; it satisfies events.Sink.
type Sink struct {
	pub     *kafkasrc.Publisher
	topic   string
	timeout time.Duration
}

var _ events.Sink = (*Sink)(nil)

// Open connects to the brokers and checks that the topic exists.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" {
		return nil, errors.New("error opening the kafka events sink: no brokers or no topic")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Name == "" {
		cfg.Name = "settle-events"
	}
	pub, err := kafkasrc.NewPublisher(ctx, cfg.Brokers, cfg.Topic, cfg.Name,
		append([]kgo.Opt{kgo.RecordDeliveryTimeout(cfg.Timeout)}, cfg.Opts...)...)
	if err != nil {
		return nil, err
	}
	return &Sink{pub: pub, topic: cfg.Topic, timeout: cfg.Timeout}, nil
}

// Name is "kafka:<topic>": deliveries follow the topic, whichever brokers
// reach it.
func (s *Sink) Name() string { return "kafka:" + s.topic }

// Deliver produces e keyed by its settlement id and waits for the
// broker's acknowledgement; only that delivers it.
func (s *Sink) Deliver(ctx context.Context, e events.Event) events.Result {
	body, err := e.Body()
	if err != nil {
		return events.Result{Err: fmt.Errorf("error encoding event %s: %w", e.ID, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	p, err := s.pub.Publish(ctx, []byte(e.SettlementID), body,
		HeaderEventID, e.ID, HeaderSettlementID, e.SettlementID, HeaderType, e.Type)
	if err != nil {
		return events.Result{Err: fmt.Errorf("error publishing event %s: %w", e.ID, err)}
	}
	return events.Result{Body: fmt.Sprintf("topic %s partition %d offset %d", s.topic, p.Partition, p.Offset)}
}

// Close closes the producer.
func (s *Sink) Close() { s.pub.Close() }
