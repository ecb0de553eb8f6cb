package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestCrashInGroupCommit kills a worker in the middle of a group-committed
// intake window: eight producers post single events at once to a worker
// whose single requests share transactions (--intake-group-commit 1: one
// in flight, every request arriving meanwhile in the next), and the worker
// dies just before, or just after, its third shared commit. Every event a
// producer got a 2xx for has its settlement before anything is redelivered;
// after a restart every event is redelivered (a 2xx'd one is a replay), all
// end terminal, and the one exactly-once checker finds each paid once.
func TestCrashInGroupCommit(t *testing.T) {
	t.Parallel()
	for _, point := range []string{crash.IntakeBeforeCommit, crash.IntakeAfterCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			b := startBankAs(t, 1, fakebank.Faults{}, settle.Connector.Name)
			flags := append(workerFlags(b.url), "--intake-group-commit", "1")
			w1 := startWorker(t, "w1", db.URL, []string{"SETTLE_CRASH_AT=" + point, "SETTLE_CRASH_AFTER=3"}, flags...)

			const producers, most = 8, 100
			var mu sync.Mutex
			var sent []intake.Event
			acked := map[string]bool{}
			var wg sync.WaitGroup
			for p := range producers {
				wg.Go(func() {
					for k := range most {
						ev := intake.Event{SettlementID: fmt.Sprintf("gc-%d-%03d", p, k), AccountID: "acc-1",
							AmountCents: int64(100 + p*most + k), Currency: "EUR", Beneficiary: "bene-1"}
						mu.Lock()
						sent = append(sent, ev)
						mu.Unlock()
						code, err := post(w1.URL(), ev)
						if err != nil {
							return // the worker died
						}
						if code != http.StatusCreated {
							t.Errorf("%s answered %d", ev.SettlementID, code)
							return
						}
						mu.Lock()
						acked[ev.SettlementID] = true
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if ps := waitExit(t, w1, 2*time.Minute); !workerproc.KilledBySIGKILL(ps) {
				t.Fatalf("w1 did not die by SIGKILL at %s: %v", point, ps)
			}
			if len(acked) == 0 {
				t.Fatal("no event was acknowledged before the crash")
			}

			// Every 2xx has its settlement, before any redelivery.
			for id := range acked {
				var n int
				if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM settlements WHERE settlement_id = $1", id).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Errorf("%s was acknowledged but has %d settlements", id, n)
				}
			}

			w2 := startWorker(t, "w2", db.URL, nil, flags...)
			want := map[string]int64{}
			for _, ev := range sent {
				want[ev.SettlementID] = ev.AmountCents
				code, err := post(w2.URL(), ev)
				if err != nil || (code != http.StatusOK && code != http.StatusCreated) || (acked[ev.SettlementID] && code != http.StatusOK) {
					t.Fatalf("redelivery of %s (acknowledged: %v) = %d, %v", ev.SettlementID, acked[ev.SettlementID], code, err)
				}
			}
			waitAllTerminal(t, db, len(want))
			checkInvariants(t, db, b, want)
			if st := b.Stats(); st.MaxPaymentsPerReference != 1 {
				t.Errorf("bank %+v", st)
			}
			t.Logf("%d events sent, %d acknowledged before the crash at %s", len(sent), len(acked), point)
		})
	}
}
