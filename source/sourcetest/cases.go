package sourcetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/source"
)

// testCase is one case of the suite.
type testCase struct {
	name string
	run  func(b *bundle)
}

var cases = []testCase{
	{"publish_settle_once", publishSettleOnce},
	{"parallel_parts", parallelParts},
	{"redelivery", redelivery},
	{"lost_ack", lostAck},
	{"lease_expires_during_slow_batch", leaseExpires},
	{"lease_kept_alive", leaseKeptAlive},
	{"consumer_killed_mid_batch", killedMidBatch},
	{"poison", poison},
	{"two_consumers", twoConsumers},
	{"broker_restart", brokerRestart},
	{"database_outage", databaseOutage},
}

// publishSettleOnce drains a broker holding new events, their duplicates
// (each a message of its own), a conflicting payload and each kind of
// invalid message: one settlement per event, the duplicates replays, the
// conflict recorded, every invalid message in intake_rejects with its
// bytes and transport id, the metrics counted, the broker drained.
func publishSettleOnce(b *bundle) {
	t := b.t
	const n = 40
	for i := range n {
		b.publishEvent(Event("ok", i))
	}
	for i := range 10 {
		b.publishEvent(Event("ok", i))
	}
	conflicting := Event("ok", 3)
	conflicting.AmountCents++
	b.publishEvent(conflicting)
	invalid := map[string][]byte{
		"malformed":        []byte(`{"settlement_id": "x"`),
		"not an object":    []byte(`[1,2,3]`),
		"bad amount":       []byte(`{"settlement_id":"bad-1","account_id":"a","amount_cents":"12","currency":"EUR","beneficiary":"b"}`),
		"unknown currency": []byte(`{"settlement_id":"bad-2","account_id":"a","amount_cents":12,"currency":"XQZ","beneficiary":"b"}`),
		"missing field":    []byte(`{"settlement_id":"bad-3","amount_cents":12,"currency":"EUR","beneficiary":"b"}`),
		"too old":          mustJSON(t, tooOld()),
		"too large":        mustJSON(t, huge()),
		"not utf-8":        []byte("{\"settlement_id\":\"\xff\"}"),
		"empty":            {},
	}
	if c, ok := b.broker.(Carrier); ok {
		for name, body := range invalid {
			if !c.Carries(body) {
				t.Logf("%s: left out, the broker refuses such a body at the producer", name)
				delete(invalid, name)
			}
		}
	}
	tids := map[string]string{}
	for name, body := range invalid {
		tids[name] = b.broker.Publish(t, body)
	}

	m := metrics.NewUnregistered()
	b.drain(time.Minute, b.loop(b.open(Options{Name: "once"}), nil, func(c *source.Config) { c.Metrics = m; c.BatchSize = 16 }))

	b.checkOnce(IDs("ok", n))
	b.checkReplays(10, 0, "each duplicate published is a replay")
	if got := b.count(`SELECT count(*) FROM receipt_conflicts WHERE settlement_id = $1`, conflicting.SettlementID); got != 1 {
		t.Errorf("conflicts recorded: %d, want 1", got)
	}
	if got := b.count(`SELECT amount_cents FROM settlements WHERE settlement_id = $1`, conflicting.SettlementID); got != int(Event("ok", 3).AmountCents) {
		t.Errorf("the conflicting payload changed the settlement: amount %d", got)
	}
	for name, body := range invalid {
		var raw []byte
		var reason, kind string
		err := b.db.Pool.QueryRow(context.Background(),
			`SELECT raw, reason, source FROM intake_rejects WHERE transport_id = $1`, tids[name]).Scan(&raw, &reason, &kind)
		if err != nil {
			t.Errorf("%s: no reject for transport id %s: %v", name, tids[name], err)
			continue
		}
		if !bytes.Equal(raw, body) || kind != b.kind || reason == "" {
			t.Errorf("%s: reject holds %d bytes (want %d, equal %v), source %q, reason %q", name, len(raw), len(body), bytes.Equal(raw, body), kind, reason)
		}
	}
	if got := b.count(`SELECT count(*) FROM intake_rejects`); got != len(invalid) {
		t.Errorf("%d rejects, want %d", got, len(invalid))
	}
	want := map[string]float64{"created": n, "replayed": 10, "conflict": 1, "rejected": float64(len(invalid))}
	for outcome, v := range want {
		if got := testutil.ToFloat64(m.SourceMessages.WithLabelValues(b.kind, outcome)); got != v {
			t.Errorf("settle_source_messages_total{outcome=%q} = %v, want %v", outcome, got, v)
		}
	}
}

// parallelParts hands the loop one large fetched batch of independent
// events, copies of some (each a message of its own), a conflicting
// payload and invalid messages: it is recorded in Parallel transactions at
// once, and every outcome is the one a single transaction gives (the copy
// and the conflict of a settlement share its transaction, and are a
// replay and a conflict, never a second settlement), each message
// acknowledged only after its own transaction committed.
func parallelParts(b *bundle) {
	t := b.t
	const n, dups, parallel = 400, 40, 4
	for i := range n {
		ev := Event("par", i)
		ev.AccountID = fmt.Sprintf("acc-%d", i)
		b.publishEvent(ev)
	}
	for i := range dups {
		ev := Event("par", i*7)
		ev.AccountID = fmt.Sprintf("acc-%d", i*7)
		b.publishEvent(ev)
	}
	conflicting := Event("par", 5)
	conflicting.AccountID = "acc-5"
	conflicting.AmountCents++
	b.publishEvent(conflicting)
	rejected := b.broker.Publish(t, []byte(`{"settlement_id": "x"`))
	total := n + dups + 2

	// A lease long enough for the fetches of a slow stand-in: the case is
	// about the parts, not about leases.
	src := b.open(Options{Name: "parallel", Lease: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var msgs []source.Message
	for len(msgs) < total {
		got, err := src.Fetch(ctx, total-len(msgs))
		if err != nil {
			t.Fatalf("fetching the batch (%d of %d so far): %v", len(msgs), total, err)
		}
		msgs = append(msgs, got...)
	}
	in := &counting{Intake: b.svc}
	l := b.loop(src, in, func(c *source.Config) { c.Parallel = parallel })
	if res := l.Handle(ctx, msgs); res.Acked != len(msgs) || res.Outage {
		t.Fatalf("Handle of %d messages: %+v", len(msgs), res)
	}
	if got := in.calls.Load(); got != parallel {
		t.Errorf("the batch of %d was recorded in %d transactions, want %d", len(msgs), got, parallel)
	}
	b.drain(time.Minute, b.loop(src, nil, nil))

	b.checkOnce(IDs("par", n))
	b.checkReplays(dups, 0, "each copy published is a replay")
	if got := b.count(`SELECT count(*) FROM receipt_conflicts WHERE settlement_id = $1`, conflicting.SettlementID); got != 1 {
		t.Errorf("conflicts recorded: %d, want 1", got)
	}
	if got := b.count(`SELECT count(*) FROM intake_rejects WHERE transport_id = $1`, rejected); got != 1 {
		t.Errorf("the malformed message's rejects: %d, want 1", got)
	}
}

// counting is an intake that counts its batch transactions.
type counting struct {
	source.Intake
	calls atomic.Int64
}

func (c *counting) SubmitBatchTx(ctx context.Context, evs []intake.Event, inTx intake.InTx) ([]intake.Outcome, error) {
	c.calls.Add(1)
	return c.Intake.SubmitBatchTx(ctx, evs, inTx)
}

// redelivery fetches a batch and gives it back unrecorded: the broker
// delivers it again, counted as redelivered, and each event is recorded
// once, not as a replay (nothing had committed).
func redelivery(b *bundle) {
	t := b.t
	const n = 20
	for i := range n {
		b.publishEvent(Event("again", i))
	}
	src := b.open(Options{Name: "again"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []source.Message
	for len(got) == 0 {
		msgs, err := src.Fetch(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		got = msgs
	}
	for _, m := range got {
		if m.Deliveries != 1 || m.TransportID == "" {
			t.Errorf("first delivery of %s: deliveries %d", m.TransportID, m.Deliveries)
		}
	}
	if err := src.GiveBack(ctx, got, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	m := metrics.NewUnregistered()
	b.drain(time.Minute, b.loop(src, nil, func(c *source.Config) { c.Metrics = m }))
	b.checkOnce(IDs("again", n))
	b.checkReplays(0, 0, "nothing given back had committed")
	if r := testutil.ToFloat64(m.SourceRedeliveries.WithLabelValues(b.kind)); r < float64(len(got)) {
		t.Errorf("settle_source_redeliveries_total = %v, want at least the %d messages given back", r, len(got))
	}
}

// lostAck loses the acknowledgements of the first committed batches, up
// to one holding an event (as a worker killed after its commit and before
// its ack) and lets a new
// consumer take over: the batch comes back, its events are replays, a
// reject is not stored twice.
func lostAck(b *bundle) {
	t := b.t
	for i := range 5 {
		b.publishEvent(Event("lost", i))
	}
	b.broker.Publish(t, []byte(`not json`))

	first := &lostAcks{Source: b.open(Options{Name: "lost-1"})}
	r := start(b.loop(first, nil, nil))
	b.waitFor(time.Minute, "the first batch committed", func(*testing.T) (bool, string) {
		return b.count(`SELECT count(*) FROM settlements`) == 5 && b.count(`SELECT count(*) FROM intake_rejects`) == 1, "not yet"
	})
	r.stop()
	_ = first.Close() // the worker is gone; its unacknowledged batch comes back

	b.drain(time.Minute, b.loop(b.open(Options{Name: "lost-2"}), nil, nil))
	b.checkOnce(IDs("lost", 5))
	if want := first.lostEvents(); want == 0 {
		t.Errorf("the batch whose ack was lost held no event")
	} else if got := b.replays(); got < want {
		t.Errorf("replays: %d, want at least %d (the events of the batch whose ack was lost)", got, want)
	}
	if got := b.count(`SELECT count(*) FROM intake_rejects`); got != 1 {
		t.Errorf("rejects: %d, want 1 (a redelivered reject is stored once)", got)
	}
}

// leaseExpires lets the lease of a batch expire while its database work
// is slow and the lease is not kept alive: the broker gives the batch to
// another consumer, which records it; the slow one then commits replays,
// one for each event of its held batch. One settlement each, the broker
// drained.
func leaseExpires(b *bundle) {
	t := b.t
	for i := range 3 {
		b.publishEvent(Event("slow", i))
	}
	slowSrc := b.open(Options{Name: "slow"})
	slow := newHeld(b.svc, false)
	sr := start(b.loop(slowSrc, slow, func(c *source.Config) { c.LeaseEvery = time.Hour }))
	<-slow.arrived
	b.broker.Expire(t, slowSrc.Source)

	fast := start(b.loop(b.open(Options{Name: "fast"}), nil, nil))
	b.waitSettlements(time.Minute, 3)
	close(slow.release)
	b.waitDrained(time.Minute)
	fast.stop()
	sr.stop()
	b.checkOnce(IDs("slow", 3))
	// The held batch is the first fetch's, which need not hold all three
	// events (a broker may answer a fetch with part of what it has, one
	// partition's records, say); each of its events is a replay.
	if want := int(slow.events.Load()); want == 0 {
		t.Errorf("the slow consumer's held batch held no event")
	} else if got := b.replays(); got < want {
		t.Errorf("replays: %d, want at least %d (the slow batch's events, committed after the fast consumer's)", got, want)
	}
}

// leaseKeptAlive keeps a slow batch's lease alive: its work lasts three
// leases and nothing is delivered again meanwhile.
func leaseKeptAlive(b *bundle) {
	t := b.t
	for i := range 3 {
		b.publishEvent(Event("alive", i))
	}
	slow := newHeld(b.svc, false)
	m := metrics.NewUnregistered()
	lease := time.Second
	r := start(b.loop(b.open(Options{Name: "alive", Lease: lease}), slow, func(c *source.Config) {
		c.LeaseEvery = lease / 5
		c.Metrics = m
	}))
	<-slow.arrived
	time.Sleep(3 * lease) // three leases, each of which would have run out without being kept alive
	close(slow.release)
	b.waitDrained(time.Minute)
	r.stop()
	b.checkOnce(IDs("alive", 3))
	b.checkReplays(0, 0, "the lease was kept alive: nothing delivered again")
	if got := testutil.ToFloat64(m.SourceRedeliveries.WithLabelValues(b.kind)); got != 0 {
		t.Errorf("redeliveries: %v, want 0", got)
	}
}

// killedMidBatch kills a consumer while its batch is in work, before its
// commit: a consumer started beside it gets the batch and the rest, and
// every event is recorded once, none a replay.
func killedMidBatch(b *bundle) {
	const n = 100
	for i := range n {
		b.publishEvent(Event("killed", i))
	}
	victimSrc := b.open(Options{Name: "victim"})
	victim := newHeld(b.svc, true)
	vr := start(b.loop(victimSrc, victim, func(c *source.Config) { c.BatchSize = 10 }))
	<-victim.arrived
	_ = victimSrc.Close() // killed: nothing acknowledged, nothing given back
	close(victim.release)
	b.drain(2*time.Minute, b.loop(b.open(Options{Name: "survivor"}), nil, func(c *source.Config) { c.BatchSize = 10 }))
	vr.stop()
	b.checkOnce(IDs("killed", n))
	b.checkReplays(0, 0, "the killed consumer committed nothing")
}

// poison makes one message fail for an unexpected reason (a trigger raises
// for its settlement_id): after MaxFailures failures it is rejected as
// poison with its bytes, and the broker moves on.
func poison(b *bundle) {
	t := b.t
	if _, err := b.db.Pool.Exec(context.Background(), `
		CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.settlement_id = 'poison-0000' THEN RAISE EXCEPTION 'poisoned'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER poison BEFORE INSERT ON settlement_receipts FOR EACH ROW EXECUTE FUNCTION poison();`); err != nil {
		t.Fatal(err)
	}
	body := mustJSON(t, Event("poison", 0))
	tid := b.broker.Publish(t, body)
	for i := range 10 {
		b.publishEvent(Event("good", i))
	}
	m := metrics.NewUnregistered()
	b.drain(time.Minute, b.loop(b.open(Options{Name: "poison"}), nil, func(c *source.Config) { c.MaxFailures = 3; c.Metrics = m }))
	b.checkOnce(IDs("good", 10))
	var raw []byte
	var reason string
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT raw, reason FROM intake_rejects WHERE source = $1 AND transport_id = $2`,
		b.kind, tid).Scan(&raw, &reason); err != nil {
		t.Fatalf("no poison reject for %s: %v", tid, err)
	}
	if reason != source.ReasonPoison || !bytes.Equal(raw, body) {
		t.Errorf("reject: reason %q, raw %q; want poison with the message's bytes", reason, raw)
	}
	if got := testutil.ToFloat64(m.SourceMessages.WithLabelValues(b.kind, source.ReasonPoison)); got != 1 {
		t.Errorf("poison counted %v times, want 1", got)
	}
}

// twoConsumers runs two loops, each with its own consumer, on one
// broker holding duplicates: every event once, each duplicate a replay.
func twoConsumers(b *bundle) {
	t := b.t
	const n = 300
	for i := range n {
		b.publishEvent(Event("two", i))
		if i%5 == 0 {
			b.publishEvent(Event("two", i))
		}
	}
	one := b.loop(b.open(Options{Name: "one"}), nil, func(c *source.Config) { c.BatchSize = 20 })
	two := b.loop(b.open(Options{Name: "two"}), nil, func(c *source.Config) { c.BatchSize = 20 })
	b.drain(2*time.Minute, one, two)
	b.checkOnce(IDs("two", n))
	if got := b.replays(); got < n/5 {
		t.Errorf("replays: %d, want at least %d", got, n/5)
	}
}

// brokerRestart restarts the broker on its store while a stream is
// consumed: nothing lost, nothing applied twice.
func brokerRestart(b *bundle) {
	t := b.t
	const n = 200
	for i := range n / 2 {
		b.publishEvent(Event("restart", i))
	}
	r := start(b.loop(b.open(Options{Name: "restart"}), nil, func(c *source.Config) { c.BatchSize = 10 }))
	defer r.stop()
	b.waitSettlements(time.Minute, 20)
	if err := b.broker.Restart(t); errors.Is(err, ErrUnsupported) {
		t.Skipf("the broker cannot be restarted in a test: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	for i := n / 2; i < n; i++ {
		b.publishEvent(Event("restart", i))
	}
	b.waitDrained(2 * time.Minute)
	b.checkOnce(IDs("restart", n))
	if got := b.count(`SELECT count(*) FROM intake_rejects`); got != 0 {
		t.Errorf("%d rejects", got)
	}
}

// databaseOutage cuts the intake's database connections (and refuses new
// ones) while a stream is consumed and keeps publishing: nothing is
// acknowledged before its outcome commits (every ack is checked), nothing
// is rejected for the outage, and the consumer resumes by itself once the
// database answers.
func databaseOutage(b *bundle) {
	t := b.t
	const n = 200
	for i := range n / 2 {
		b.publishEvent(Event("outage", i))
	}
	src := b.open(Options{Name: "outage"})
	r := start(b.loop(src, nil, func(c *source.Config) { c.BatchSize = 10 }))
	defer r.stop()
	b.waitSettlements(time.Minute, 20)
	b.cut.setDown(true)
	ackedAtCut := src.acked.Load()
	for i := n / 2; i < n; i++ {
		b.publishEvent(Event("outage", i))
	}
	time.Sleep(2 * time.Second) // the loop meets the outage, gives its batch back and pauses
	if got := src.acked.Load() - ackedAtCut; got > 10 {
		t.Errorf("%d messages acknowledged during the outage (at most the batch committed as it began may be)", got)
	}
	settled := b.count(`SELECT count(*) FROM settlements`)
	b.cut.setDown(false)
	b.waitDrained(2 * time.Minute)
	b.checkOnce(IDs("outage", n))
	if settled >= n {
		t.Errorf("everything settled before the outage ended (%d)", settled)
	}
	if got := b.count(`SELECT count(*) FROM intake_rejects`); got != 0 {
		t.Errorf("%d rejects: an outage is not a reject", got)
	}
}
