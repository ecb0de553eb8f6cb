package e2e

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestGracefulShutdownWithBankCallsInFlight: SIGTERM while bank calls are in
// flight (the bank answers after 1.5 s) stops the worker with exit status 0
// within the shutdown budget; what it was doing is finished or released,
// and a restarted worker settles everything exactly once.
func TestGracefulShutdownWithBankCallsInFlight(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	faults := fakebank.Faults{LatencyMinMS: 1500, LatencyMaxMS: 1500, SettleDelayMS: 100}
	b := startBank(t, 9, faults)
	flags := workerFlags(b.url)
	w := startWorker(t, "w", db.URL, nil, flags...)
	evs := make([]intake.Event, 20)
	for i := range evs {
		evs[i] = intake.Event{SettlementID: "gs-" + string(rune('a'+i)), AccountID: "acc", AmountCents: int64(100 + i), Currency: "EUR", Beneficiary: "bene"}
	}
	if st, err := postBatch(w.URL(), evs); err != nil || st[0] != http.StatusCreated {
		t.Fatalf("batch = %v, %v", st, err)
	}
	ctx := context.Background()
	waitFor(t, "bank calls in flight", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM bank_attempts WHERE finished_at IS NULL`).Scan(&n)
		return n > 0
	})
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// --shutdown-timeout is 6s: the worker exits by itself once it has
	// passed. The wait only ends a test whose worker never exits.
	if ps := waitExit(t, w, time.Minute); ps.ExitCode() != 0 {
		t.Fatalf("worker exited %v on SIGTERM", ps)
	}
	var running int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'running'`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if running != 0 {
		t.Errorf("%d jobs left running by a graceful stop", running)
	}

	faults.LatencyMinMS, faults.LatencyMaxMS = 0, 0
	if err := b.SetFaults(faults); err != nil {
		t.Fatal(err)
	}
	startWorker(t, "w-restarted", db.URL, nil, flags...)
	waitAllTerminal(t, db, len(evs))
	checkInvariants(t, db, b, nil)
}
