package sqs_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/dbtest"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/source"
	sqssrc "github.com/settle/settle/source/sqs"
)

// TestOutcomes drains a queue holding new events, their duplicates (each
// a message of its own), a conflicting payload and each kind of invalid
// message SQS accepts: one settlement per event, the duplicates replays,
// the conflict recorded, every invalid message in intake_rejects with its
// bytes and MessageId, and the queue empty.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, 30*time.Second)

	const n = 40
	for i := range n {
		h.publishEvent(event("ok", i))
	}
	for i := range 10 {
		h.publishEvent(event("ok", i))
	}
	conflicting := event("ok", 3)
	conflicting.AmountCents++
	h.publishEvent(conflicting)

	tooOld := event("old", 0)
	tooOld.OccurredAt = time.Now().Add(-800 * time.Hour)
	huge := event("huge", 0)
	huge.Beneficiary = strings.Repeat("b", intake.MaxEventBytes)
	invalid := map[string][]byte{
		"malformed":        []byte(`{"settlement_id": "x"`),
		"not an object":    []byte(`[1,2,3]`),
		"bad amount":       []byte(`{"settlement_id":"bad-1","account_id":"a","amount_cents":"12","currency":"EUR","beneficiary":"b"}`),
		"unknown currency": []byte(`{"settlement_id":"bad-2","account_id":"a","amount_cents":12,"currency":"XQZ","beneficiary":"b"}`),
		"missing field":    []byte(`{"settlement_id":"bad-3","amount_cents":12,"currency":"EUR","beneficiary":"b"}`),
		"too old":          mustJSON(t, tooOld),
		"too large":        mustJSON(t, huge),
	}
	msgIDs := map[string]string{}
	for name, body := range invalid {
		msgIDs[name] = h.publish(body)
	}

	m := metrics.NewUnregistered()
	src := h.open(sqssrc.Config{}, nil)
	h.run(time.Minute, h.loop(src, nil, func(c *source.Config) { c.Metrics = m; c.BatchSize = 16 }))

	h.checkOnce(ids("ok", n))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != 10 {
		t.Errorf("replays recorded: %d, want 10", got)
	}
	if got := h.count(`SELECT count(*) FROM receipt_conflicts WHERE settlement_id = $1`, conflicting.SettlementID); got != 1 {
		t.Errorf("conflicts recorded: %d, want 1", got)
	}
	for name, body := range invalid {
		var raw []byte
		var reason, src string
		err := db.Pool.QueryRow(ctxT(t, 30*time.Second),
			`SELECT raw, reason, source FROM intake_rejects WHERE transport_id = $1`, msgIDs[name]).Scan(&raw, &reason, &src)
		if err != nil {
			t.Errorf("%s: no reject for MessageId %s: %v", name, msgIDs[name], err)
			continue
		}
		if !bytes.Equal(raw, body) || src != "sqs" || reason == "" {
			t.Errorf("%s: reject holds %d bytes (want %d, equal %v), source %q, reason %q", name, len(raw), len(body), bytes.Equal(raw, body), src, reason)
		}
	}
	if got := h.count(`SELECT count(*) FROM intake_rejects`); got != len(invalid) {
		t.Errorf("%d rejects, want %d", got, len(invalid))
	}
	want := map[string]float64{"created": n, "replayed": 10, "conflict": 1, "rejected": float64(len(invalid))}
	for outcome, v := range want {
		if got := testutil.ToFloat64(m.SourceMessages.WithLabelValues("sqs", outcome)); got != v {
			t.Errorf("settle_source_messages_total{outcome=%q} = %v, want %v", outcome, got, v)
		}
	}
}

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

// lostAcks is a source whose first acknowledgements are lost: the
// messages come back once their visibility timeout ends.
type lostAcks struct {
	source.Source
	lose atomic.Int64
}

func (s *lostAcks) Ack(ctx context.Context, msgs []source.Message) error {
	if s.lose.Add(-1) >= 0 {
		return nil
	}
	return s.Source.Ack(ctx, msgs)
}

// TestLostAckRedelivered loses the delete of a committed batch: SQS
// delivers it again when the visibility timeout ends, and the events are
// replays and the reject is not stored twice.
func TestLostAckRedelivered(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, time.Second)
	for i := range 5 {
		h.publishEvent(event("lost", i))
	}
	h.publish([]byte(`not json`))

	m := metrics.NewUnregistered()
	src := &lostAcks{Source: h.open(sqssrc.Config{Visibility: time.Second}, nil)}
	src.lose.Store(1)
	h.run(time.Minute, h.loop(src, nil, func(c *source.Config) { c.Metrics = m }))

	h.checkOnce(ids("lost", 5))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != 5 {
		t.Errorf("replays: %d, want 5 (the redelivered batch)", got)
	}
	if got := h.count(`SELECT count(*) FROM intake_rejects`); got != 1 {
		t.Errorf("rejects: %d, want 1 (a redelivered reject is stored once)", got)
	}
	if got := testutil.ToFloat64(m.SourceRedeliveries.WithLabelValues("sqs")); got != 6 {
		t.Errorf("redeliveries counted: %v, want 6", got)
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
	h := newHarness(t, db.Pool, time.Second)
	for i := range 25 {
		h.publishEvent(event("del", i))
	}
	flaky := &flakyDeletes{API: h.api, forever: map[string]bool{}}
	flaky.retryable.Store(2) // within DeleteAttempts (3): each is deleted by a retry
	api := &forgetOnReceive{flakyDeletes: flaky, marker: `"del-0007"`}
	src := h.open(sqssrc.Config{Visibility: time.Second}, api)
	h.run(time.Minute, h.loop(src, nil, func(c *source.Config) { c.BatchSize = 25 }))

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

// slowIntake holds the first batch until release is closed, signalling
// its arrival on arrived.
type slowIntake struct {
	*intake.Service
	arrived chan struct{}
	release chan struct{}
	held    atomic.Bool
}

func (s *slowIntake) SubmitBatchTx(ctx context.Context, evs []intake.Event, inTx intake.InTx) ([]intake.Outcome, error) {
	if s.held.CompareAndSwap(false, true) {
		s.arrived <- struct{}{}
		<-s.release
	}
	return s.Service.SubmitBatchTx(ctx, evs, inTx)
}

// TestLeaseKeptAlive keeps a slow batch's visibility timeout extended: no
// other consumer receives it while it is in work, although its work
// lasts several times the timeout.
func TestLeaseKeptAlive(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, time.Second)
	for i := range 3 {
		h.publishEvent(event("alive", i))
	}
	slow := &slowIntake{Service: h.svc, arrived: make(chan struct{}, 1), release: make(chan struct{})}
	l := h.loop(h.open(sqssrc.Config{Visibility: 2 * time.Second}, nil), slow, func(c *source.Config) { c.LeaseEvery = 500 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(ctx) })
	<-slow.arrived

	// Another consumer polls the queue for three visibility timeouts: it
	// must receive nothing.
	other := h.open(sqssrc.Config{Visibility: 2 * time.Second}, nil)
	deadline := time.Now().Add(6 * time.Second)
	var stolen []source.Message
	for time.Now().Before(deadline) {
		msgs, err := other.Fetch(ctxT(t, time.Minute), 10)
		if err != nil {
			t.Fatal(err)
		}
		stolen = append(stolen, msgs...)
	}
	close(slow.release)
	h.waitDrained(time.Minute)
	cancel()
	wg.Wait()
	if len(stolen) != 0 {
		t.Errorf("another consumer received %d messages of the batch in work", len(stolen))
	}
	h.checkOnce(ids("alive", 3))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != 0 {
		t.Errorf("replays: %d, want 0", got)
	}
}

// TestLeaseExpiresWhileSlow lets the visibility timeout of a batch end
// while its database work is slow and not kept alive: SQS delivers it to
// another consumer, which records it; the slow one then commits replays.
// One settlement each, the queue drained.
func TestLeaseExpiresWhileSlow(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, time.Second)
	for i := range 3 {
		h.publishEvent(event("slow", i))
	}
	slow := &slowIntake{Service: h.svc, arrived: make(chan struct{}, 1), release: make(chan struct{})}
	slowLoop := h.loop(h.open(sqssrc.Config{Visibility: time.Second}, nil), slow, func(c *source.Config) { c.LeaseEvery = time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = slowLoop.Run(ctx) })
	<-slow.arrived

	fast := h.loop(h.open(sqssrc.Config{Visibility: time.Second}, nil), nil, nil)
	fctx, fcancel := context.WithCancel(context.Background())
	var fwg sync.WaitGroup
	fwg.Go(func() { _ = fast.Run(fctx) })
	for h.count(`SELECT count(*) FROM settlements`) < 3 {
		time.Sleep(50 * time.Millisecond)
	}
	h.waitDrained(time.Minute) // the fast consumer deleted them
	fcancel()
	fwg.Wait()
	close(slow.release)
	cancel()
	wg.Wait()

	h.checkOnce(ids("slow", 3))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got < 3 {
		t.Errorf("replays: %d, want at least 3 (the slow batch commits replays)", got)
	}
	if v, f := h.depth(); v != 0 || f != 0 {
		t.Errorf("queue holds %d visible, %d in flight after the slow batch finished", v, f)
	}
}

// TestPoison makes one message fail for an unexpected reason (a trigger
// raises for its settlement_id): after --source-max-failures failures it
// is rejected as poison with its bytes, and the queue moves on.
func TestPoison(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	if _, err := db.Pool.Exec(ctxT(t, 30*time.Second), `
		CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.settlement_id = 'poison-0000' THEN RAISE EXCEPTION 'poisoned'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER poison BEFORE INSERT ON settlement_receipts FOR EACH ROW EXECUTE FUNCTION poison();`); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, db.Pool, 30*time.Second)
	poison := mustJSON(t, event("poison", 0))
	id := h.publish(poison)
	for i := range 10 {
		h.publishEvent(event("good", i))
	}
	m := metrics.NewUnregistered()
	h.run(time.Minute, h.loop(h.open(sqssrc.Config{}, nil), nil, func(c *source.Config) { c.MaxFailures = 3; c.Metrics = m }))

	h.checkOnce(ids("good", 10))
	var raw []byte
	var reason string
	if err := db.Pool.QueryRow(ctxT(t, 30*time.Second), `SELECT raw, reason FROM intake_rejects WHERE source = 'sqs' AND transport_id = $1`, id).Scan(&raw, &reason); err != nil {
		t.Fatalf("no poison reject: %v", err)
	}
	if reason != source.ReasonPoison || !bytes.Equal(raw, poison) {
		t.Errorf("reject: reason %q, raw %q; want poison with the message's bytes", reason, raw)
	}
	if got := testutil.ToFloat64(m.SourceMessages.WithLabelValues("sqs", "poison")); got != 1 {
		t.Errorf("poison counted %v times, want 1", got)
	}
}

// downIntake is an intake whose database is unreachable while down is
// set: every batch and every probe fails as intake does then.
type downIntake struct {
	*intake.Service
	down    atomic.Bool
	batches atomic.Int64
}

func (d *downIntake) SubmitBatchTx(ctx context.Context, evs []intake.Event, inTx intake.InTx) ([]intake.Outcome, error) {
	if d.down.Load() {
		d.batches.Add(1)
		return nil, intake.ErrUnavailable
	}
	return d.Service.SubmitBatchTx(ctx, evs, inTx)
}

func (d *downIntake) Ping(ctx context.Context) error {
	if d.down.Load() {
		return intake.ErrUnavailable
	}
	return d.Service.Ping(ctx)
}

// TestOutage makes the database unreachable while the queue fills: nothing
// is deleted or rejected, the loop stops fetching, and once the database is
// back it resumes by itself and records every event once.
func TestOutage(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, 30*time.Second)
	in := &downIntake{Service: h.svc}
	in.down.Store(true)
	for i := range 30 {
		h.publishEvent(event("out", i))
	}
	l := h.loop(h.open(sqssrc.Config{}, nil), in, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(ctx) })
	for in.batches.Load() < 1 {
		time.Sleep(20 * time.Millisecond)
	}
	v, f := h.depth()
	if v+f != 30 {
		t.Errorf("during the outage the queue holds %d visible and %d in flight, want all 30", v, f)
	}
	in.down.Store(false)
	h.waitDrained(time.Minute)
	cancel()
	wg.Wait()
	h.checkOnce(ids("out", 30))
	if got := h.count(`SELECT count(*) FROM intake_rejects`); got != 0 {
		t.Errorf("%d rejects for an outage", got)
	}
}

// TestTwoConsumers runs two loops, each with its own adapter, on one
// queue holding duplicates: every event once, the queue drained.
func TestTwoConsumers(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, 30*time.Second)
	const n = 200
	for i := range n {
		h.publishEvent(event("two", i))
		if i%5 == 0 {
			h.publishEvent(event("two", i))
		}
	}
	a := h.loop(h.open(sqssrc.Config{}, nil), nil, func(c *source.Config) { c.BatchSize = 20 })
	b := h.loop(h.open(sqssrc.Config{}, nil), nil, func(c *source.Config) { c.BatchSize = 20 })
	h.run(2*time.Minute, a, b)
	h.checkOnce(ids("two", n))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != n/5 {
		t.Errorf("replays: %d, want %d", got, n/5)
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
