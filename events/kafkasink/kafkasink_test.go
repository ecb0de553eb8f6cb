package kafkasink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/settle/settle/events"
	"github.com/settle/settle/events/eventstest"
	"github.com/settle/settle/events/kafkasink"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/kafkatest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

const topic = "settle.events"

// story is the path of every settlement in these tests.
var story = []settlement.State{settlement.Sent, settlement.Uncertain, settlement.Confirmed, settlement.Returned}

// walk creates settlement id, as intake does, and moves it along story,
// one transaction per step.
func walk(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ($1, 'acc', 'ben', 100, 'EUR', 'pending', 'k-'||$1, 'sha256:00')`, id); err != nil {
			return err
		}
		return statemachine.Created(ctx, tx, "received", time.Time{}, id)
	}); err != nil {
		t.Error(err)
		return
	}
	from := settlement.Pending
	for _, to := range story {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: id, From: from, To: to, Reason: "test"})
		}); err != nil {
			t.Error(err)
			return
		}
		from = to
	}
}

// header returns the value of record r's header key.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// checkTopic checks that records hold every event of settlements ids,
// each settlement's in order in one partition under its id as key, with
// the event id in the header and the body, and copies of each event
// exactly; it returns the event ids per settlement as they came, repeats
// included.
func checkTopic(t *testing.T, recs []*kgo.Record, ids []string, copies int) {
	t.Helper()
	bySettlement := map[string][]string{}
	partition := map[string]int32{}
	for _, r := range recs {
		var body struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(r.Value, &body); err != nil {
			t.Fatal(err)
		}
		id := header(r, kafkasink.HeaderEventID)
		sid := string(r.Key)
		if body.Data["event_id"] != id || body.Type != header(r, kafkasink.HeaderType) || sid != header(r, kafkasink.HeaderSettlementID) ||
			!strings.HasPrefix(id, sid+":") {
			t.Errorf("record %d/%d: key %q, headers %v, body %s", r.Partition, r.Offset, r.Key, r.Headers, r.Value)
		}
		if p, ok := partition[sid]; ok && p != r.Partition {
			t.Errorf("settlement %s in partitions %d and %d", sid, p, r.Partition)
		}
		partition[sid] = r.Partition
		bySettlement[sid] = append(bySettlement[sid], id)
	}
	for _, id := range ids {
		var want []string
		for range copies {
			for i := range 1 + len(story) {
				want = append(want, fmt.Sprintf("%s:%d", id, i+1))
			}
		}
		if got := bySettlement[id]; !slices.Equal(got, want) {
			t.Errorf("%s in the topic: %v, want %v", id, got, want)
		}
	}
	if len(recs) != copies*len(ids)*(1+len(story)) {
		t.Errorf("%d records in the topic, want %d", len(recs), copies*len(ids)*(1+len(story)))
	}
}

// TestRelayToKafka: two relays (two worker processes) publish the events
// of settlements walking pending → sent → uncertain → confirmed →
// returned, written while they run, to kfake (an in-process stand-in for
// Kafka). The topic holds each event once, each settlement's in order in
// one partition under its id; redelivering them all publishes each again
// (Kafka has no message id to drop them by): a consumer deduplicating by
// the event id still sees each once, in order.
func TestRelayToKafka(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	kc := kafkatest.Start(t, 3, topic)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	var sink *kafkasink.Sink
	for range 2 {
		s, err := kafkasink.Open(ctx, kafkasink.Config{Brokers: []string{kc.Addr()}, Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		sink = s
		r := &events.Relay{Pool: db.Pool, Sinks: []events.Sink{s}, Batch: 4, Poll: 10 * time.Millisecond, RetryMin: 10 * time.Millisecond}
		if err := r.Register(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = r.Run(ctx) })
	}
	if sink.Name() != "kafka:"+topic {
		t.Errorf("Name = %s", sink.Name())
	}
	var ids []string
	var walks sync.WaitGroup
	for i := range 12 {
		id := fmt.Sprintf("k%02d", i)
		ids = append(ids, id)
		walks.Go(func() { walk(t, db.Pool, id) })
	}
	walks.Wait()
	all := len(ids) * (1 + len(story))
	eventstest.WaitDelivered(t, db.Pool, all)
	checkTopic(t, kafkatest.Records(t, kc, topic), ids, 1)

	for _, id := range ids {
		if _, err := events.Redeliver(ctx, db.Pool, events.Target{SettlementID: id}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	eventstest.WaitDelivered(t, db.Pool, all)
	checkTopic(t, kafkatest.Records(t, kc, topic), ids, 2)
}

// TestPublishWaitsForTheBroker: with no topic to store it (deleted), a
// publish does not count: the delivery fails, and succeeds once the topic
// is back.
func TestPublishWaitsForTheBroker(t *testing.T) {
	t.Parallel()
	kc := kafkatest.Start(t, 1, topic)
	ctx := context.Background()
	s, err := kafkasink.Open(ctx, kafkasink.Config{Brokers: []string{kc.Addr()}, Topic: topic, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	e := events.Event{ID: "w1:1", SettlementID: "w1", Type: "settlement.pending", Payload: json.RawMessage(`{"event_id":"w1:1"}`), CreatedAt: time.Now()}
	_, adm := kc.Client(t)
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if res := s.Deliver(ctx, e); res.Err == nil {
		t.Fatalf("a publish with no topic to store it counted: %+v", res)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if res := s.Deliver(ctx, e); res.Err != nil || res.Body != "topic "+topic+" partition 0 offset 0" {
		t.Fatalf("Deliver = %+v", res)
	}
}

// TestParseSpec: the SPEC of --events-publish kafka://….
func TestParseSpec(t *testing.T) {
	t.Parallel()
	sp, err := kafkasink.ParseSpec("kafka://a:1,b:2/settle.events")
	if err != nil || strings.Join(sp.Brokers, ",") != "a:1,b:2" || sp.Topic != "settle.events" {
		t.Errorf("ParseSpec = %+v, %v", sp, err)
	}
	for _, bad := range []string{"kafka://a:1/t?group=g", "kafka://a/t", "kafka://a:1/", "nats"} {
		if _, err := kafkasink.ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q): no error", bad)
		}
	}
}
