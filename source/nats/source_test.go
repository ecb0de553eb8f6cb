package nats_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/dbtest"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/natstest"
	"github.com/settle/settle/source"
	natssrc "github.com/settle/settle/source/nats"
)

// TestOutcomes drains a stream holding new events, their duplicates under
// new message ids, a conflicting payload and each kind of invalid message:
// one settlement per event, the duplicates replays, the conflict recorded,
// every invalid message in intake_rejects with its bytes and stream
// sequence, and the consumer ends with nothing pending.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, natstest.Start(t).URL)

	const n = 40
	for i := range n {
		h.publishEvent(event("ok", i))
	}
	for i := range 10 { // the same events again, each under a new message id
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
		"not utf-8":        []byte("{\"settlement_id\":\"\xff\"}"),
	}
	seqs := map[string]string{}
	for name, body := range invalid {
		seqs[name] = strconv.FormatUint(h.publish(body), 10)
	}

	m := metrics.NewUnregistered()
	src := h.open(natssrc.Config{})
	h.run(time.Minute, h.loop(src, nil, func(c *source.Config) { c.Metrics = m; c.BatchSize = 16 }))

	h.checkOnce(ids("ok", n))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != 10 {
		t.Errorf("replays recorded: %d, want 10", got)
	}
	if got := h.count(`SELECT count(*) FROM receipt_conflicts WHERE settlement_id = $1`, conflicting.SettlementID); got != 1 {
		t.Errorf("conflicts recorded: %d, want 1", got)
	}
	if got := h.count(`SELECT amount_cents FROM settlements WHERE settlement_id = $1`, conflicting.SettlementID); got != int(event("ok", 3).AmountCents) {
		t.Errorf("the conflicting payload changed the settlement: amount %d", got)
	}
	for name, body := range invalid {
		var raw []byte
		var reason, src string
		err := db.Pool.QueryRow(ctxT(t, 30*time.Second),
			`SELECT raw, reason, source FROM intake_rejects WHERE transport_id = $1`, seqs[name]).Scan(&raw, &reason, &src)
		if err != nil {
			t.Errorf("%s: no reject for stream sequence %s: %v", name, seqs[name], err)
			continue
		}
		if !bytes.Equal(raw, body) || src != "nats" || reason == "" {
			t.Errorf("%s: reject holds %d bytes (want %d, equal %v), source %q, reason %q", name, len(raw), len(body), bytes.Equal(raw, body), src, reason)
		}
	}
	if got := h.count(`SELECT count(*) FROM intake_rejects`); got != len(invalid) {
		t.Errorf("%d rejects, want %d", got, len(invalid))
	}
	want := map[string]float64{"created": n, "replayed": 10, "conflict": 1, "rejected": float64(len(invalid))}
	for outcome, v := range want {
		if got := testutil.ToFloat64(m.SourceMessages.WithLabelValues("nats", outcome)); got != v {
			t.Errorf("settle_source_messages_total{outcome=%q} = %v, want %v", outcome, got, v)
		}
	}
}

// lostAcks is a source whose first acknowledgements are lost: the broker
// never hears of them, and delivers the messages again once their lease
// expires.
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

// TestLostAckRedelivered loses the acknowledgement of a committed batch:
// JetStream delivers it again when the lease expires, and the events are
// replays and the rejects are not stored twice.
func TestLostAckRedelivered(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, natstest.Start(t).URL)
	for i := range 5 {
		h.publishEvent(event("lost", i))
	}
	h.publish([]byte(`not json`))

	src := &lostAcks{Source: h.open(natssrc.Config{AckWait: time.Second})}
	src.lose.Store(1)
	h.run(time.Minute, h.loop(src, nil, nil))

	h.checkOnce(ids("lost", 5))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != 5 {
		t.Errorf("replays: %d, want 5 (the redelivered batch)", got)
	}
	if got := h.count(`SELECT count(*) FROM intake_rejects`); got != 1 {
		t.Errorf("rejects: %d, want 1 (a redelivered reject is stored once)", got)
	}
}

// slowIntake holds every batch until release is closed, signalling each
// arrival on arrived.
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

// TestLeaseExpiresWhileSlow lets the lease of a batch expire while its
// database work is slow and its lease is not kept alive: JetStream delivers
// it to another consumer, which records it; the slow one then commits a
// replay. One settlement each, nothing pending.
func TestLeaseExpiresWhileSlow(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, natstest.Start(t).URL)
	for i := range 3 {
		h.publishEvent(event("slow", i))
	}
	slow := &slowIntake{Service: h.svc, arrived: make(chan struct{}, 1), release: make(chan struct{})}
	slowLoop := h.loop(h.open(natssrc.Config{AckWait: time.Second}), slow, func(c *source.Config) { c.LeaseEvery = time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = slowLoop.Run(ctx) })
	<-slow.arrived

	// The lease expires; another consumer gets the batch and records it.
	fast := h.loop(h.open(natssrc.Config{AckWait: time.Second}), nil, nil)
	fctx, fcancel := context.WithCancel(context.Background())
	var fwg sync.WaitGroup
	fwg.Go(func() { _ = fast.Run(fctx) })
	for h.count(`SELECT count(*) FROM settlements`) < 3 {
		time.Sleep(50 * time.Millisecond)
	}
	fcancel()
	fwg.Wait()
	close(slow.release)
	h.waitDrained(time.Minute)
	cancel()
	wg.Wait()

	h.checkOnce(ids("slow", 3))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got < 3 {
		t.Errorf("replays: %d, want at least 3 (the slow batch commits replays)", got)
	}
}

// TestLeaseKeptAlive keeps a slow batch's lease alive: no redelivery while
// it is in work, although its work lasts several times the lease.
func TestLeaseKeptAlive(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, natstest.Start(t).URL)
	for i := range 3 {
		h.publishEvent(event("alive", i))
	}
	slow := &slowIntake{Service: h.svc, arrived: make(chan struct{}, 1), release: make(chan struct{})}
	l := h.loop(h.open(natssrc.Config{AckWait: time.Second}), slow, func(c *source.Config) { c.LeaseEvery = 200 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(ctx) })
	<-slow.arrived
	time.Sleep(3 * time.Second) // three leases: each would have expired without the in-progress signals
	ci := natstest.ConsumerInfo(t, h.js, natssrc.DefaultStream, natssrc.DefaultConsumer)
	close(slow.release)
	h.waitDrained(time.Minute)
	cancel()
	wg.Wait()
	if ci.NumRedelivered != 0 || ci.NumAckPending != 3 {
		t.Errorf("while the batch was in work: %d redelivered, %d awaiting ack; want 0 and 3", ci.NumRedelivered, ci.NumAckPending)
	}
	h.checkOnce(ids("alive", 3))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != 0 {
		t.Errorf("replays: %d, want 0", got)
	}
}

// TestPoison makes one message fail for an unexpected reason (a trigger
// raises for its settlement_id): after --source-max-failures failures it
// is rejected as poison with its bytes, and the stream moves on.
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
	h := newHarness(t, db.Pool, natstest.Start(t).URL)
	poison := mustJSON(t, event("poison", 0))
	seq := h.publish(poison)
	for i := range 10 {
		h.publishEvent(event("good", i))
	}
	m := metrics.NewUnregistered()
	h.run(time.Minute, h.loop(h.open(natssrc.Config{}), nil, func(c *source.Config) { c.MaxFailures = 3; c.Metrics = m }))

	h.checkOnce(ids("good", 10))
	var raw []byte
	var reason string
	if err := db.Pool.QueryRow(ctxT(t, 30*time.Second), `SELECT raw, reason FROM intake_rejects WHERE source = 'nats' AND transport_id = $1`,
		strconv.FormatUint(seq, 10)).Scan(&raw, &reason); err != nil {
		t.Fatalf("no poison reject: %v", err)
	}
	if reason != source.ReasonPoison || !bytes.Equal(raw, poison) {
		t.Errorf("reject: reason %q, raw %q; want poison with the message's bytes", reason, raw)
	}
	if got := testutil.ToFloat64(m.SourceMessages.WithLabelValues("nats", "poison")); got != 1 {
		t.Errorf("poison counted %v times, want 1", got)
	}
}

// TestTwoWorkersOneConsumer runs two loops, each with its own connection,
// on one durable consumer, with duplicates in the stream: every event
// once, nothing pending.
func TestTwoWorkersOneConsumer(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	h := newHarness(t, db.Pool, natstest.Start(t).URL)
	const n = 300
	for i := range n {
		h.publishEvent(event("two", i))
		if i%5 == 0 {
			h.publishEvent(event("two", i))
		}
	}
	a := h.loop(h.open(natssrc.Config{Name: "a"}), nil, func(c *source.Config) { c.BatchSize = 20 })
	b := h.loop(h.open(natssrc.Config{Name: "b"}), nil, func(c *source.Config) { c.BatchSize = 20 })
	h.run(2*time.Minute, a, b)
	h.checkOnce(ids("two", n))
	if got := h.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != n/5 {
		t.Errorf("replays: %d, want %d", got, n/5)
	}
}

// TestJetStreamRestart restarts the JetStream server on its store while a
// stream is consumed: nothing lost, nothing applied twice.
func TestJetStreamRestart(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	h := newHarness(t, db.Pool, srv.URL)
	const n = 200
	for i := range n / 2 {
		h.publishEvent(event("restart", i))
	}
	l := h.loop(h.open(natssrc.Config{}), nil, func(c *source.Config) { c.BatchSize = 10 })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(ctx) })
	for h.count(`SELECT count(*) FROM settlements`) < 20 {
		time.Sleep(20 * time.Millisecond)
	}
	srv.Restart(t)
	for i := n / 2; i < n; i++ {
		h.publishEvent(event("restart", i))
	}
	h.waitDrained(2 * time.Minute)
	cancel()
	wg.Wait()
	h.checkOnce(ids("restart", n))
	if got := h.count(`SELECT count(*) FROM intake_rejects`); got != 0 {
		t.Errorf("%d rejects", got)
	}
}

// TestNewLoopNeedsSourceAndIntake checks the loop's required settings.
func TestNewLoopNeedsSourceAndIntake(t *testing.T) {
	t.Parallel()
	if _, err := source.NewLoop(source.Config{}); err == nil {
		t.Fatal("NewLoop without Source and Intake: no error")
	}
}
