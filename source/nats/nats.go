// Package nats is the NATS JetStream adapter of the event sources
// (DESIGN.md section 18): a durable pull consumer with explicit
// acknowledgement and unlimited redelivery on a stream it creates if
// absent, with file storage. The engine loop (package source) drives it.
package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/settle/settle/source"
)

// Defaults of Config (the worker's --source-stream, --source-subject and
// --source-consumer).
const (
	DefaultStream   = "SETTLE"
	DefaultSubject  = "settle.requests"
	DefaultConsumer = "settle-intake"
	// DefaultAckWait is the lease of a delivered message: unacknowledged
	// and not kept alive for this long, it is delivered again.
	DefaultAckWait = 30 * time.Second
	// DefaultFetchWait is how long a fetch waits for the first message.
	DefaultFetchWait = time.Second
	// DefaultMaxAckPending bounds the messages delivered and not yet
	// acknowledged, over every worker of the consumer.
	DefaultMaxAckPending = 20000
)

// Kind is the source kind of JetStream in intake_rejects and the metrics.
const Kind = "nats"

// Config configures the adapter. URL is required.
type Config struct {
	// URL is the NATS server (NATS_URL, or the embedded server's).
	URL string
	// Stream, Subject and Consumer name the stream, its subject and the
	// durable consumer (defaults above).
	Stream, Subject, Consumer string
	// AckWait is the lease of a delivered message (default DefaultAckWait).
	AckWait time.Duration
	// FetchWait is how long a fetch waits for a first message (default
	// DefaultFetchWait).
	FetchWait time.Duration
	// AckSync makes every acknowledgement wait for the server's
	// confirmation, one by one (tests). Otherwise a batch's
	// acknowledgements are sent without waiting (a lost one only causes a
	// redelivery, which is a replay).
	AckSync bool
	// Name is the client connection's name, shown by the server.
	Name string
}

func (c *Config) defaults() {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Subject == "" {
		c.Subject = DefaultSubject
	}
	if c.Consumer == "" {
		c.Consumer = DefaultConsumer
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.FetchWait <= 0 {
		c.FetchWait = DefaultFetchWait
	}
	if c.Name == "" {
		c.Name = "settle"
	}
}

// Source is the JetStream adapter; it satisfies source.Source.
type Source struct {
	cfg    Config
	nc     *natsgo.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	cons   jetstream.Consumer
}

var _ source.Source = (*Source)(nil)

// Connect opens a connection to url that reconnects for ever.
func Connect(url, name string) (*natsgo.Conn, error) {
	nc, err := natsgo.Connect(url, natsgo.Name(name), natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250*time.Millisecond), natsgo.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("error connecting to NATS at %s: %w", url, err)
	}
	return nc, nil
}

// ConnectJetStream is Connect and a JetStream context on the connection;
// the caller closes the connection.
func ConnectJetStream(url, name string) (*natsgo.Conn, jetstream.JetStream, error) {
	nc, err := Connect(url, name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("error opening JetStream: %w", err)
	}
	return nc, js, nil
}

// EnsureStream returns the stream named stream on subject, creating it if
// absent: file storage, work-queue retention (a message is removed once
// acknowledged), no age limit.
func EnsureStream(ctx context.Context, js jetstream.JetStream, stream, subject string) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, stream)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("error looking up stream %s: %w", stream, err)
	}
	st, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        stream,
		Subjects:    []string{subject},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.WorkQueuePolicy,
		Description: "settlement events consumed by settle (DESIGN.md section 18)",
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.Stream(ctx, stream) // another process created it meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("error creating stream %s on %s: %w", stream, subject, err)
	}
	return st, nil
}

// Open connects to cfg.URL, creates the stream if absent and creates or
// updates the durable consumer: explicit ack, MaxDeliver unlimited (with a
// limit JetStream would silently stop redelivering), lease AckWait.
func Open(ctx context.Context, cfg Config) (*Source, error) {
	cfg.defaults()
	if cfg.URL == "" {
		return nil, errors.New("error opening the nats source: no URL")
	}
	nc, err := Connect(cfg.URL, cfg.Name)
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, nc: nc}
	if err := s.setup(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return s, nil
}

func (s *Source) setup(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("error opening JetStream: %w", err)
	}
	s.js = js
	if s.stream, err = EnsureStream(ctx, js, s.cfg.Stream, s.cfg.Subject); err != nil {
		return err
	}
	s.cons, err = js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       s.cfg.Consumer,
		Description:   "settle intake: acknowledged only after the outcome commits",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxDeliver:    -1,
		FilterSubject: s.cfg.Subject,
		MaxAckPending: DefaultMaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("error creating consumer %s on stream %s: %w", s.cfg.Consumer, s.cfg.Stream, err)
	}
	return nil
}

// Kind returns "nats".
func (s *Source) Kind() string { return Kind }

// Conn returns the adapter's connection.
func (s *Source) Conn() *natsgo.Conn { return s.nc }

// Consumer returns the adapter's durable consumer (for its info).
func (s *Source) Consumer() jetstream.Consumer { return s.cons }

// Fetch waits up to FetchWait for a first message, then takes what else is
// waiting, up to max in all.
func (s *Source) Fetch(ctx context.Context, max int) ([]source.Message, error) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.FetchWait)
	defer cancel()
	first, err := s.cons.Fetch(1, jetstream.FetchContext(wctx))
	if err != nil {
		return nil, fmt.Errorf("error fetching from %s: %w", s.cfg.Consumer, err)
	}
	var msgs []source.Message
	for m := range first.Messages() {
		msgs = append(msgs, message(m))
	}
	if err := first.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, natsgo.ErrTimeout) && len(msgs) == 0 {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("error fetching from %s: %w", s.cfg.Consumer, ctx.Err())
		}
		return nil, fmt.Errorf("error fetching from %s: %w", s.cfg.Consumer, err)
	}
	if len(msgs) == 0 || max <= 1 {
		return msgs, nil
	}
	// A failure here leaves the first message, leased: it is worked on.
	if rest, err := s.cons.FetchNoWait(max - 1); err == nil {
		for m := range rest.Messages() {
			msgs = append(msgs, message(m))
		}
	}
	return msgs, nil
}

// message turns a JetStream delivery into a source.Message: the transport
// id is the stream sequence, the delivery count JetStream's.
func message(m jetstream.Msg) source.Message {
	out := source.Message{Data: m.Data(), Handle: m, Deliveries: 1}
	if md, err := m.Metadata(); err == nil {
		out.TransportID = strconv.FormatUint(md.Sequence.Stream, 10)
		out.Deliveries = int(md.NumDelivered)
	}
	return out
}

func handle(m source.Message) (jetstream.Msg, error) {
	jm, ok := m.Handle.(jetstream.Msg)
	if !ok {
		return nil, fmt.Errorf("message %s was not fetched by the nats source", m.TransportID)
	}
	return jm, nil
}

// Extend sends an in-progress signal for each message: JetStream restarts
// its AckWait.
func (s *Source) Extend(ctx context.Context, msgs []source.Message) error {
	return s.each(ctx, msgs, func(m jetstream.Msg) error { return m.InProgress() })
}

// Ack acknowledges msgs (see Config.AckSync).
func (s *Source) Ack(ctx context.Context, msgs []source.Message) error {
	if s.cfg.AckSync {
		for _, sm := range msgs {
			m, err := handle(sm)
			if err != nil {
				return err
			}
			if err := m.DoubleAck(ctx); err != nil {
				return fmt.Errorf("error acknowledging message %s: %w", sm.TransportID, err)
			}
		}
		return nil
	}
	// Not flushed: the client sends them within moments, and the loop
	// goes on meanwhile. An acknowledgement lost with the connection only
	// makes JetStream deliver the message again, and it is a replay.
	var errs []error
	for _, sm := range msgs {
		m, err := handle(sm)
		if err == nil {
			err = m.Ack()
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// GiveBack naks msgs with delay: JetStream delivers them again after it.
func (s *Source) GiveBack(ctx context.Context, msgs []source.Message, delay time.Duration) error {
	return s.each(ctx, msgs, func(m jetstream.Msg) error { return m.NakWithDelay(delay) })
}

// each applies f to every message, then flushes the connection so the
// server has them all when it returns.
func (s *Source) each(ctx context.Context, msgs []source.Message, f func(jetstream.Msg) error) error {
	var errs []error
	for _, sm := range msgs {
		m, err := handle(sm)
		if err == nil {
			err = f(m)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.nc.FlushWithContext(fctx); err != nil {
		errs = append(errs, fmt.Errorf("error flushing to NATS: %w", err))
	}
	return errors.Join(errs...)
}

// Lag returns the consumer's NumPending: messages not yet delivered.
func (s *Source) Lag(ctx context.Context) (int64, error) {
	info, err := s.cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("error reading consumer %s: %w", s.cfg.Consumer, err)
	}
	return int64(info.NumPending), nil
}

// Retention returns the stream's MaxAge (0: no age limit).
func (s *Source) Retention(ctx context.Context) (time.Duration, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("error reading stream %s: %w", s.cfg.Stream, err)
	}
	return info.Config.MaxAge, nil
}

// Close closes the connection.
func (s *Source) Close() error {
	s.nc.Close()
	return nil
}
