package events_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/events"
	"github.com/settle/settle/events/eventstest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
)

// syncBuffer is a log destination the relay and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestForgetSink: a sink taken out of the configuration keeps its pending
// deliveries until an operator forgets it; forgetting is refused while a
// relay registered it recently, drops its undelivered deliveries, queues
// nothing for it any more (nor does Redeliver), lets retention prune what
// the remaining sinks have, and a relay configured with it takes it back.
func TestForgetSink(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	rcv := eventstest.NewReceiver(t, nil, secret)
	gone := eventstest.NewReceiver(t, func(int, string) eventstest.Fault { return eventstest.Fail500 }, secret)
	good, old := webhook(t, rcv.URL(), time.Second), webhook(t, gone.URL(), time.Second)
	var logs syncBuffer
	relay := &events.Relay{Pool: db.Pool, Sinks: []events.Sink{good, old},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := relay.Register(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	create(t, db.Pool, "g1")
	walk(t, db.Pool, "g1")
	for range 1 + len(story) {
		if _, err := relay.Once(ctx, good); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := relay.Once(ctx, old); err != nil { // one failed attempt, kept on the story
		t.Fatal(err)
	}
	sinks, err := events.Sinks(ctx, db.Pool)
	if err != nil || len(sinks) != 2 {
		t.Fatalf("Sinks = %+v, %v", sinks, err)
	}
	for _, k := range sinks {
		pending, delivered := int64(0), int64(1+len(story))
		if k.Sink == old.Name() {
			pending, delivered = delivered, 0
		}
		if k.Pending != pending || k.Delivered != delivered || !k.Relayed(t0, events.SinkIdle) || k.ForgottenAt != nil {
			t.Errorf("sink %+v, want %d pending, %d delivered, relayed", k, pending, delivered)
		}
	}

	forget := func(at time.Time, force bool) ([]events.Forgotten, error) {
		var out []events.Forgotten
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			out, err = events.ForgetSink(ctx, tx, old.Name(), "ana", at, force)
			return err
		})
		return out, err
	}
	if _, err := forget(t0.Add(time.Minute), false); !errors.Is(err, events.ErrSinkInUse) {
		t.Fatalf("forgetting a sink registered a minute ago: %v, want ErrSinkInUse", err)
	}
	if _, err := events.ForgetSink(ctx, db.Pool, "https://nowhere.example/", "ana", t0, true); !errors.Is(err, settlement.ErrNotFound) {
		t.Fatalf("forgetting an unknown sink: %v, want ErrNotFound", err)
	}
	later := t0.Add(events.SinkIdle + time.Second)
	if k := sinkInfo(t, db.Pool, old.Name()); k.Relayed(later, events.SinkIdle) {
		t.Errorf("%s still relayed %s after its last registration", k.Sink, events.SinkIdle)
	}
	dropped, err := forget(later, false)
	if err != nil || len(dropped) != 1 || dropped[0] != (events.Forgotten{SettlementID: "g1", Deliveries: 1 + len(story)}) {
		t.Fatalf("ForgetSink = %+v, %v", dropped, err)
	}
	k := sinkInfo(t, db.Pool, old.Name())
	if k.ForgottenAt == nil || k.ForgottenBy != "ana" || k.Pending != 0 || k.Relayed(later, events.SinkIdle) {
		t.Errorf("forgotten sink %+v", k)
	}

	// From now on nothing is queued there, and Redeliver leaves it out.
	create(t, db.Pool, "g2")
	var queued []events.Redelivered
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		queued, err = events.Redeliver(ctx, tx, events.Target{SettlementID: "g1"}, time.Now())
		return err
	}); err != nil || len(queued) != 1 || queued[0].Deliveries != 1+len(story) {
		t.Fatalf("Redeliver = %+v, %v (want one per event, at the good sink only)", queued, err)
	}
	var atOld int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_deliveries WHERE sink = $1 AND state <> 'delivered'`, old.Name()).Scan(&atOld); err != nil || atOld != 0 {
		t.Fatalf("%d undelivered deliveries at the forgotten sink (%v)", atOld, err)
	}
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_attempts WHERE sink = $1`, old.Name()).Scan(&attempts); err != nil || attempts != 1 {
		t.Errorf("the forgotten sink's attempts: %d (%v), want kept", attempts, err)
	}

	// An event committed while ForgetSink ran may have queued one: the
	// retention pass drops it, then prunes what the good sink has.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO event_deliveries (event_seq, sink, settlement_id, n)
		SELECT seq, $1, settlement_id, n FROM settlement_events WHERE event_id = 'g2:1'`, old.Name()); err != nil {
		t.Fatal(err)
	}
	for range 2 + len(story) {
		if _, err := relay.Once(ctx, good); err != nil {
			t.Fatal(err)
		}
	}
	pruned, err := events.Prune(ctx, db.Pool, time.Now().Add(time.Hour), 100)
	if err != nil || pruned != 2+int64(len(story)) {
		t.Fatalf("Prune = %d, %v, want every event (all delivered at the good sink)", pruned, err)
	}

	// A relay configured with it takes it back, and says so.
	if err := relay.Register(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "forgotten sink") || !strings.Contains(logs.String(), old.Name()) {
		t.Errorf("no warning on taking a forgotten sink back: %s", logs.String())
	}
	create(t, db.Pool, "g3")
	if k := sinkInfo(t, db.Pool, old.Name()); k.ForgottenAt != nil || k.Pending != 1 {
		t.Errorf("a sink taken back: %+v, want not forgotten, g3:1 pending", k)
	}
	if n := len(rcv.Accepted()); n != 2+len(story) {
		t.Errorf("the good sink accepted %d events", n)
	}
}

func sinkInfo(t *testing.T, db events.DB, name string) events.SinkInfo {
	t.Helper()
	sinks, err := events.Sinks(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range sinks {
		if k.Sink == name {
			return k
		}
	}
	t.Fatalf("no sink %s in %+v", name, sinks)
	return events.SinkInfo{}
}
