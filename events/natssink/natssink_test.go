package natssink_test

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
	"github.com/nats-io/nats.go/jetstream"

	"github.com/settle/settle/events"
	"github.com/settle/settle/events/eventstest"
	"github.com/settle/settle/events/natssink"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/natstest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

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

// message is one message read back from the stream.
type message struct {
	subject, msgID, eventID, typ string
	seq                          uint64
}

// readStream reads every message of the events' stream, in stream order.
func readStream(t *testing.T, js jetstream.JetStream) []message {
	t.Helper()
	ctx := context.Background()
	cons, err := js.OrderedConsumer(ctx, natssink.DefaultStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, natssink.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []message
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(int(info.State.Msgs)-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Type string         `json:"type"`
				Data map[string]any `json:"data"`
			}
			if err := json.Unmarshal(m.Data(), &body); err != nil {
				t.Fatal(err)
			}
			if body.Data["event_id"] != m.Headers().Get(natssink.HeaderEventID) || body.Type != m.Headers().Get(natssink.HeaderType) {
				t.Errorf("message %d: body %s, headers %v", md.Sequence.Stream, m.Data(), m.Headers())
			}
			out = append(out, message{subject: m.Subject(), msgID: m.Headers().Get("Nats-Msg-Id"), eventID: m.Headers().Get(natssink.HeaderEventID),
				typ: body.Type, seq: md.Sequence.Stream})
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkStream checks that the stream holds every event of settlements
// ids exactly once, each settlement's in order, under settle.events.<type>
// with the event id as message id.
func checkStream(t *testing.T, msgs []message, ids []string) {
	t.Helper()
	bySettlement := map[string][]string{}
	for _, m := range msgs {
		if m.msgID != m.eventID || m.subject != natssink.Subject(m.typ) {
			t.Errorf("message %d: %+v", m.seq, m)
		}
		sid := m.eventID[:strings.LastIndexByte(m.eventID, ':')]
		bySettlement[sid] = append(bySettlement[sid], m.eventID)
	}
	for _, id := range ids {
		want := make([]string, 1+len(story))
		for i := range want {
			want[i] = fmt.Sprintf("%s:%d", id, i+1)
		}
		if got := bySettlement[id]; !slices.Equal(got, want) {
			t.Errorf("%s in the stream: %v, want %v", id, got, want)
		}
	}
	if len(msgs) != len(ids)*(1+len(story)) {
		t.Errorf("%d messages in the stream, want %d", len(msgs), len(ids)*(1+len(story)))
	}
}

// TestRelayToJetStream: two relays (two worker processes) publish the
// events of settlements walking pending → sent → uncertain → confirmed →
// returned, written while they run, to a real JetStream. The stream holds
// each event once, each settlement's in order; redelivering them all
// publishes them again under the same message ids and the stream drops
// every one as a duplicate, while the delivery still counts.
func TestRelayToJetStream(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	var sink *natssink.Sink
	for range 2 {
		s, err := natssink.Open(ctx, natssink.Config{URL: srv.URL})
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
	if sink.Name() != "nats:"+natssink.DefaultStream {
		t.Errorf("Name = %s", sink.Name())
	}
	var ids []string
	var walks sync.WaitGroup
	for i := range 12 {
		id := fmt.Sprintf("j%02d", i)
		ids = append(ids, id)
		walks.Go(func() { walk(t, db.Pool, id) })
	}
	walks.Wait()
	all := len(ids) * (1 + len(story))
	eventstest.WaitDelivered(t, db.Pool, all)
	js, _ := natstest.JetStream(t, srv.URL)
	checkStream(t, readStream(t, js), ids)

	// Every event again (as after a crash between the stream's ack and
	// its record, or `settle events redeliver`): all dropped as
	// duplicates, all recorded delivered.
	for _, id := range ids {
		if _, err := events.Redeliver(ctx, db.Pool, events.Target{SettlementID: id}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	eventstest.WaitDelivered(t, db.Pool, all)
	checkStream(t, readStream(t, js), ids)
	var dups int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_deliveries WHERE last_body LIKE '%duplicate%' AND attempts = 2`).Scan(&dups); err != nil || dups != all {
		t.Errorf("%d deliveries recorded as duplicates on their second attempt (%v), want %d", dups, err, all)
	}
}

// TestPublishWaitsForTheStream: with no stream to store it (the server
// gone), a publish does not count: the delivery fails and is retried,
// and succeeds once the server is back.
func TestPublishWaitsForTheStream(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ctx := context.Background()
	s, err := natssink.Open(ctx, natssink.Config{URL: srv.URL, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	e := events.Event{ID: "w1:1", SettlementID: "w1", Type: "settlement.pending", Payload: json.RawMessage(`{"event_id":"w1:1"}`), CreatedAt: time.Now()}
	js, nc := natstest.JetStream(t, srv.URL)
	_ = nc
	if err := js.DeleteStream(ctx, natssink.DefaultStream); err != nil {
		t.Fatal(err)
	}
	if res := s.Deliver(ctx, e); res.Err == nil {
		t.Fatalf("a publish with no stream to store it counted: %+v", res)
	}
	if _, err := natssink.Open(ctx, natssink.Config{URL: srv.URL}); err != nil { // creates the stream again
		t.Fatal(err)
	}
	if res := s.Deliver(ctx, e); res.Err != nil || !strings.Contains(res.Body, "sequence 1") {
		t.Fatalf("Deliver = %+v", res)
	}
	if res := s.Deliver(ctx, e); res.Err != nil || !strings.Contains(res.Body, "duplicate") {
		t.Fatalf("Deliver again = %+v, want a duplicate that counts", res)
	}
}
