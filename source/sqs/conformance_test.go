package sqs_test

import (
	"context"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/settle/settle/internal/motoserver"
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
	ep, url := newEndpoint(t, moto.URL)
	return &sqsBroker{moto: moto, api: moto.Client(), queue: moto.Queue(t, sourcetest.Lease), ep: ep, epAPI: clientAt(url)}
}

// sqsBroker is one case's queue.
type sqsBroker struct {
	moto  *mototest.Server
	api   *awssqs.Client
	queue string
	// ep is the endpoint the consumers reach moto_server through, epAPI
	// its client.
	ep    *endpoint
	epAPI *awssqs.Client
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
	src, err := sqssrc.Open(ctx, sqssrc.Config{QueueURL: b.queue, Client: b.epAPI, Visibility: o.Lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// Drained: nothing visible, delayed or in flight (received, not deleted).
func (b *sqsBroker) Drained(t *testing.T) (bool, string) {
	ok, state, err := drained(b.api, b.queue)
	if err != nil {
		return false, err.Error()
	}
	return ok, state
}

// Expire does nothing: an SQS lease is the visibility timeout, a timer
// that runs out by itself when not extended.
func (b *sqsBroker) Expire(*testing.T, source.Source) {}

// Restart is the outage of the queue's endpoint: SQS is never restarted by
// its users, and moto_server (which keeps its queues in memory only) is
// not restarted either. Every consumer connection is cut and new ones are
// refused until a consumer has met the refusal; then the endpoint is back,
// the queue as it was.
func (b *sqsBroker) Restart(t *testing.T) error {
	b.ep.outage(t, time.Minute)
	return nil
}

// clientAt is an SQS client of the stand-in's credentials and region at
// endpoint.
func clientAt(endpoint string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region:       motoserver.Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(motoserver.AccessKey, motoserver.SecretKey, ""),
	})
}
