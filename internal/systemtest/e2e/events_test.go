package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/events/eventstest"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

const eventsSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// eventsFlags are the worker flags of a webhook sink at url, retried fast.
func eventsFlags(bankURL, url string) []string {
	return append(workerFlags(bankURL), "--events-url", url, "--events-retry-min", "50ms", "--events-retry-max", "500ms",
		"--events-timeout", "1s")
}

// storedEvents reads every event id per settlement, in order.
func storedEvents(t *testing.T, db *dbtest.DB) map[string][]string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT settlement_id, event_id FROM settlement_events ORDER BY settlement_id, n`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for rows.Next() {
		var sid, id string
		if err := rows.Scan(&sid, &id); err != nil {
			t.Fatal(err)
		}
		out[sid] = append(out[sid], id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// receivedAll waits until the receiver holds, in order, every event stored
// for the settlements in ids, and every delivery is recorded delivered.
func receivedAll(t *testing.T, db *dbtest.DB, rcv *eventstest.Receiver, ids []string, want map[string]string) {
	t.Helper()
	settletest.Wait(t, "every event received and recorded delivered", func() (bool, string) {
		stored, got := storedEvents(t, db), rcv.Sequences()
		for _, id := range ids {
			if !slices.Equal(stored[id], got[id]) {
				return false, fmt.Sprintf("%s: stored %v, received %v", id, stored[id], got[id])
			}
			if last := stored[id]; len(last) == 0 || want[id] != "" && !slices.ContainsFunc(rcv.Accepted(), func(m eventstest.Message) bool {
				return m.ID == last[len(last)-1] && m.Type == "settlement."+want[id]
			}) {
				return false, fmt.Sprintf("%s: last event not yet settlement.%s", id, want[id])
			}
		}
		var pending int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM event_deliveries WHERE state <> 'delivered'`).Scan(&pending); err != nil {
			return false, err.Error()
		}
		return pending == 0, fmt.Sprintf("%d deliveries not recorded delivered", pending)
	})
	if p := rcv.Problems(); len(p) > 0 {
		t.Fatalf("receiver problems: %q", p)
	}
}

// TestEventsCrashPoints kills a worker at each events crash point: before
// the event leaves (the receiver has nothing) and after the receiver has it
// but before its delivery is recorded (the receiver has it once). A second
// worker delivers it again under the same webhook-id, and then the rest of
// the settlement's story (pending → sent → confirmed → returned): a
// deduplicating receiver sees each event once, in order, every signature
// verified.
func TestEventsCrashPoints(t *testing.T) {
	t.Parallel()
	for _, point := range crash.EventsPoints {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			b := startBank(t, 1, fakebank.Faults{SettleDelayMS: 100})
			rcv := eventstest.NewReceiver(t, nil, eventsSecret)
			env := []string{"SETTLE_EVENTS_SECRET=" + eventsSecret}
			flags := eventsFlags(b.url, rcv.URL())
			w1 := startWorker(t, "w1", db.URL, append([]string{"SETTLE_CRASH_AT=" + point}, env...), flags...)
			ev := intake.Event{SettlementID: "ev-crash", AccountID: "acc-1", AmountCents: 777, Currency: "EUR", Beneficiary: "bene-1"}
			// The relay may deliver the event and die at the crash point
			// before intake's answer is written: no answer is then what the
			// producer gets, the settlement being committed all the same.
			if code, err := post(w1.URL(), ev); err == nil && code != http.StatusCreated {
				t.Fatalf("delivery = %d", code)
			}
			if ps := waitExit(t, w1, 2*time.Minute); !workerproc.KilledBySIGKILL(ps) {
				t.Fatalf("w1 did not die by SIGKILL at %s: %v", point, ps)
			}
			first := ev.SettlementID + ":1"
			switch got := rcv.Accepted(); {
			case point == crash.EventsBeforeSend && len(got) != 0:
				t.Fatalf("the receiver has %v though the worker died before sending", got)
			case point == crash.EventsAfterSend && (len(got) != 1 || got[0].ID != first):
				t.Fatalf("the receiver has %v, want %s alone", got, first)
			}
			var state string
			if err := db.Pool.QueryRow(context.Background(), `SELECT state FROM event_deliveries WHERE event_seq = 1`).Scan(&state); err != nil || state != "pending" {
				t.Fatalf("the crashed delivery is %q (%v), want pending", state, err)
			}

			w2 := startWorker(t, "w2", db.URL, env, flags...)
			_ = w2
			var paymentID string
			settletest.Wait(t, "the settlement confirmed", func() (bool, string) {
				var state string
				if err := db.Pool.QueryRow(context.Background(), `SELECT state, coalesce(bank_payment_id, '') FROM settlements`).Scan(&state, &paymentID); err != nil {
					return false, err.Error()
				}
				return state == "confirmed" && paymentID != "", state
			})
			if err := b.Return(paymentID, "AC04"); err != nil {
				t.Fatal(err)
			}
			receivedAll(t, db, rcv, []string{ev.SettlementID}, map[string]string{ev.SettlementID: "returned"})
			if d := rcv.Duplicates(); (point == crash.EventsAfterSend) != (d > 0) {
				t.Errorf("%d duplicate deliveries after a crash at %s", d, point)
			}
			// The story is pending → [sent →] confirmed → returned: a send
			// job in flight when w1 died is resolved by asking the bank,
			// which may confirm it without a sent step. Whatever it was,
			// the receiver has the outbox's types in its order.
			types := []string{}
			for _, m := range rcv.Accepted() {
				types = append(types, m.Type)
			}
			var stored []string
			if err := db.Pool.QueryRow(context.Background(), `SELECT array_agg(type ORDER BY n) FROM settlement_events`).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(types, stored) || types[0] != "settlement.pending" || !slices.Contains(types, "settlement.confirmed") || types[len(types)-1] != "settlement.returned" {
				t.Errorf("received %v, stored %v", types, stored)
			}
			checkInvariants(t, db, b, map[string]int64{ev.SettlementID: ev.AmountCents})
		})
	}
}

// TestEventsTwoWorkersFaultyReceiver: two worker processes relay at once
// to a receiver that answers 500 to a third of the calls, sleeps past the
// timeout on some, drops the connection on others, and is down for a
// while; the bank drops answers so that settlements go through uncertain.
// Every event arrives once after deduplication, each settlement's in
// order.
func TestEventsTwoWorkersFaultyReceiver(t *testing.T) {
	t.Parallel()
	const n = 12
	db := dbtest.New(t)
	b := startBank(t, 7, fakebank.Faults{SettleDelayMS: 100, DropResponseRate: 0.3, StatusErrorRate: 0.2})
	var down atomic.Bool
	rcv := eventstest.NewReceiver(t, func(call int, _ string) eventstest.Fault {
		switch {
		case down.Load():
			return eventstest.Down
		case call%3 == 0:
			return eventstest.Fail500
		case call%13 == 0:
			return eventstest.Sleep
		case call%7 == 0:
			return eventstest.Down
		}
		return eventstest.OK
	}, eventsSecret)
	rcv.SleepFor = 2 * time.Second
	env := []string{"SETTLE_EVENTS_SECRET=" + eventsSecret}
	flags := eventsFlags(b.url, rcv.URL())
	w := []*struct{ url string }{{startWorker(t, "w0", db.URL, env, flags...).URL()}, {startWorker(t, "w1", db.URL, env, flags...).URL()}}
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("ev-%02d", i)
		if i == n/2 {
			down.Store(true) // down while half the settlements are moving
		}
		ev := intake.Event{SettlementID: ids[i], AccountID: "acc-1", AmountCents: int64(100 + i), Currency: "EUR", Beneficiary: "bene-1"}
		if code, err := post(w[i%2].url, ev); err != nil || code != http.StatusCreated {
			t.Fatalf("delivery = %d, %v", code, err)
		}
	}
	waitAllTerminal(t, db, n)
	down.Store(false)
	receivedAll(t, db, rcv, ids, nil)
	var retried int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM event_deliveries WHERE attempts > 1`).Scan(&retried); err != nil {
		t.Fatal(err)
	}
	if retried == 0 {
		t.Error("no delivery was retried: the faults did not happen")
	}
	var uncertain int
	if err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), `SELECT count(*) FROM settlement_events WHERE type = 'settlement.uncertain'`).Scan(&uncertain)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls, %d duplicates, %d deliveries retried, %d uncertain events", rcv.Calls(), rcv.Duplicates(), retried, uncertain)
	checkInvariants(t, db, b, nil)
}
