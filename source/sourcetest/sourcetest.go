// Package sourcetest is the conformance suite of the event sources
// (DESIGN.md section 18): one set of cases that every broker adapter
// (source/nats, source/kafka, source/sqs) runs against its broker or an
// in-process stand-in, through a small Harness. Each case drives the one
// engine loop (source.Loop) over the adapter with a real PostgreSQL and
// checks what section 18 promises: each event settled once, a redelivery a
// replay, nothing acknowledged before its outcome committed, rejects kept,
// nothing acknowledged or rejected during a database outage.
//
// It is test support: it imports testing and is never linked into the
// binary (`go list -deps ./cmd/settle` must not list testing).
package sourcetest

import (
	"errors"
	"testing"
	"time"

	"github.com/settle/settle/source"
)

// Harness is one adapter under test.
type Harness interface {
	// Kind is the adapter's kind, as recorded in intake_rejects.source and
	// the metrics' source label.
	Kind() string
	// Broker makes a broker for one case: its own server, topic, stream or
	// queue, with whatever consumer state the adapter needs created, and
	// nothing published yet. It is closed when t ends.
	Broker(t *testing.T) Broker
}

// Broker is one case's broker, as a Harness made it.
type Broker interface {
	// Publish publishes one message holding data and returns its transport
	// id, as the adapter names it in source.Message.TransportID (stream
	// sequence, topic/partition/offset, MessageId).
	Publish(t *testing.T, data []byte) string
	// Open opens a new consumer on the broker, as a new worker process
	// would (its own connection). The suite closes it to kill the
	// consumer; the harness closes it too when t ends (Close must bear
	// being called twice).
	Open(t *testing.T, o Options) source.Source
	// Drained reports whether every published message was acknowledged:
	// nothing waiting, nothing delivered and unacknowledged, no offset
	// left uncommitted. When it is not, the string says what is left.
	Drained(t *testing.T) (bool, string)
	// Expire makes the leases held by src run out while src is still at
	// work, as when a worker stalls or is cut off: the broker may then
	// give src's messages to another consumer. A broker whose lease is a
	// short timer (Options.Lease) needs to do nothing; one whose lease is
	// a session kept alive in the background (a Kafka group member) ends
	// the session.
	Expire(t *testing.T, src source.Source)
	// Restart stops the broker and starts it again on what it stored,
	// under the same address. It returns ErrUnsupported where the broker
	// or its stand-in cannot be restarted in a test.
	Restart(t *testing.T) error
}

// Carrier is a Broker that cannot carry every body: SQS takes neither an
// empty body nor bytes that are not XML characters (so no invalid UTF-8),
// and refuses them at the producer, before settle could see them. A case
// leaves out of its invalid messages each body Carries refuses, and says
// so.
type Carrier interface {
	Carries(data []byte) bool
}

// Options configure a consumer opened by Broker.Open.
type Options struct {
	// Name names the consumer (a connection or client name).
	Name string
	// Lease is how long a delivered message stays leased to the consumer
	// without news (JetStream AckWait, SQS visibility timeout, a Kafka
	// member's session): never 0, the suite always says.
	Lease time.Duration
}

// ErrUnsupported is returned by Broker.Restart where the broker cannot be
// restarted; the case says so and is skipped.
var ErrUnsupported = errors.New("not supported by this broker")

// Lease is the lease of the consumers the suite opens, unless a case needs
// another: short, so a lease left to expire comes back within the case.
const Lease = 2 * time.Second

// Run runs the conformance suite on h, each case in parallel with its own
// database and broker.
func Run(t *testing.T, h Harness) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(newBundle(t, h))
		})
	}
}

// RunCase runs the case named name alone (while working on an adapter).
func RunCase(t *testing.T, h Harness, name string) {
	for _, c := range cases {
		if c.name == name {
			c.run(newBundle(t, h))
			return
		}
	}
	t.Fatalf("no case %q", name)
}

// Cases returns the names of the suite's cases.
func Cases() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name
	}
	return out
}
