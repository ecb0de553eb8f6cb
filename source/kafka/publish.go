package kafka

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Publisher produces records to a topic, the producer's side of the source
// (`settle submit --source kafka://…`) and the client of the outcome
// events' Kafka sink: an idempotent producer (the client's default), each
// record acknowledged by every in-sync replica before it counts.
type Publisher struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
}

// NewPublisher connects to brokers and checks that topic exists (settle
// creates no topic). name is the client id; opts are more client options.
func NewPublisher(ctx context.Context, brokers []string, topic, name string, opts ...kgo.Opt) (*Publisher, error) {
	if len(brokers) == 0 || topic == "" {
		return nil, fmt.Errorf("error opening a kafka producer: no brokers or no topic")
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(name),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("error creating the kafka client: %w", err)
	}
	adm := kadm.NewClient(cl)
	if err := checkTopicExists(ctx, adm, topic); err != nil {
		cl.Close()
		return nil, err
	}
	return &Publisher{cl: cl, adm: adm, topic: topic}, nil
}

// Published is where the broker stored one record.
type Published struct {
	Partition int32
	Offset    int64
}

// TransportID is the record's transport id, topic/partition/offset.
func (p Published) TransportID(topic string) string { return TransportID(topic, p.Partition, p.Offset) }

// Topic is the topic produced to.
func (p *Publisher) Topic() string { return p.topic }

// Publish produces one record with key and value and headers (name, value
// pairs) and waits until the broker acknowledged it.
func (p *Publisher) Publish(ctx context.Context, key, value []byte, headers ...string) (Published, error) {
	r := &kgo.Record{Topic: p.topic, Key: key, Value: value}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	res := p.cl.ProduceSync(ctx, r)
	if err := res.FirstErr(); err != nil {
		return Published{}, fmt.Errorf("error producing to %s: %w", p.topic, err)
	}
	return Published{Partition: r.Partition, Offset: r.Offset}, nil
}

// PublishEvent produces an event line, keyed by its settlement_id when it
// has one, so that every delivery of one settlement's event goes to one
// partition, in order, and the first of them decides.
func (p *Publisher) PublishEvent(ctx context.Context, data []byte) (Published, error) {
	return p.Publish(ctx, EventKey(data), data)
}

// EventKey is the record key of an event line: its settlement_id, or none
// when it has none (a line settle will reject).
func EventKey(data []byte) []byte {
	var ev struct {
		SettlementID string `json:"settlement_id"`
	}
	if json.Unmarshal(data, &ev) == nil && ev.SettlementID != "" {
		return []byte(ev.SettlementID)
	}
	return nil
}

// Close flushes nothing more and closes the client.
func (p *Publisher) Close() { p.cl.Close() }
