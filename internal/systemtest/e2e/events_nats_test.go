package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/events/natssink"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/natstest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// TestEventsPublishNATSCrashPoints kills a worker publishing to a real
// JetStream at each events crash point: before the publish (the stream
// has nothing) and after the stream acknowledged it but before the
// delivery is recorded (the stream has it once). A second worker publishes
// it again under the same message id, which the stream drops, and then the
// rest of the settlement's story: the stream holds its events (pending,
// sent unless the bank was asked, confirmed, returned), once each and in
// the outbox's order, on settle.events.<type>.
func TestEventsPublishNATSCrashPoints(t *testing.T) {
	t.Parallel()
	for _, point := range crash.EventsPoints {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			srv := natstest.Start(t)
			js, _ := natstest.JetStream(t, srv.URL)
			b := startBank(t, 1, fakebank.Faults{SettleDelayMS: 100})
			flags := append(workerFlags(b.url), "--events-publish", "nats", "--events-nats-url", srv.URL,
				"--events-retry-min", "50ms", "--events-retry-max", "500ms", "--events-timeout", "2s")
			w1 := startWorker(t, "w1", db.URL, []string{"SETTLE_CRASH_AT=" + point}, flags...)
			ev := intake.Event{SettlementID: "ev-nats", AccountID: "acc-1", AmountCents: 777, Currency: "EUR", Beneficiary: "bene-1"}
			// The relay may publish the event and die at the crash point
			// before intake's answer is written (a publish takes a
			// millisecond): no answer is then what the producer gets, the
			// settlement being committed all the same.
			if code, err := post(w1.URL(), ev); err == nil && code != http.StatusCreated {
				t.Fatalf("delivery = %d", code)
			}
			if ps := waitExit(t, w1, 2*time.Minute); !workerproc.KilledBySIGKILL(ps) {
				t.Fatalf("w1 did not die by SIGKILL at %s: %v", point, ps)
			}
			ids := func() []string {
				var out []string
				for _, m := range natstest.Messages(t, js, natssink.DefaultStream) {
					if m.Headers().Get("Nats-Msg-Id") != m.Headers().Get(natssink.HeaderEventID) {
						t.Errorf("message %s: headers %v", m.Subject(), m.Headers())
					}
					out = append(out, m.Subject()+" "+m.Headers().Get("Nats-Msg-Id"))
				}
				return out
			}
			first := natssink.Subject("settlement.pending") + " " + ev.SettlementID + ":1"
			switch got := ids(); {
			case point == crash.EventsBeforeSend && len(got) != 0:
				t.Fatalf("the stream has %v though the worker died before publishing", got)
			case point == crash.EventsAfterSend && !slices.Equal(got, []string{first}):
				t.Fatalf("the stream has %v, want %s alone", got, first)
			}

			startWorker(t, "w2", db.URL, nil, flags...)
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
			// The story is pending → [sent →] confirmed → returned (a send
			// job in flight when w1 died is resolved by asking the bank,
			// which may confirm it without a sent step): the stream must
			// hold the outbox's events, each once, in its order.
			settletest.Wait(t, "every event in the stream and recorded delivered", func() (bool, string) {
				var pending int
				var types []string
				if err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM event_deliveries WHERE state <> 'delivered'),
					(SELECT array_agg(type ORDER BY n) FROM settlement_events)`).Scan(&pending, &types); err != nil {
					return false, err.Error()
				}
				var want []string
				for i, typ := range types {
					want = append(want, fmt.Sprintf("%s %s:%d", natssink.Subject(typ), ev.SettlementID, i+1))
				}
				got := ids()
				done := pending == 0 && slices.Equal(got, want) && types[len(types)-1] == "settlement.returned"
				return done, fmt.Sprintf("%d pending, stream %v, outbox %v", pending, got, types)
			})
			var dup bool
			if err := db.Pool.QueryRow(context.Background(), `SELECT last_body LIKE '%duplicate%' FROM event_deliveries WHERE n = 1`).Scan(&dup); err != nil {
				t.Fatal(err)
			}
			if dup != (point == crash.EventsAfterSend) {
				t.Errorf("the first event's second publish a duplicate: %v, after a crash at %s", dup, point)
			}
			var sink string
			if err := db.Pool.QueryRow(context.Background(), `SELECT string_agg(sink, ',') FROM event_sinks`).Scan(&sink); err != nil || !strings.HasPrefix(sink, "nats:") {
				t.Errorf("sinks %q (%v)", sink, err)
			}
			checkInvariants(t, db, b, map[string]int64{ev.SettlementID: ev.AmountCents})
		})
	}
}
