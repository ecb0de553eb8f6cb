package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// TestCrashInSendBatch kills a worker in the middle of a send_batch job:
// each batch request of 40 events becomes one job (--send-batch, default
// 100), whose sends run concurrently, and the worker dies at a crash point
// of its 15th send (claimed but not sent, paid with the answer lost, the
// confirmation about to commit, committed). The job never completed, so a
// restarted worker runs it again: every settlement of it is either answered
// already (left alone) or still claimable (sent, or asked about by key
// first when it was claimed before). All end terminal, the bank paid each
// once, and the one exactly-once checker holds.
func TestCrashInSendBatch(t *testing.T) {
	t.Parallel()
	for _, point := range []string{crash.SendBeforeBank, crash.SendAfterBank, crash.ConfirmBeforeCommit, crash.SendAfterCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			b := startBankAs(t, 1, fakebank.Faults{}, settle.Connector.Name)
			flags := workerFlags(b.url)
			w1 := startWorker(t, "w1", db.URL, []string{"SETTLE_CRASH_AT=" + point, "SETTLE_CRASH_AFTER=15"}, flags...)

			evs, want := batchEvents("sb", 3, 40, 5)
			postUntilKilled(t, w1, evs, point)
			var batchJobs, singleJobs, open int
			if err := db.Pool.QueryRow(context.Background(), `SELECT
					(SELECT count(*) FROM river_job WHERE kind = 'send_batch'),
					(SELECT count(*) FROM river_job WHERE kind = 'send_instruction'),
					(SELECT count(*) FROM settlements WHERE state NOT IN ('confirmed', 'failed'))`).Scan(&batchJobs, &singleJobs, &open); err != nil {
				t.Fatal(err)
			}
			// A send_instruction may be there too, legitimately: the
			// sweep's for a settlement still waiting for its batch's slot
			// when its pending grace ran out, or a handover of one.
			if batchJobs == 0 {
				t.Fatalf("%d send_batch and %d send_instruction jobs, want the batches' sends in send_batch jobs", batchJobs, singleJobs)
			}
			if open == 0 {
				t.Errorf("every settlement terminal after a crash at the 15th send of a batch, want the batch cut in the middle")
			}

			redeliverAndCheck(t, db, b, evs, want, flags)
			t.Logf("crash at %s: %d send_batch jobs, %d settlements open after the crash", point, batchJobs, open)
		})
	}
}

// batchEvents is batches of size payouts each (ids prefix-K-II) from
// accounts accounts, and the amount of each by id.
func batchEvents(prefix string, batches, size, accounts int) ([][]intake.Event, map[string]int64) {
	want := map[string]int64{}
	var evs [][]intake.Event
	for k := range batches {
		var batch []intake.Event
		for i := range size {
			ev := intake.Event{SettlementID: fmt.Sprintf("%s-%d-%02d", prefix, k, i), AccountID: fmt.Sprintf("acc-%d", i%accounts),
				AmountCents: int64(100 + k*size + i), Currency: "EUR", Beneficiary: "bene-1"}
			batch = append(batch, ev)
			want[ev.SettlementID] = ev.AmountCents
		}
		evs = append(evs, batch)
	}
	return evs, want
}

// postUntilKilled posts evs to w, batch after batch, until w dies, and
// fails the test unless it died by SIGKILL (at point).
func postUntilKilled(t *testing.T, w *workertest.Worker, evs [][]intake.Event, point string) {
	t.Helper()
	for _, batch := range evs {
		if _, err := postBatch(w.URL(), batch); err != nil {
			break // the worker died
		}
	}
	if ps := waitExit(t, w, 2*time.Minute); !workerproc.KilledBySIGKILL(ps) {
		t.Fatalf("the worker did not die by SIGKILL at %s: %v", point, ps)
	}
}

// redeliverAndCheck starts a second worker with flags, redelivers evs to
// it, waits until every settlement is terminal, and checks the one
// exactly-once checker and the bank: want's settlements, each paid once.
func redeliverAndCheck(t *testing.T, db *dbtest.DB, b *bank, evs [][]intake.Event, want map[string]int64, flags []string) {
	t.Helper()
	w2 := startWorker(t, "w2", db.URL, nil, flags...)
	for _, batch := range evs {
		if _, err := postBatch(w2.URL(), batch); err != nil {
			t.Fatal(err)
		}
	}
	waitAllTerminal(t, db, len(want))
	checkInvariants(t, db, b, want)
	if st := b.Stats(); st.MaxPaymentsPerReference != 1 || st.Payments != int64(len(want)) {
		t.Errorf("bank %+v, want %d payments, one per reference", st, len(want))
	}
}
