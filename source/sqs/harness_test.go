package sqs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/mototest"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/source"
	sqssrc "github.com/settle/settle/source/sqs"
)

// TestMain runs the tests with one moto_server (the stand-in for SQS) for
// the package, each test on queues of its own.
func TestMain(m *testing.M) {
	os.Exit(dbtest.Main(m, bintest.Cleanup, mototest.Close))
}

// harness is one test's database, intake service and queue on moto_server.
type harness struct {
	t     *testing.T
	pool  *pgxpool.Pool
	svc   *intake.Service
	moto  *mototest.Server
	queue string
	api   *awssqs.Client
}

// newHarness sets up the intake service on pool and a fresh queue with the
// visibility timeout visibility.
func newHarness(t *testing.T, pool *pgxpool.Pool, visibility time.Duration) *harness {
	t.Helper()
	moto := mototest.Shared(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.NewService(intake.Config{DB: pool, Jobs: jobs.Inserter{Client: client}})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, pool: pool, svc: svc, moto: moto, queue: moto.Queue(t, visibility), api: moto.Client()}
}

// open opens an adapter on the harness's queue, with api as its client
// when not nil.
func (h *harness) open(cfg sqssrc.Config, api sqssrc.API) *sqssrc.Source {
	h.t.Helper()
	cfg.QueueURL = h.queue
	cfg.Client = api
	if cfg.Client == nil {
		cfg.Client = h.api
	}
	src, err := sqssrc.Open(ctxT(h.t, time.Minute), cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = src.Close() })
	return src
}

// loop returns a Loop over src with fast retries; mod adjusts its config.
func (h *harness) loop(src source.Source, in source.Intake, mod func(*source.Config)) *source.Loop {
	h.t.Helper()
	if in == nil {
		in = h.svc
	}
	cfg := source.Config{Source: src, Intake: in, RetryDelay: 50 * time.Millisecond, PauseMax: 500 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	l, err := source.NewLoop(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// publish sends data to the queue and returns its MessageId.
func (h *harness) publish(data []byte) string {
	h.t.Helper()
	out, err := h.api.SendMessage(ctxT(h.t, time.Minute), &awssqs.SendMessageInput{QueueUrl: aws.String(h.queue), MessageBody: aws.String(string(data))})
	if err != nil {
		h.t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

// publishEvent sends ev as JSON.
func (h *harness) publishEvent(ev intake.Event) string {
	h.t.Helper()
	return h.publish(mustJSON(h.t, ev))
}

// run runs the loops until the queue is drained, then stops them.
func (h *harness) run(within time.Duration, loops ...*source.Loop) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Go(func() { _ = l.Run(ctx) })
	}
	h.waitDrained(within)
	cancel()
	wg.Wait()
}

// depth returns the queue's visible (or delayed) and in-flight (received,
// not deleted) messages.
func (h *harness) depth() (visible, inFlight int) {
	h.t.Helper()
	v, f, err := depth(h.api, h.queue)
	if err != nil {
		h.t.Fatal(err)
	}
	return v, f
}

// depth reads the queue's visible (or delayed) and in-flight messages.
func depth(api *awssqs.Client, queue string) (visible, inFlight int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(queue),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, 0, err
	}
	v, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	d, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)])
	f, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return v + d, f, nil
}

// drained reports whether queue holds nothing, visible, delayed or in
// flight. The stand-in counts each attribute in turn, not at one instant:
// a message whose visibility timeout ends between two counts is in
// neither. So a reading of nothing is taken only when the next reading
// says nothing too (a message cannot change sides twice in a moment: its
// visibility lasts at least a second, and one received meanwhile is in
// flight).
func drained(api *awssqs.Client, queue string) (bool, string, error) {
	for range 2 {
		v, f, err := depth(api, queue)
		if err != nil {
			return false, "", err
		}
		if v != 0 || f != 0 {
			return false, fmt.Sprintf("%d visible, %d in flight", v, f), nil
		}
	}
	return true, "drained", nil
}

// waitDrained waits until the queue holds nothing, visible or in flight:
// every message was deleted.
func (h *harness) waitDrained(within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state, err := drained(h.api, h.queue)
		if err != nil {
			h.t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("not drained after %s: %s", within, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// count runs a count(*) query.
func (h *harness) count(query string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.pool.QueryRow(ctxT(h.t, 30*time.Second), query, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// checkOnce fails the test unless each of ids has exactly one receipt,
// one settlement, one creation transition and one send job, and nothing
// else was created.
func (h *harness) checkOnce(ids []string) {
	h.t.Helper()
	var settlements, receipts, creations, sends, distinct int
	err := h.pool.QueryRow(ctxT(h.t, 30*time.Second), `SELECT
		(SELECT count(*) FROM settlements), (SELECT count(*) FROM settlement_receipts),
		(SELECT count(*) FROM settlement_transitions WHERE from_state IS NULL),
		(SELECT count(*) FROM river_job WHERE kind = 'send_instruction'),
		(SELECT count(*) FROM settlements WHERE settlement_id = ANY($1))`, ids).
		Scan(&settlements, &receipts, &creations, &sends, &distinct)
	if err != nil {
		h.t.Fatal(err)
	}
	n := len(ids)
	if settlements != n || receipts != n || creations != n || sends != n || distinct != n {
		h.t.Fatalf("settlements=%d receipts=%d creations=%d send jobs=%d of the expected=%d, want %d each",
			settlements, receipts, creations, sends, distinct, n)
	}
}

// ctxT returns a context ending after d or with the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// event returns a valid event number i of a run named prefix.
func event(prefix string, i int) intake.Event {
	return intake.Event{
		SettlementID: fmt.Sprintf("%s-%04d", prefix, i),
		AccountID:    "acc-1",
		AmountCents:  int64(100 + i),
		Currency:     "EUR",
		Beneficiary:  fmt.Sprintf("bene-%d", i),
		EventID:      fmt.Sprintf("%s-evt-%d", prefix, i),
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = event(prefix, i).SettlementID
	}
	return out
}
