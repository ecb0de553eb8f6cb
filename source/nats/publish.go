package nats

import (
	"context"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes events to a stream's subject, the producer's side of
// the source (`settle submit --source nats`).
type Publisher struct {
	nc      *natsgo.Conn
	js      jetstream.JetStream
	subject string
}

// NewPublisher connects to url and makes sure the stream exists (created
// as Open creates it).
func NewPublisher(ctx context.Context, url, stream, subject string) (*Publisher, error) {
	if stream == "" {
		stream = DefaultStream
	}
	if subject == "" {
		subject = DefaultSubject
	}
	nc, js, err := ConnectJetStream(url, "settle-submit")
	if err != nil {
		return nil, err
	}
	if _, err := EnsureStream(ctx, js, stream, subject); err != nil {
		nc.Close()
		return nil, err
	}
	return &Publisher{nc: nc, js: js, subject: subject}, nil
}

// Published is the stream's answer to one publish.
type Published struct {
	// Sequence is the message's stream sequence (its transport id).
	Sequence uint64
	// Duplicate is true when JetStream dropped the message as a duplicate
	// of an earlier one with the same message id, within the stream's
	// duplicate window: settle never sees it, whatever its payload.
	Duplicate bool
}

// Publish publishes data and waits until the stream has stored it. msgID
// is the JetStream message id (Nats-Msg-Id); empty: none, so JetStream
// deduplicates nothing and settle decides by the business id.
func (p *Publisher) Publish(ctx context.Context, data []byte, msgID string) (Published, error) {
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	ack, err := p.js.Publish(ctx, p.subject, data, opts...)
	if err != nil {
		return Published{}, fmt.Errorf("error publishing to %s: %w", p.subject, err)
	}
	return Published{Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// Close closes the connection.
func (p *Publisher) Close() { p.nc.Close() }
