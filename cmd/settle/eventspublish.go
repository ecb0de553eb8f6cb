package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/settle/settle/events"
	"github.com/settle/settle/events/kafkasink"
	"github.com/settle/settle/events/natssink"
)

// eventsPublish are the worker's broker sinks of the outcome events
// (--events-publish, DESIGN.md section 19).
type eventsPublish struct {
	specs   []string
	natsURL string
	stream  string
}

func (p *eventsPublish) register(fs *flag.FlagSet) {
	fs.Func("events-publish", "publish every outcome event to this broker too (repeatable): nats, to the JetStream stream --events-stream on settle.events.<type>, the event id as message id, counted once the stream acknowledged it; or kafka://HOST:PORT[,HOST:PORT…]/TOPIC, to that existing topic keyed by settlement id with an idempotent producer, counted once the broker acknowledged it (SETTLE_EVENTS_PUBLISH: space-separated)", func(v string) error {
		specs := strings.Fields(v)
		if len(specs) == 0 {
			return errors.New("empty broker")
		}
		for _, spec := range specs {
			switch {
			case spec == "nats":
			case strings.HasPrefix(spec, "kafka://"):
				if _, err := kafkasink.ParseSpec(spec); err != nil {
					return err
				}
			default:
				return fmt.Errorf("unknown broker %q (want nats or kafka://HOST:PORT/TOPIC)", spec)
			}
			if !slices.Contains(p.specs, spec) {
				p.specs = append(p.specs, spec)
			}
		}
		return nil
	})
	fs.StringVar(&p.natsURL, "events-nats-url", "", "the NATS server of --events-publish nats (default: NATS_URL, else the embedded JetStream server under $SETTLE_HOME/nats, started if needed)")
	fs.StringVar(&p.stream, "events-stream", natssink.DefaultStream, "the JetStream stream of --events-publish nats (created if absent on settle.events.>, file storage)")
}

// open opens the broker sinks. done closes them and ends this worker's
// use of the embedded NATS server, if it used it.
func (p *eventsPublish) open(ctx context.Context, s Stdio, timeout time.Duration) ([]events.Sink, func(), error) {
	var sinks []events.Sink
	var closers []func()
	done := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	for _, spec := range p.specs {
		var sink events.Sink
		var closeSink func()
		var err error
		if spec == "nats" {
			sink, closeSink, err = p.openNATS(ctx, s, timeout)
		} else {
			sink, closeSink, err = openKafkaSink(ctx, spec, timeout)
		}
		if err != nil {
			done()
			return nil, nil, err
		}
		sinks = append(sinks, sink)
		closers = append(closers, closeSink)
	}
	return sinks, done, nil
}

// openNATS opens the JetStream sink.
func (p *eventsPublish) openNATS(ctx context.Context, s Stdio, timeout time.Duration) (events.Sink, func(), error) {
	url, done := p.natsURL, func() {}
	if url == "" {
		var err error
		if url, done, err = resolveNATS(ctx, s, shareCluster); err != nil {
			return nil, nil, err
		}
	}
	sink, err := natssink.Open(ctx, natssink.Config{URL: url, Stream: p.stream, Timeout: timeout, Name: "settle-worker-events"})
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("--events-publish nats at %s: %w", natssink.Redact(url), err)
	}
	return sink, func() {
		sink.Close()
		done()
	}, nil
}

// openKafkaSink opens the Kafka sink of spec.
func openKafkaSink(ctx context.Context, spec string, timeout time.Duration) (events.Sink, func(), error) {
	sp, err := kafkasink.ParseSpec(spec)
	if err != nil {
		return nil, nil, err
	}
	sink, err := kafkasink.Open(ctx, kafkasink.Config{Brokers: sp.Brokers, Topic: sp.Topic, Timeout: timeout, Name: "settle-worker-events"})
	if err != nil {
		return nil, nil, fmt.Errorf("--events-publish %s: %w", spec, err)
	}
	return sink, sink.Close, nil
}
