// Package events delivers settle's outcome events (DESIGN.md section 19):
// the rows the state machine writes to settlement_events in the
// transaction of every transition, flag and receipt conflict (the
// transactional outbox) are relayed by the worker to each configured sink,
// at least once and, per sink, in each settlement's order.
//
// The Relay claims, per sink, the oldest pending delivery of each
// settlement whose predecessors there are delivered or dead (SELECT … FOR
// UPDATE SKIP LOCKED), so any number of worker processes may relay without
// sending one event twice at once or out of order; it sends them, records
// each attempt and commits, retrying failures with growing intervals until
// --events-retry-for has passed, then marks the delivery dead. A sink that
// is down holds back only its own deliveries.
//
// It never writes events (the statemachine package does) and never logs a
// secret.
package events

import (
	"context"
	"encoding/json"
	"time"
)

// Event is one outcome event as the relay hands it to a sink.
type Event struct {
	// Seq is the event's row (settlement_events.seq).
	Seq int64
	// ID is <settlement_id>:<n>, the consumer's deduplication key.
	ID           string
	SettlementID string
	// Type is settlement.<to_state>, settlement.flagged or settlement.conflict.
	Type string
	// Payload is the settlement as GET /v1/settlements/{id} shows it, plus
	// event_id, reason, at and, for a transition, from_state.
	Payload json.RawMessage
	// CreatedAt is the time of the event.
	CreatedAt time.Time
}

// Body is what a sink receives: the Standard Webhooks payload
// {"type","timestamp","data"}.
func (e Event) Body() ([]byte, error) {
	return json.Marshal(struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{e.Type, e.CreatedAt.UTC().Format(time.RFC3339Nano), e.Payload})
}

// Result is the outcome of one attempt to deliver an event.
type Result struct {
	// Status is the receiver's HTTP status (0: none, or not HTTP).
	Status int
	// Body is the start of the receiver's answer, kept for the operator.
	Body string
	// Err is nil when the event was delivered (a 2xx answer, a broker's
	// acknowledgement), else why not.
	Err error
}

// Sink is where events go: a webhook URL or a broker.
type Sink interface {
	// Name identifies the sink in event_deliveries, `settle events list`
	// and the metrics; it never holds a credential.
	Name() string
	// Deliver makes one attempt to deliver e.
	Deliver(ctx context.Context, e Event) Result
}
