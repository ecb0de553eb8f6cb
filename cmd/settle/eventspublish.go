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
	fs.Func("events-publish", "publish every outcome event to this broker too (repeatable): nats, to the JetStream stream --events-stream on settle.events.<type>, the event id as message id, counted once the stream acknowledged it (SETTLE_EVENTS_PUBLISH: space-separated)", func(v string) error {
		specs := strings.Fields(v)
		if len(specs) == 0 {
			return errors.New("empty broker")
		}
		for _, spec := range specs {
			switch {
			case spec == "nats":
			case strings.HasPrefix(spec, "kafka://"):
				return errors.New("kafka publishing is not in this build yet (issue 26); nats is")
			default:
				return fmt.Errorf("unknown broker %q (want nats)", spec)
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

// open opens the broker sinks. done ends this worker's use of the
// embedded NATS server, if it used it, after closing the sinks.
func (p *eventsPublish) open(ctx context.Context, s Stdio, timeout time.Duration) ([]events.Sink, func(), error) {
	if len(p.specs) == 0 {
		return nil, func() {}, nil
	}
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
	return []events.Sink{sink}, func() {
		sink.Close()
		done()
	}, nil
}
