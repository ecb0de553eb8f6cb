package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/settle/settle/events/kafkasink"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/kafkatest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// kafkaHeader returns the value of record r's header key.
func kafkaHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestEventsPublishKafkaCrashPoints kills a worker publishing to kfake (an
// in-process stand-in for Kafka) at each events crash point: before the
// publish (the topic has nothing) and after the broker acknowledged it but
// before the delivery is recorded (the topic has it once). A second worker
// publishes it again, a second record with the same event id (Kafka has
// no message id to drop it by), and then the rest of the settlement's
// story: deduplicated by event id, the topic holds the outbox's events
// once each and in its order, all under the settlement id as key; the
// first event is there twice after a crash after the send, once otherwise.
func TestEventsPublishKafkaCrashPoints(t *testing.T) {
	t.Parallel()
	const topic = "settle.events"
	for _, point := range crash.EventsPoints {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			kc := kafkatest.Start(t, 2, topic)
			b := startBank(t, 1, fakebank.Faults{SettleDelayMS: 100})
			flags := append(workerFlags(b.url), "--events-publish", kc.Spec(topic),
				"--events-retry-min", "50ms", "--events-retry-max", "500ms", "--events-timeout", "2s")
			w1 := startWorker(t, "w1", db.URL, []string{"SETTLE_CRASH_AT=" + point}, flags...)
			ev := intake.Event{SettlementID: "ev-kafka", AccountID: "acc-1", AmountCents: 777, Currency: "EUR", Beneficiary: "bene-1"}
			// As with NATS: the relay may publish and die before intake's
			// answer is written; the settlement is committed all the same.
			if code, err := post(w1.URL(), ev); err == nil && code != http.StatusCreated {
				t.Fatalf("delivery = %d", code)
			}
			if ps := waitExit(t, w1, 2*time.Minute); !workerproc.KilledBySIGKILL(ps) {
				t.Fatalf("w1 did not die by SIGKILL at %s: %v", point, ps)
			}
			ids := func() []string {
				var out []string
				for _, r := range kafkatest.Records(t, kc, topic) {
					if string(r.Key) != ev.SettlementID {
						t.Errorf("record %d/%d keyed %q", r.Partition, r.Offset, r.Key)
					}
					out = append(out, kafkaHeader(r, kafkasink.HeaderType)+" "+kafkaHeader(r, kafkasink.HeaderEventID))
				}
				return out
			}
			first := "settlement.pending " + ev.SettlementID + ":1"
			switch got := ids(); {
			case point == crash.EventsBeforeSend && len(got) != 0:
				t.Fatalf("the topic has %v though the worker died before publishing", got)
			case point == crash.EventsAfterSend && !slices.Equal(got, []string{first}):
				t.Fatalf("the topic has %v, want %s alone", got, first)
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
			var got []string
			settletest.Wait(t, "every event in the topic and recorded delivered", func() (bool, string) {
				var pending int
				var types []string
				if err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM event_deliveries WHERE state <> 'delivered'),
					(SELECT array_agg(type ORDER BY n) FROM settlement_events)`).Scan(&pending, &types); err != nil {
					return false, err.Error()
				}
				var want []string
				for i, typ := range types {
					want = append(want, fmt.Sprintf("%s %s:%d", typ, ev.SettlementID, i+1))
				}
				got = ids()
				var deduplicated []string
				for _, id := range got {
					if !slices.Contains(deduplicated, id) {
						deduplicated = append(deduplicated, id)
					}
				}
				done := pending == 0 && slices.Equal(deduplicated, want) && types[len(types)-1] == "settlement.returned"
				return done, fmt.Sprintf("%d pending, topic %v, outbox %v", pending, got, types)
			})
			wantFirst := 1
			if point == crash.EventsAfterSend {
				wantFirst = 2
			}
			for i, id := range got {
				n := 0
				for _, other := range got {
					if other == id {
						n++
					}
				}
				if want := map[bool]int{true: wantFirst, false: 1}[id == first]; n != want {
					t.Errorf("record %d (%s) is in the topic %d times, want %d, after a crash at %s: %v", i, id, n, want, point, got)
					break
				}
			}
			var sink string
			if err := db.Pool.QueryRow(context.Background(), `SELECT string_agg(sink, ',') FROM event_sinks`).Scan(&sink); err != nil || !strings.HasPrefix(sink, "kafka:") {
				t.Errorf("sinks %q (%v)", sink, err)
			}
			checkInvariants(t, db, b, map[string]int64{ev.SettlementID: ev.AmountCents})
		})
	}
}
