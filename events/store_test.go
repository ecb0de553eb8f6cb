package events_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/events"
	"github.com/settle/settle/events/eventstest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
)

// TestListRedeliverPrune: one sink delivered to, one dead; List filters,
// Redeliver queues again and a receiver deduplicating by webhook-id
// ignores what it has; Prune keeps what is not delivered everywhere.
func TestListRedeliverPrune(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	rcv := eventstest.NewReceiver(t, nil, secret)
	failing := eventstest.NewReceiver(t, func(int, string) eventstest.Fault { return eventstest.Fail500 }, secret)
	good, bad := webhook(t, rcv.URL(), time.Second), webhook(t, failing.URL(), time.Second)
	// The relay's clock moves a second at every reading, so a retry is
	// always due at the next pass however fast the passes run (with the
	// wall clock, a pass inside the retry's millisecond found nothing due
	// and the count of passes below fell short).
	var clock sync.Mutex
	at := time.Now()
	now := func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		at = at.Add(time.Second)
		return at
	}
	relay := &events.Relay{Pool: db.Pool, Sinks: []events.Sink{good, bad}, RetryMin: time.Millisecond, RetryMax: time.Millisecond, RetryFor: time.Nanosecond, Now: now}
	if err := relay.Register(ctx); err != nil {
		t.Fatal(err)
	}
	create(t, db.Pool, "l1")
	walk(t, db.Pool, "l1")
	create(t, db.Pool, "l2")
	// Passes deliver everything to good and give up at bad: RetryFor is
	// over at the second failure.
	for range 2 * (2 + len(story)) {
		for _, s := range relay.Sinks {
			if _, err := relay.Once(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	all, err := events.List(ctx, db.Pool, events.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2+len(story) || all[0].EventID != "l1:1" || all[len(all)-1].EventID != "l2:1" {
		t.Fatalf("List = %+v", all)
	}
	for _, e := range all {
		if len(e.Deliveries) != 2 {
			t.Fatalf("%s deliveries %+v", e.EventID, e.Deliveries)
		}
		for _, d := range e.Deliveries {
			want, attempts := "delivered", 1
			if d.Sink == bad.Name() {
				want, attempts = "dead", 2
			}
			if d.State != want || d.Attempts != attempts || d.LastStatus == nil {
				t.Errorf("%s at %s: %+v, want %s after %d attempt(s)", e.EventID, d.Sink, d, want, attempts)
			}
		}
	}
	one, err := events.List(ctx, db.Pool, events.Filter{SettlementID: "l2", Dead: true, Undelivered: true})
	if err != nil || len(one) != 1 || one[0].EventID != "l2:1" {
		t.Fatalf("List(l2, dead) = %+v, %v", one, err)
	}
	told, err := events.Story(ctx, db.Pool, "l1")
	if err != nil || len(told) != 1+len(story) || len(told[0].Attempts) != 3 {
		t.Fatalf("Story = %+v, %v", told, err)
	}

	// Redeliver one event: both sinks pending again; the good receiver
	// gets it a second time and ignores it.
	var queued []events.Redelivered
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		queued, err = events.Redeliver(ctx, tx, events.Target{EventID: "l1:2"}, time.Now())
		return err
	}); err != nil || len(queued) != 1 || queued[0].Deliveries != 2 {
		t.Fatalf("Redeliver = %+v, %v", queued, err)
	}
	if _, err := relay.Once(ctx, good); err != nil {
		t.Fatal(err)
	}
	if rcv.Duplicates() != 1 || len(rcv.Accepted()) != 2+len(story) {
		t.Errorf("after redelivery: %d duplicates, %d accepted", rcv.Duplicates(), len(rcv.Accepted()))
	}
	for _, id := range []string{"nope:1", "l1:99", "l1", "l1:0", "l1:02", "l1:x", ":1", "l1:-1"} {
		if _, err := events.Redeliver(ctx, db.Pool, events.Target{EventID: id}, time.Now()); !errors.Is(err, settlement.ErrNotFound) {
			t.Errorf("Redeliver of the unknown event %q: %v", id, err)
		}
	}
	if _, err := events.Redeliver(ctx, db.Pool, events.Target{EventID: "l1:1", Dead: true}, time.Now()); !errors.Is(err, events.ErrNoTarget) {
		t.Errorf("Redeliver of two targets: %v", err)
	}
	// --dead queues the dead deliveries only (one per event but l1:2, now pending).
	queued, err = events.Redeliver(ctx, db.Pool, events.Target{Dead: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, q := range queued {
		n += q.Deliveries
	}
	if n != 2+len(story)-1 {
		t.Errorf("Redeliver --dead queued %d, want %d", n, 2+len(story)-1)
	}

	// Prune: nothing is delivered everywhere (bad is pending again) but
	// the events of a settlement only good ever had.
	if _, err := db.Pool.Exec(ctx, `UPDATE event_deliveries SET state = 'delivered' WHERE sink = $1 AND settlement_id = 'l2'`, bad.Name()); err != nil {
		t.Fatal(err)
	}
	pruned, err := events.Prune(ctx, db.Pool, time.Now().Add(time.Hour), 100)
	if err != nil || pruned != 1 {
		t.Fatalf("Prune = %d, %v, want 1 (l2:1)", pruned, err)
	}
	if pruned, err := events.Prune(ctx, db.Pool, time.Now().Add(-time.Hour), 100); err != nil || pruned != 0 {
		t.Fatalf("Prune of nothing old = %d, %v", pruned, err)
	}
}

// TestSplitEventID: an event id splits at its last colon into the
// settlement (which may hold colons) and a number from 1 without leading
// zeros; anything else is no event id.
func TestSplitEventID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id  string
		sid string
		n   int
		ok  bool
	}{
		{"s-1:1", "s-1", 1, true},
		{"a:b:c:12", "a:b:c", 12, true},
		{"x::3", "x:", 3, true},
		{"s-1", "", 0, false},
		{":1", "", 0, false},
		{"s:0", "", 0, false},
		{"s:01", "", 0, false},
		{"s:+1", "", 0, false},
		{"s:-1", "", 0, false},
		{"s:1 ", "", 0, false},
		{"s:", "", 0, false},
		{"s:99999999999999999999999", "", 0, false},
	} {
		sid, n, ok := events.SplitEventID(tc.id)
		if sid != tc.sid || n != tc.n || ok != tc.ok {
			t.Errorf("SplitEventID(%q) = %q, %d, %v; want %q, %d, %v", tc.id, sid, n, ok, tc.sid, tc.n, tc.ok)
		}
	}
}
