package sqs_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/source"
	sqssrc "github.com/settle/settle/source/sqs"
)

// TestFetchFillsBatch checks that one fetch takes more than one receive's
// 10 messages, and counts deliveries by ApproximateReceiveCount.
func TestFetchFillsBatch(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, 30*time.Second)
	for i := range 35 {
		h.publishEvent(event("fill", i))
	}
	src := h.open(sqssrc.Config{}, nil)
	ctx := ctxT(t, time.Minute)
	var got []source.Message
	for len(got) < 35 {
		msgs, err := src.Fetch(ctx, 35-len(got))
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			t.Fatalf("fetch brought nothing after %d of 35", len(got))
		}
		got = append(got, msgs...)
	}
	if len(got) != 35 {
		t.Fatalf("fetched %d, want 35", len(got))
	}
	seen := map[string]bool{}
	for _, m := range got {
		if m.Deliveries != 1 || m.TransportID == "" || seen[m.TransportID] {
			t.Fatalf("message %q: %d deliveries (want 1), seen before %v", m.TransportID, m.Deliveries, seen[m.TransportID])
		}
		seen[m.TransportID] = true
	}
	// Given back at once, each comes again with a receive count of 2.
	if err := src.GiveBack(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	again, err := src.Fetch(ctx, 10)
	if err != nil || len(again) == 0 {
		t.Fatalf("refetch: %d messages, %v", len(again), err)
	}
	for _, m := range again {
		if m.Deliveries != 2 {
			t.Errorf("message %s redelivered with %d deliveries, want 2", m.TransportID, m.Deliveries)
		}
	}
	if lag, err := src.Lag(ctx); err != nil || lag != int64(35-len(again)) {
		t.Errorf("lag %d (%v), want %d", lag, err, 35-len(again))
	}
	if ret, err := src.Retention(ctx); err != nil || ret != 4*24*time.Hour {
		t.Errorf("retention %s (%v), want the queue's default of 4 days", ret, err)
	}
}

// flakyDeletes fails entries of DeleteMessageBatch: the first entry of
// each of the first retryable calls with an error of SQS's own (tried
// again), and every entry of the settlement named forever with a sender's
// fault (not tried again).
type flakyDeletes struct {
	sqssrc.API
	retryable atomic.Int64
	calls     atomic.Int64
	forever   map[string]bool // receipt handles never deleted
	mu        sync.Mutex
}

func (f *flakyDeletes) DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, opts ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error) {
	f.calls.Add(1)
	var pass []types.DeleteMessageBatchRequestEntry
	var failed []types.BatchResultErrorEntry
	f.mu.Lock()
	for i, e := range in.Entries {
		switch {
		case f.forever[aws.ToString(e.ReceiptHandle)]:
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("made to fail"), SenderFault: true})
		case i == 0 && f.retryable.Add(-1) >= 0:
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("made to fail")})
		default:
			pass = append(pass, e)
		}
	}
	f.mu.Unlock()
	out := &awssqs.DeleteMessageBatchOutput{Failed: failed}
	if len(pass) > 0 {
		res, err := f.API.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: in.QueueUrl, Entries: pass}, opts...)
		if err != nil {
			return nil, err
		}
		out.Successful = res.Successful
		out.Failed = append(out.Failed, res.Failed...)
	}
	return out, nil
}

// forgetOnReceive marks for flakyDeletes the receipt handles of the
// messages whose body contains marker, on their first delivery only.
type forgetOnReceive struct {
	*flakyDeletes
	marker string
	once   atomic.Bool
}

func (f *forgetOnReceive) ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, opts ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	out, err := f.API.ReceiveMessage(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	for _, m := range out.Messages {
		if strings.Contains(aws.ToString(m.Body), f.marker) && f.once.CompareAndSwap(false, true) {
			f.mu.Lock()
			f.forever[aws.ToString(m.ReceiptHandle)] = true
			f.mu.Unlock()
		}
	}
	return out, nil
}

// TestPartialDeleteFailure fails part of DeleteMessageBatch: entries that
// failed on SQS's side are deleted by a retry; one whose delete finally
// fails is logged and counted, comes back when its visibility timeout
// ends, and is a replay. Every event once, the queue drained.
func TestPartialDeleteFailure(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, 2*time.Second)
	for i := range 25 {
		h.publishEvent(event("del", i))
	}
	flaky := &flakyDeletes{API: h.api, forever: map[string]bool{}}
	flaky.retryable.Store(2) // within DeleteAttempts (3): each is deleted by a retry
	api := &forgetOnReceive{flakyDeletes: flaky, marker: `"del-0007"`}
	src := h.open(sqssrc.Config{Visibility: 2 * time.Second}, api)
	// The leases are kept alive as the worker keeps them (every third of
	// the visibility timeout): only the message whose delete failed for
	// good may come back.
	h.run(time.Minute, h.loop(src, nil, func(c *source.Config) { c.BatchSize = 25; c.LeaseEvery = 2 * time.Second / 3 }))

	if flaky.retryable.Load() > 0 {
		t.Error("the failures of SQS's own were never made")
	}
	h.checkOnce(ids("del", 25))
	if got := src.DeleteFailures(); got != 1 {
		t.Errorf("delete failures counted: %d, want 1", got)
	}
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != 1 {
		t.Errorf("replays: %d, want 1 (only the message whose delete failed for good came back)", got)
	}
	if got := h.count(`SELECT replay_count FROM settlement_receipts WHERE settlement_id = 'del-0007'`); got != 1 {
		t.Errorf("del-0007 replayed %d times, want 1", got)
	}
}

// TestOpenRefusesMissingQueue checks that a wrong queue URL fails at Open.
func TestOpenRefusesMissingQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, dbtest.New(t).Pool, 30*time.Second)
	_, err := sqssrc.Open(ctxT(t, time.Minute), sqssrc.Config{QueueURL: h.queue + "-missing", Client: h.api})
	if err == nil {
		t.Fatal("Open of a queue that does not exist: no error")
	}
}
