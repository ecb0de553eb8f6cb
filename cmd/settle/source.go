package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/settle/settle/internal/natsembed"
	"github.com/settle/settle/internal/pgembed"
	"github.com/settle/settle/internal/settlecmd/submit"
	"github.com/settle/settle/source"
	kafkasrc "github.com/settle/settle/source/kafka"
	natssrc "github.com/settle/settle/source/nats"
	sqssrc "github.com/settle/settle/source/sqs"
)

// specList is a repeatable flag of source SPECs (--source). A value may
// hold several SPECs separated by white space (SETTLE_SOURCE="nats sqs:…"):
// no SPEC contains a space.
type specList []string

func (l *specList) String() string { return strings.Join(*l, " ") }

func (l *specList) Set(v string) error {
	for _, spec := range strings.Fields(v) {
		if err := checkSpec(spec); err != nil {
			return err
		}
		*l = append(*l, spec)
	}
	return nil
}

// checkSpec refuses a SPEC settle cannot consume.
func checkSpec(spec string) error {
	switch {
	case spec == natssrc.Kind:
		return nil
	case strings.HasPrefix(spec, sqsPrefix):
		return checkSQSSpec(spec)
	case strings.HasPrefix(spec, kafkaPrefix):
		_, err := kafkasrc.ParseSpec(spec)
		return err
	default:
		return fmt.Errorf("unknown source %q (want nats, sqs:QUEUE_URL or kafka://HOST:PORT/TOPIC)", spec)
	}
}

// sqsPrefix starts the SPEC of an SQS queue: sqs:QUEUE_URL.
const sqsPrefix = "sqs:"

// checkSQSSpec refuses an sqs: SPEC whose queue URL is not an http(s) URL
// with a host and a path.
func checkSQSSpec(spec string) error {
	u, err := url.Parse(strings.TrimPrefix(spec, sqsPrefix))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(u.Path) < 2 {
		return fmt.Errorf("source %q: want sqs:QUEUE_URL, as https://sqs.REGION.amazonaws.com/ACCOUNT/NAME", spec)
	}
	return nil
}

// natsNames are the stream, subject and consumer flags.
type natsNames struct {
	stream, subject, consumer string
	lease                     time.Duration
	// logger receives what an adapter logs by itself (nil: nothing).
	logger *slog.Logger
}

func (n *natsNames) register(fs *flag.FlagSet, consumer bool) {
	fs.StringVar(&n.stream, "source-stream", natssrc.DefaultStream, "the JetStream stream of --source nats (created if absent, file storage)")
	fs.StringVar(&n.subject, "source-subject", natssrc.DefaultSubject, "the subject of that stream")
	if consumer {
		fs.StringVar(&n.consumer, "source-consumer", natssrc.DefaultConsumer, "the durable pull consumer of --source nats, shared by every worker")
		fs.DurationVar(&n.lease, "source-lease", natssrc.DefaultAckWait, "how long a delivered message stays leased to a worker without news (JetStream AckWait, the SQS visibility timeout of a receive, a Kafka member's session timeout); a batch in work is kept alive every third of it")
	}
}

// natsEnd is what a command does with the embedded NATS server when it
// ends (as clusterUse for the database).
type natsEnd = clusterUse

// resolveNATS returns NATS_URL, or the URL of the embedded server under
// $SETTLE_HOME/nats, started if needed. done ends this command's use of
// the embedded server as use says (ownCluster: stopped when this command
// started it and no other settle process uses it).
func resolveNATS(ctx context.Context, s Stdio, use natsEnd) (url string, done func(), err error) {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u, func() {}, nil
	}
	home, err := pgembed.DefaultHome()
	if err != nil {
		return "", nil, err
	}
	srv, err := natsembed.Ensure(ctx, natsembed.Options{Home: home, Logf: func(format string, args ...any) {
		fmt.Fprintf(s.Err, "settle: "+format+"\n", args...)
	}})
	if err != nil {
		return "", nil, err
	}
	return srv.URL(), func() { endNATSUse(ctx, s, srv, use) }, nil
}

// endNATSUse is done of resolveNATS for the embedded server srv.
func endNATSUse(ctx context.Context, s Stdio, srv *natsembed.Server, use natsEnd) {
	if !srv.Started {
		return
	}
	if use == ownCluster {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		stopped, err := srv.Release(stopCtx)
		switch {
		case err != nil:
			fmt.Fprintf(s.Err, "settle: error stopping the embedded NATS server: %v\n", err)
		case stopped:
			fmt.Fprintf(s.Err, "settle: stopped the embedded NATS server at %s (started for this command)\n", srv.Dir)
			return
		}
	}
	if found, running := natsembed.Find(srv.Home); running {
		fmt.Fprintf(s.Err, "settle: the embedded NATS server at %s is still running (pid %d); `settle db stop` stops it\n", found.Dir, found.PID)
	}
}

// openSources opens the sources of specs for a worker. done closes what
// the sources did not (the embedded server's use); the worker closes the
// sources themselves.
func openSources(ctx context.Context, s Stdio, specs []string, names natsNames, name string) ([]source.Source, func(), error) {
	var out []source.Source
	var dones []func()
	done := func() {
		for _, d := range dones {
			d()
		}
	}
	for _, spec := range specs {
		if strings.HasPrefix(spec, sqsPrefix) || strings.HasPrefix(spec, kafkaPrefix) {
			var src source.Source
			var err error
			if strings.HasPrefix(spec, sqsPrefix) {
				src, err = sqssrc.Open(ctx, sqssrc.Config{QueueURL: strings.TrimPrefix(spec, sqsPrefix), Visibility: names.lease, Logger: names.logger})
			} else {
				src, err = openKafkaSource(ctx, spec, names.lease, name)
			}
			if err != nil {
				for _, o := range out {
					_ = o.Close()
				}
				done()
				return nil, nil, err
			}
			out = append(out, src)
			continue
		}
		if spec != natssrc.Kind {
			done()
			return nil, nil, checkSpec(spec)
		}
		url, d, err := resolveNATS(ctx, s, shareCluster)
		if err != nil {
			done()
			return nil, nil, err
		}
		dones = append(dones, d)
		src, err := natssrc.Open(ctx, natssrc.Config{URL: url, Stream: names.stream, Subject: names.subject, Consumer: names.consumer, AckWait: names.lease, Name: name})
		if err != nil {
			for _, o := range out {
				_ = o.Close()
			}
			done()
			return nil, nil, err
		}
		out = append(out, src)
	}
	return out, done, nil
}

// cmdNATSServer runs the embedded JetStream server in the foreground
// (hidden: natsembed starts it, detached, on first use).
func cmdNATSServer(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet(natsembed.Subcommand, "--dir DIR [--port N]", `
Runs the embedded JetStream server on 127.0.0.1 with its store in DIR/store,
fsyncing every write, until SIGTERM or SIGINT or until DIR is removed. settle
starts it by itself (detached, under $SETTLE_HOME/nats) when a command needs
the nats source and NATS_URL is unset; `+"`settle db stop`"+` stops it.`, s)
	dir := fs.String("dir", "", "the server directory (required)")
	port := fs.Int("port", 0, "client port on 127.0.0.1 (0: a free one)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if *dir == "" || fs.NArg() > 0 {
		fs.Usage()
		return exitError
	}
	// SIGTERM ends it cleanly even when started by a parent that ignores it.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := natsembed.Serve(ctx, natsembed.ServeOptions{Dir: *dir, Port: *port}); err != nil {
		fmt.Fprintf(s.Err, "settle nats-server: %v\n", err)
		return exitError
	}
	return exitOK
}

// publishSummary is what `settle submit --source` did.
type publishSummary struct {
	Lines      int     `json:"lines"`
	Published  int     `json:"published"`
	Duplicates int     `json:"duplicates"`
	Invalid    int     `json:"invalid"`
	Errors     int     `json:"errors"`
	Seconds    float64 `json:"duration_seconds"`
}

// publishOptions configure publishLines.
type publishOptions struct {
	spec        string
	names       natsNames
	msgID       string // "fresh" or "event"
	concurrency int
	retryFor    time.Duration
	onLine      func()
}

// publishLines publishes every non-blank line of in as one message to the
// source, concurrency at a time, each retried for retryFor. A line over
// 64 KiB is not published (invalid).
func publishLines(ctx context.Context, s Stdio, in io.Reader, o publishOptions) (publishSummary, error) {
	start := time.Now()
	var sum publishSummary
	pub, done, err := openPublisher(ctx, s, o)
	if err != nil {
		return sum, err
	}
	defer done()

	type line struct {
		n    int
		data []byte
	}
	lines := make(chan line)
	var mu sync.Mutex
	count := func(f func()) {
		mu.Lock()
		f()
		mu.Unlock()
		if o.onLine != nil {
			o.onLine()
		}
	}
	var wg sync.WaitGroup
	for range o.concurrency {
		wg.Go(func() {
			for l := range lines {
				id := messageID(l.data, o.msgID)
				res, err := publishRetrying(ctx, pub, l.data, id, o.retryFor)
				count(func() {
					switch {
					case err != nil:
						sum.Errors++
						fmt.Fprintf(s.Err, "line %d: error: %v\n", l.n, err)
					case res.Duplicate:
						sum.Duplicates++
						fmt.Fprintf(s.Err, "line %d: dropped by JetStream as a duplicate of message id %q (settle never sees it)\n", l.n, id)
					default:
						sum.Published++
					}
				})
			}
		})
	}
	readErr := submit.ReadLines(in, func(n int, data []byte, tooLong bool) bool {
		sum.Lines++
		if tooLong {
			count(func() {
				sum.Invalid++
				fmt.Fprintf(s.Err, "line %d: invalid: over %d bytes, not published\n", n, submit.MaxLineBytes)
			})
			return true
		}
		select {
		case lines <- line{n: n, data: append([]byte(nil), data...)}:
			return true
		case <-ctx.Done():
			return false
		}
	})
	close(lines)
	wg.Wait()
	sum.Seconds = time.Since(start).Seconds()
	if readErr != nil {
		return sum, fmt.Errorf("error reading the events: %w", readErr)
	}
	return sum, nil
}

// messageID is the JetStream message id of a line: a fresh one, or with
// mode "event" the event's settlement_id (its business id), so that
// JetStream drops a second publish of it, whatever its payload, within its
// duplicate window.
func messageID(line []byte, mode string) string {
	if mode == "event" {
		var ev struct {
			SettlementID string `json:"settlement_id"`
		}
		if json.Unmarshal(line, &ev) == nil && ev.SettlementID != "" {
			return ev.SettlementID
		}
	}
	return uuid.NewString()
}

// publisher is the producer's side of a source: Publish sends one message
// under the message id id and says whether the broker dropped it as a
// duplicate.
type publisher interface {
	Publish(ctx context.Context, data []byte, id string) (published, error)
}

// published is a broker's answer to one publish.
type published struct {
	// Duplicate is true when the broker dropped the message as a
	// duplicate of an earlier one with the same message id.
	Duplicate bool
}

// natsPublisher publishes to JetStream.
type natsPublisher struct{ *natssrc.Publisher }

func (p natsPublisher) Publish(ctx context.Context, data []byte, id string) (published, error) {
	res, err := p.Publisher.Publish(ctx, data, id)
	return published{Duplicate: res.Duplicate}, err
}

// sqsPublisher sends to an SQS queue, which has no message id of the
// producer's but the deduplication id of a FIFO queue.
type sqsPublisher struct{ *sqssrc.Publisher }

func (p sqsPublisher) Publish(ctx context.Context, data []byte, id string) (published, error) {
	_, err := p.Publisher.Publish(ctx, data, id)
	return published{}, err
}

// openPublisher opens the publisher of o.spec; done ends its use.
func openPublisher(ctx context.Context, s Stdio, o publishOptions) (publisher, func(), error) {
	if strings.HasPrefix(o.spec, sqsPrefix) {
		pub, err := sqssrc.NewPublisher(ctx, strings.TrimPrefix(o.spec, sqsPrefix), nil)
		if err != nil {
			return nil, nil, err
		}
		return sqsPublisher{pub}, func() {}, nil
	}
	if strings.HasPrefix(o.spec, kafkaPrefix) {
		return openKafkaPublisher(ctx, o.spec)
	}
	url, done, err := resolveNATS(ctx, s, shareCluster)
	if err != nil {
		return nil, nil, err
	}
	pub, err := natssrc.NewPublisher(ctx, url, o.names.stream, o.names.subject)
	if err != nil {
		done()
		return nil, nil, err
	}
	return natsPublisher{pub}, func() { pub.Close(); done() }, nil
}

// publishRetrying publishes one message, retrying with growing waits for
// retryFor. Retries keep the message id, so JetStream stores the message
// once even when an acknowledgement was lost.
func publishRetrying(ctx context.Context, pub publisher, data []byte, id string, retryFor time.Duration) (published, error) {
	deadline := time.Now().Add(retryFor)
	wait := 100 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := pub.Publish(pctx, data, id)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
