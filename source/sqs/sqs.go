// Package sqs is the Amazon SQS adapter of the event sources (DESIGN.md
// section 18): long-polled receives of up to 10 messages each (several per
// fetch, to fill the loop's batch), the visibility timeout as the lease
// (extended while a batch is in work, set to the retry delay to give a
// message back), DeleteMessageBatch only after the outcome committed. The
// engine loop (package source) drives it.
//
// It never creates or configures a queue: a dead-letter queue and its
// redrive policy are the queue's own business (settle rejects a message it
// can never accept itself, into intake_rejects, and deletes it), and a
// redrive with a low maxReceiveCount would move a message away while its
// database is down.
package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/settle/settle/source"
)

// Kind is the source kind of SQS in intake_rejects and the metrics.
const Kind = "sqs"

// Defaults of Config.
const (
	// DefaultVisibility is the lease of a received message (the visibility
	// timeout asked for on receive): not deleted and not kept alive for
	// this long, it is delivered again.
	DefaultVisibility = 30 * time.Second
	// DefaultWait is how long a receive waits for a first message (long
	// polling; SQS counts it in whole seconds, 1 to 20).
	DefaultWait = time.Second
	// DefaultReceivers is how many receives of up to 10 messages run at
	// once to fill a fetch after the first one returned.
	DefaultReceivers = 8
	// DefaultDeleteAttempts is how many times a delete of a committed
	// message is tried before it is left to a harmless redelivery.
	DefaultDeleteAttempts = 3
)

// MaxReceive is the most messages one SQS receive returns, and the most
// entries of one batch call.
const MaxReceive = 10

// API is the part of the SQS client the adapter uses; *sqs.Client
// satisfies it. Tests wrap it to make calls fail.
type API interface {
	ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, opts ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, opts ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error)
	DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, opts ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *awssqs.GetQueueAttributesInput, opts ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error)
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, opts ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, opts ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error)
}

var _ API = (*awssqs.Client)(nil)

// Config configures the adapter. QueueURL is required.
type Config struct {
	// QueueURL is the queue's URL (the SPEC sqs:QUEUE_URL).
	QueueURL string
	// Client is the SQS client (default: NewClient for QueueURL).
	Client API
	// Visibility is the lease of a received message (default
	// DefaultVisibility); whole seconds, at least one.
	Visibility time.Duration
	// Wait is how long a fetch waits for a first message (default
	// DefaultWait); whole seconds, 1 to 20.
	Wait time.Duration
	// Receivers is how many receives fill a fetch at once (default
	// DefaultReceivers).
	Receivers int
	// DeleteAttempts is how many times a failed delete is tried (default
	// DefaultDeleteAttempts).
	DeleteAttempts int
	// Logger receives the deletes that finally failed (default: discarded).
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Visibility <= 0 {
		c.Visibility = DefaultVisibility
	}
	if c.Wait <= 0 {
		c.Wait = DefaultWait
	}
	if c.Receivers <= 0 {
		c.Receivers = DefaultReceivers
	}
	if c.DeleteAttempts <= 0 {
		c.DeleteAttempts = DefaultDeleteAttempts
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Source is the SQS adapter; it satisfies source.Source.
type Source struct {
	cfg Config
	api API
	// deleteFailures counts the committed messages whose delete finally
	// failed: each comes back once more, as a replay.
	deleteFailures atomic.Int64
	closed         atomic.Bool
}

// errClosed is the error of every call after Close.
var errClosed = errors.New("the sqs source is closed")

// client returns the SQS client, or errClosed after Close.
func (s *Source) client() (API, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	return s.api, nil
}

var _ source.Source = (*Source)(nil)

// NewClient returns an SQS client configured as the AWS SDK's default: the
// standard credential chain, AWS_REGION, and AWS_ENDPOINT_URL_SQS (or
// AWS_ENDPOINT_URL) for the endpoint. When none of those names an endpoint
// and queueURL is not at amazonaws.com, the queue's own scheme and host are
// the endpoint (a local stand-in such as moto_server); the region then
// defaults to us-east-1, and on AWS it is read from the queue URL's host
// when AWS_REGION is unset.
func NewClient(ctx context.Context, queueURL string) (*awssqs.Client, error) {
	u, err := url.Parse(queueURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("error reading the queue URL %q: want https://sqs.REGION.amazonaws.com/ACCOUNT/NAME", queueURL)
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("error loading the AWS configuration: %w", err)
	}
	onAWS := strings.HasSuffix(u.Hostname(), ".amazonaws.com") || strings.HasSuffix(u.Hostname(), ".amazonaws.com.cn")
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
		if parts := strings.Split(u.Hostname(), "."); onAWS && len(parts) >= 4 && parts[0] == "sqs" {
			cfg.Region = parts[1]
		}
	}
	var opts []func(*awssqs.Options)
	if !onAWS {
		// Set only when neither the environment nor the shared
		// configuration named an endpoint (the SDK resolved it before).
		base := u.Scheme + "://" + u.Host
		opts = append(opts, func(o *awssqs.Options) {
			if o.BaseEndpoint == nil {
				o.BaseEndpoint = aws.String(base)
			}
		})
	}
	return awssqs.NewFromConfig(cfg, opts...), nil
}

// Open returns the adapter for cfg.QueueURL and reads the queue's
// attributes once, so that a wrong URL or missing credentials fail here.
func Open(ctx context.Context, cfg Config) (*Source, error) {
	cfg.defaults()
	if cfg.QueueURL == "" {
		return nil, errors.New("error opening the sqs source: no queue URL")
	}
	if cfg.Client == nil {
		c, err := NewClient(ctx, cfg.QueueURL)
		if err != nil {
			return nil, err
		}
		cfg.Client = c
	}
	s := &Source{cfg: cfg, api: cfg.Client}
	if _, err := s.attributes(ctx, types.QueueAttributeNameMessageRetentionPeriod); err != nil {
		return nil, err
	}
	return s, nil
}

// Kind returns "sqs".
func (s *Source) Kind() string { return Kind }

// DeleteFailures returns how many committed messages could not be deleted
// (each is delivered once more, and is a replay).
func (s *Source) DeleteFailures() int64 { return s.deleteFailures.Load() }

// seconds is d in whole seconds, rounded up, within [lo, hi].
func seconds(d time.Duration, lo, hi int32) int32 {
	n := int64(math.Ceil(d.Seconds()))
	return int32(min(max(n, int64(lo)), int64(hi)))
}

// receive is one ReceiveMessage of up to n messages, waiting wait.
func (s *Source) receive(ctx context.Context, n int, wait int32) ([]source.Message, error) {
	api, err := s.client()
	if err != nil {
		return nil, err
	}
	out, err := api.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.cfg.QueueURL),
		MaxNumberOfMessages:         int32(min(n, MaxReceive)),
		WaitTimeSeconds:             wait,
		VisibilityTimeout:           seconds(s.cfg.Visibility, 1, 12*3600),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return nil, fmt.Errorf("error receiving from %s: %w", s.cfg.QueueURL, err)
	}
	msgs := make([]source.Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		msgs = append(msgs, message(m))
	}
	return msgs, nil
}

// message turns an SQS message into a source.Message: the transport id is
// the MessageId, the delivery count the ApproximateReceiveCount, the
// handle the receipt handle.
func message(m types.Message) source.Message {
	out := source.Message{TransportID: aws.ToString(m.MessageId), Data: []byte(aws.ToString(m.Body)),
		Handle: aws.ToString(m.ReceiptHandle), Deliveries: 1}
	if n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil && n > 0 {
		out.Deliveries = n
	}
	return out
}

// Fetch long-polls for up to Wait for a first receive, then fills the
// batch up to max with receives of 10 that do not wait, Receivers at once,
// until max is reached, a round brings nothing, or a quarter of the
// visibility timeout has passed since the first receive: the loop starts
// extending the batch's leases only once Fetch returns, so a fill must not
// outlast them. A message received twice meanwhile (its visibility ran out
// all the same) is kept once, with its latest receipt handle.
func (s *Source) Fetch(ctx context.Context, max int) ([]source.Message, error) {
	msgs, err := s.receive(ctx, max, seconds(s.cfg.Wait, 1, 20))
	if err != nil || len(msgs) == 0 || len(msgs) >= max {
		return msgs, err
	}
	stop := time.Now().Add(s.cfg.Visibility / 4)
	seen := make(map[string]int, max)
	for i, m := range msgs {
		seen[m.TransportID] = i
	}
	for len(msgs) < max && time.Now().Before(stop) {
		left := max - len(msgs)
		n := min(s.cfg.Receivers, (left+MaxReceive-1)/MaxReceive)
		got := make([][]source.Message, n)
		var wg sync.WaitGroup
		for i := range n {
			size := min(MaxReceive, left-i*MaxReceive)
			wg.Go(func() {
				// A failure here leaves what was received, leased: it is
				// worked on.
				got[i], _ = s.receive(ctx, size, 0)
			})
		}
		wg.Wait()
		added := 0
		for _, g := range got {
			for _, m := range g {
				added++
				if i, dup := seen[m.TransportID]; dup {
					msgs[i] = m
					continue
				}
				seen[m.TransportID] = len(msgs)
				msgs = append(msgs, m)
			}
		}
		if added == 0 {
			break
		}
	}
	return msgs, nil
}

// handle is the receipt handle of m.
func handle(m source.Message) (string, error) {
	h, ok := m.Handle.(string)
	if !ok || h == "" {
		return "", fmt.Errorf("message %s was not received by the sqs source", m.TransportID)
	}
	return h, nil
}

// chunks calls f with msgs in slices of up to MaxReceive.
func chunks(msgs []source.Message, f func([]source.Message) error) error {
	var errs []error
	for i := 0; i < len(msgs); i += MaxReceive {
		if err := f(msgs[i:min(i+MaxReceive, len(msgs))]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setVisibility sets the visibility timeout of msgs to d, in batches of 10.
func (s *Source) setVisibility(ctx context.Context, msgs []source.Message, d time.Duration) error {
	vis := seconds(d, 0, 12*3600)
	return chunks(msgs, func(part []source.Message) error {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, 0, len(part))
		for i, m := range part {
			h, err := handle(m)
			if err != nil {
				return err
			}
			entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: vis})
		}
		api, err := s.client()
		if err != nil {
			return err
		}
		out, err := api.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(s.cfg.QueueURL), Entries: entries})
		if err != nil {
			return fmt.Errorf("error changing the visibility of %d messages: %w", len(entries), err)
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("error changing the visibility of %d of %d messages: %s", len(out.Failed), len(entries), failedText(out.Failed))
		}
		return nil
	})
}

// failedText is the first failure of a batch call, for a log line.
func failedText(failed []types.BatchResultErrorEntry) string {
	f := failed[0]
	return fmt.Sprintf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
}

// Extend sets the visibility timeout of msgs to Visibility again from now
// (ChangeMessageVisibilityBatch), so that a batch in work is not delivered
// to another consumer.
func (s *Source) Extend(ctx context.Context, msgs []source.Message) error {
	return s.setVisibility(ctx, msgs, s.cfg.Visibility)
}

// GiveBack sets the visibility timeout of msgs to delay: SQS delivers them
// again after it.
func (s *Source) GiveBack(ctx context.Context, msgs []source.Message, delay time.Duration) error {
	return s.setVisibility(ctx, msgs, delay)
}

// Ack deletes msgs (DeleteMessageBatch, 10 at a time). Entries that fail
// for a reason of SQS's own (not the sender's) are tried again, up to
// DeleteAttempts in all; a message whose delete finally fails is logged and
// counted (DeleteFailures) and returned in the error: it becomes visible
// again when its lease ends and is then a replay.
func (s *Source) Ack(ctx context.Context, msgs []source.Message) error {
	var left atomic.Int64
	err := chunks(msgs, func(part []source.Message) error {
		n, err := s.deleteChunk(ctx, part)
		left.Add(int64(n))
		return err
	})
	if n := left.Load(); n > 0 {
		s.deleteFailures.Add(n)
		s.cfg.Logger.Warn("committed messages could not be deleted; each will be delivered once more, as a replay",
			"source", Kind, "messages", n, "error", err)
	}
	return err
}

// deleteChunk deletes up to 10 messages, trying failed entries again, and
// returns how many could not be deleted.
func (s *Source) deleteChunk(ctx context.Context, part []source.Message) (int, error) {
	pending := map[string]string{} // entry id → receipt handle
	for i, m := range part {
		h, err := handle(m)
		if err != nil {
			return len(part), err
		}
		pending[strconv.Itoa(i)] = h
	}
	var last error
	gaveUp := 0
	wait := 100 * time.Millisecond
	for attempt := 1; attempt <= s.cfg.DeleteAttempts && len(pending) > 0; attempt++ {
		if attempt > 1 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return gaveUp + len(pending), fmt.Errorf("error deleting %d messages: %w", len(pending), ctx.Err())
			case <-t.C:
			}
			wait *= 2
		}
		entries := make([]types.DeleteMessageBatchRequestEntry, 0, len(pending))
		for id, h := range pending {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(id), ReceiptHandle: aws.String(h)})
		}
		api, err := s.client()
		if err != nil {
			return gaveUp + len(pending), err
		}
		out, err := api.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.cfg.QueueURL), Entries: entries})
		if err != nil {
			last = fmt.Errorf("error deleting %d messages: %w", len(entries), err)
			continue
		}
		for _, ok := range out.Successful {
			delete(pending, aws.ToString(ok.Id))
		}
		if len(out.Failed) > 0 {
			last = fmt.Errorf("error deleting %d of %d messages: %s", len(out.Failed), len(entries), failedText(out.Failed))
		}
		for _, f := range out.Failed {
			if f.SenderFault {
				// A receipt handle that is no longer valid (the lease
				// ended and someone else received the message) does not
				// become valid by asking again.
				delete(pending, aws.ToString(f.Id))
				gaveUp++
			}
		}
	}
	if gaveUp+len(pending) == 0 {
		return 0, nil
	}
	return gaveUp + len(pending), last
}

// attributes reads queue attributes.
func (s *Source) attributes(ctx context.Context, names ...types.QueueAttributeName) (map[string]string, error) {
	api, err := s.client()
	if err != nil {
		return nil, err
	}
	out, err := api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(s.cfg.QueueURL), AttributeNames: names})
	if err != nil {
		return nil, fmt.Errorf("error reading the attributes of %s: %w", s.cfg.QueueURL, err)
	}
	return out.Attributes, nil
}

// Lag returns the queue's ApproximateNumberOfMessages: messages visible,
// waiting to be received.
func (s *Source) Lag(ctx context.Context) (int64, error) {
	a, err := s.attributes(ctx, types.QueueAttributeNameApproximateNumberOfMessages)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(a[string(types.QueueAttributeNameApproximateNumberOfMessages)], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("error reading ApproximateNumberOfMessages of %s: %w", s.cfg.QueueURL, err)
	}
	return n, nil
}

// Retention returns the queue's MessageRetentionPeriod (SQS keeps a
// message at most 14 days).
func (s *Source) Retention(ctx context.Context) (time.Duration, error) {
	a, err := s.attributes(ctx, types.QueueAttributeNameMessageRetentionPeriod)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(a[string(types.QueueAttributeNameMessageRetentionPeriod)], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("error reading MessageRetentionPeriod of %s: %w", s.cfg.QueueURL, err)
	}
	return time.Duration(n) * time.Second, nil
}

// Close ends the adapter's use of the queue: every later call fails, and
// the messages it holds come back when their visibility timeout ends.
func (s *Source) Close() error {
	s.closed.Store(true)
	return nil
}
