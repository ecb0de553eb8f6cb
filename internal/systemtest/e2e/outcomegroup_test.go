package e2e

import (
	"context"
	"testing"

	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestCrashInOutcomeGroup kills a worker in the middle of a batch of
// outcomes: its concurrent sends record their answers in shared
// transactions (--outcome-group 2), and it dies just before, or just
// after, its second shared transaction of two or more outcomes commits.
// Before: every settlement of that batch was claimed and paid at the bank
// and none has its outcome, so each is left to the lost-answer path; after:
// each has it. After a restart all end terminal without a second payment,
// and the one exactly-once checker finds each paid once.
func TestCrashInOutcomeGroup(t *testing.T) {
	t.Parallel()
	for _, point := range []string{crash.OutcomesBeforeCommit, crash.OutcomesAfterCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			b := startBankAs(t, 1, fakebank.Faults{}, settle.Connector.Name)
			flags := append(workerFlags(b.url), "--outcome-group", "2")
			w1 := startWorker(t, "w1", db.URL, []string{"SETTLE_CRASH_AT=" + point, "SETTLE_CRASH_AFTER=2"}, flags...)

			evs, want := batchEvents("og", 10, 40, 7)
			postUntilKilled(t, w1, evs, point)

			// What the crash left: settlements claimed and paid at the bank
			// whose answer was never recorded (the batch that did not
			// commit, and any send still in flight), and the confirmed.
			var unrecorded, confirmed int
			if err := db.Pool.QueryRow(context.Background(), `SELECT
					count(*) FILTER (WHERE state = 'pending' AND first_attempt_at IS NOT NULL),
					count(*) FILTER (WHERE state = 'confirmed') FROM settlements`).Scan(&unrecorded, &confirmed); err != nil {
				t.Fatal(err)
			}
			if point == crash.OutcomesBeforeCommit && unrecorded < 2 {
				t.Errorf("%d settlements claimed without their outcome after a crash before a shared commit, want at least the batch's 2", unrecorded)
			}
			if point == crash.OutcomesAfterCommit && confirmed < 2 {
				t.Errorf("%d settlements confirmed after a crash after a shared commit, want at least the batch's 2", confirmed)
			}

			redeliverAndCheck(t, db, b, evs, want, flags)
			t.Logf("crash at %s: %d claimed without an outcome, %d confirmed", point, unrecorded, confirmed)
		})
	}
}
