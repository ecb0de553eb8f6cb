// Package source consumes settlement events from a queue or a log
// (DESIGN.md section 18): the small contract every broker adapter
// satisfies (Source) and the one engine loop over it (Loop), which fetches
// a batch, validates it, records it in one transaction with the batch
// endpoint's semantics, commits, and only then acknowledges.
//
// Broker-specific code lives in the adapters (source/nats); the loop never
// reads a broker's own fields and never trusts its deduplication: the
// business id (settlement_id) is the identity, the broker's message id only
// names a delivery.
package source

import (
	"context"
	"time"
)

// Message is one delivery of one event, as a broker handed it over.
type Message struct {
	// TransportID is the broker's own id of the message: the JetStream
	// stream sequence, topic/partition/offset for Kafka, the SQS
	// MessageId. It names rejects (intake_rejects.transport_id) and
	// counts failures; it is never the business id.
	TransportID string
	// Deliveries counts the deliveries of this message, this one included
	// (1 for the first), as far as the broker knows.
	Deliveries int
	// Data is the whole body as received.
	Data []byte
	// Handle is the adapter's own handle of this delivery (what it needs to
	// acknowledge it, extend its lease or give it back); the loop never
	// looks inside.
	Handle any
}

// Source is a broker adapter: what the loop needs of a queue. Every method
// is called from one goroutine at a time except Extend, which runs beside
// the others while a batch is in work.
//
// The contract fits the three brokers of section 18: JetStream acknowledges
// and naks per message and extends a lease with an in-progress signal;
// Kafka commits a partition's offset up to the last record whose batch
// was acknowledged (an adapter keeps the offsets of batches given back
// uncommitted and seeks back to them); SQS deletes a batch, extends and
// shortens a message's visibility timeout.
type Source interface {
	// Kind is the source's kind as recorded in intake_rejects.source and
	// in the metrics' source label: nats, kafka, sqs.
	Kind() string
	// Fetch returns up to max messages, waiting a while (the adapter's own
	// fetch wait, well under a second or so) for the first one; none and
	// no error when nothing came. Each message is leased to this consumer
	// until it is acknowledged, given back, or its lease expires.
	Fetch(ctx context.Context, max int) ([]Message, error)
	// Extend keeps the leases of msgs alive (JetStream in-progress, SQS
	// visibility): called every LeaseEvery while a batch is in work.
	Extend(ctx context.Context, msgs []Message) error
	// Ack acknowledges msgs: their outcome is committed, the broker may
	// forget them. It returns once the broker confirmed, where it can.
	Ack(ctx context.Context, msgs []Message) error
	// GiveBack returns msgs to the broker for another delivery after
	// delay, without acknowledging them (a nak with delay, a visibility
	// timeout set to delay, a seek back).
	GiveBack(ctx context.Context, msgs []Message, delay time.Duration) error
	// Lag is the number of messages waiting to be delivered.
	Lag(ctx context.Context) (int64, error)
	// Retention is how long the broker keeps a message that nobody
	// acknowledges; 0 means without limit.
	Retention(ctx context.Context) (time.Duration, error)
	// Close ends the adapter's use of the broker.
	Close() error
}
