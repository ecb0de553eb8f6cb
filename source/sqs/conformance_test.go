package sqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/settle/settle/internal/testsupport/mototest"
	"github.com/settle/settle/source"
	"github.com/settle/settle/source/sourcetest"
	sqssrc "github.com/settle/settle/source/sqs"
)

// TestConformance runs the sources' conformance suite on SQS, as
// moto_server (a stand-in, not SQS) serves it: each case on a queue of its
// own.
func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, sqsHarness{})
}

// sqsHarness makes a fresh queue on the package's moto_server per case.
type sqsHarness struct{}

func (sqsHarness) Kind() string { return sqssrc.Kind }

func (sqsHarness) Broker(t *testing.T) sourcetest.Broker {
	moto := mototest.Shared(t)
	return &sqsBroker{moto: moto, api: moto.Client(), queue: moto.Queue(t, sourcetest.Lease)}
}

// sqsBroker is one case's queue.
type sqsBroker struct {
	moto  *mototest.Server
	api   *awssqs.Client
	queue string
}

func (b *sqsBroker) Publish(t *testing.T, data []byte) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := b.api.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(b.queue), MessageBody: aws.String(string(data))})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

// Carries refuses what SQS refuses: an empty body, and bytes that are not
// UTF-8 (SQS takes only XML characters).
func (b *sqsBroker) Carries(data []byte) bool {
	return len(data) > 0 && utf8.Valid(data)
}

func (b *sqsBroker) Open(t *testing.T, o sourcetest.Options) source.Source {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, err := sqssrc.Open(ctx, sqssrc.Config{QueueURL: b.queue, Client: b.api, Visibility: o.Lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// Drained: nothing visible, delayed or in flight (received, not deleted).
func (b *sqsBroker) Drained(t *testing.T) (bool, string) {
	v, f, err := depth(b.api, b.queue)
	if err != nil {
		return false, err.Error()
	}
	return v == 0 && f == 0, fmt.Sprintf("%d visible, %d in flight", v, f)
}

// Expire does nothing: an SQS lease is the visibility timeout, a timer
// that runs out by itself when not extended.
func (b *sqsBroker) Expire(*testing.T, source.Source) {}

// Restart is not possible: moto_server keeps its queues in memory.
func (b *sqsBroker) Restart(*testing.T) error {
	return fmt.Errorf("%w: moto_server keeps its queues in memory only", sourcetest.ErrUnsupported)
}
