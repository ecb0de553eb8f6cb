// Package natssink is the NATS JetStream sink of the outcome events
// (DESIGN.md section 19, `settle worker --events-publish nats`): each event
// is published to settle.events.<type> on a stream it creates if absent,
// with the event id as the JetStream message id, and counts as delivered
// only once the stream has acknowledged it. The relay (package events)
// decides what to publish and when, so a settlement's events reach the
// stream in order; a publish repeated after a crash carries the same
// message id and the stream drops it within its duplicate window.
//
// It shares its connection code with the JetStream source (source/nats)
// and never logs a credential.
package natssink

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/settle/settle/events"
	natssrc "github.com/settle/settle/source/nats"
)

// Defaults of Config.
const (
	// DefaultStream is the stream the events are published to.
	DefaultStream = "SETTLE_EVENTS"
	// SubjectPrefix starts every event's subject: settle.events.<type>,
	// e.g. settle.events.settlement.confirmed.
	SubjectPrefix = "settle.events."
	// DefaultTimeout bounds one publish, the stream's acknowledgement
	// included.
	DefaultTimeout = 10 * time.Second
	// DefaultDuplicates is the stream's duplicate window when settle
	// creates it: a message id published again within it is dropped. It
	// covers a retry after a crash or a lost acknowledgement many times
	// over (retries are at most --events-retry-max apart); a consumer
	// still deduplicates by the message id, as after `settle events
	// redeliver`.
	DefaultDuplicates = time.Hour
)

// Headers the sink sets on each message besides Nats-Msg-Id.
const (
	HeaderEventID      = "Settle-Event-Id"
	HeaderSettlementID = "Settle-Settlement-Id"
	HeaderType         = "Settle-Event-Type"
)

// Config configures Open. URL is required.
type Config struct {
	// URL is the NATS server (--events-nats-url, NATS_URL, or the
	// embedded server's).
	URL string
	// Stream is the stream (default DefaultStream), created if absent on
	// settle.events.> with file storage.
	Stream string
	// Timeout bounds one publish (default DefaultTimeout).
	Timeout time.Duration
	// Name is the connection's name, shown by the server.
	Name string
}

// Sink publishes outcome events to JetStream; it satisfies events.Sink.
type Sink struct {
	nc      *natsgo.Conn
	js      jetstream.JetStream
	stream  string
	timeout time.Duration
}

var _ events.Sink = (*Sink)(nil)

// Open connects to cfg.URL (reconnecting for ever) and makes sure the
// stream exists.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	if cfg.URL == "" {
		return nil, errors.New("error opening the nats events sink: no URL")
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Name == "" {
		cfg.Name = "settle-events"
	}
	nc, js, err := natssrc.ConnectJetStream(cfg.URL, cfg.Name)
	if err != nil {
		return nil, err
	}
	if err := ensureStream(ctx, js, cfg.Stream); err != nil {
		nc.Close()
		return nil, err
	}
	return &Sink{nc: nc, js: js, stream: cfg.Stream, timeout: cfg.Timeout}, nil
}

// ensureStream creates the events' stream if absent: every subject under
// settle.events., file storage, kept by limits (consumers read it; nothing
// removes a message when one acknowledges it), the duplicate window
// DefaultDuplicates. An existing stream is used as it is.
func ensureStream(ctx context.Context, js jetstream.JetStream, name string) error {
	_, err := js.Stream(ctx, name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("error looking up stream %s: %w", name, err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Subjects:    []string{SubjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  DefaultDuplicates,
		Description: "settle's outcome events (DESIGN.md section 19)",
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("error creating stream %s on %s>: %w", name, SubjectPrefix, err)
	}
	return nil
}

// Name is "nats:<stream>": deliveries follow the stream, whichever server
// URL reaches it.
func (s *Sink) Name() string { return "nats:" + s.stream }

// Subject is the subject of an event of type typ.
func Subject(typ string) string { return SubjectPrefix + typ }

// Deliver publishes e and waits for the stream's acknowledgement; only
// that delivers it. An acknowledgement that the message id is a duplicate
// delivers it too: the stream has it already.
func (s *Sink) Deliver(ctx context.Context, e events.Event) events.Result {
	body, err := e.Body()
	if err != nil {
		return events.Result{Err: fmt.Errorf("error encoding event %s: %w", e.ID, err)}
	}
	msg := natsgo.NewMsg(Subject(e.Type))
	msg.Data = body
	msg.Header.Set(HeaderEventID, e.ID)
	msg.Header.Set(HeaderSettlementID, e.SettlementID)
	msg.Header.Set(HeaderType, e.Type)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(e.ID), jetstream.WithExpectStream(s.stream))
	if err != nil {
		return events.Result{Err: fmt.Errorf("error publishing event %s to %s: %w", e.ID, msg.Subject, err)}
	}
	detail := fmt.Sprintf("stream %s sequence %d", ack.Stream, ack.Sequence)
	if ack.Duplicate {
		detail += " (a duplicate: the stream had it)"
	}
	return events.Result{Body: detail}
}

// Close closes the connection.
func (s *Sink) Close() { s.nc.Close() }

// Redact is a NATS URL without its user information, for messages.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}
