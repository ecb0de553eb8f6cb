package faulttest

import (
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/loadtest"
)

// Timing of the bank outage test; the worker gets them as flags.
const (
	outageCheckInterval    = 200 * time.Millisecond
	outageMaxCheckInterval = time.Second
	outageBankConcurrency  = 4
	// outageMinDuration is how long the bank stays away at least.
	outageMinDuration = 12 * time.Second
)

// checksWithin is how many status checks the backoff schedule allows within
// d after the first send: the k-th check waits min(ci·2^(k-1), mi) after the
// one before (reconcile.Policy).
func checksWithin(d, ci, mi time.Duration) int {
	var elapsed time.Duration
	n := 0
	for delay := ci; ; {
		elapsed += delay
		if elapsed > d {
			return n
		}
		n++
		delay = min(delay*2, mi)
	}
}

// TestBankOutage keeps the bank unreachable (every payment and status
// request has its connection closed without an answer) while events keep
// arriving. Settlements pile up as pending/uncertain and none is failed;
// the retry traffic stays under the bound the configured backoff allows;
// concurrent bank calls never exceed --bank-concurrency; once the bank is
// back every settlement drains to confirmed with the invariants intact.
func TestBankOutage(t *testing.T) {
	t.Parallel()
	const n = 40
	db := dbtest.New(t)
	bank := startBank(t, 11, fakebank.Faults{SettleDelayMS: 100})
	bank.DownDelay = 0 // refuse at once: a tight retry loop would show at once
	bank.SetDown(true)
	flags := append(workerproc.FastFlags(bank.URL),
		"--check-interval", outageCheckInterval.String(),
		"--max-check-interval", outageMaxCheckInterval.String(),
		"--bank-concurrency", "4")
	w := startWorker(t, "w-outage", db.URL, flags...)
	p := &loadtest.Producer{URLs: urls(w)}
	ctx := deadline(t, 4*time.Minute)

	down := time.Now()
	// Events keep arriving during the outage, one every 150ms.
	for _, ev := range events("outage", n) {
		if err := p.Deliver(ctx, ev); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(150 * time.Millisecond):
		}
	}
	// Every settlement has been sent and re-checked at least twice in
	// vain, and the outage has lasted its minimum.
	waitFor(t, ctx, "every settlement checked twice during the outage", func() bool {
		var ready int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlements WHERE check_attempts >= 2`).Scan(&ready)
		if err != nil {
			t.Fatal(err)
		}
		states, err := loadtest.StateCounts(ctx, db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		for s, c := range states {
			if s != "pending" && s != "uncertain" {
				t.Fatalf("%d settlements %s while the bank is unreachable (states %v)", c, s, states)
			}
		}
		return ready == n && time.Since(down) >= outageMinDuration
	})
	during := bank.Counts()
	up := time.Now()

	// The bound: per settlement, one send plus the checks its backoff
	// schedule allows in its time under the outage, each call at most
	// DefaultRetryPolicy.MaxAttempts requests, doubled for the one extra
	// job chain the sweep may start (a send that waited past
	// --pending-grace, a check late by more than --lease).
	rows, err := db.Pool.Query(ctx, `SELECT received_at FROM settlement_receipts`)
	if err != nil {
		t.Fatal(err)
	}
	var bound int64
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		exposure := max(up.Sub(at), 0)
		calls := 1 + checksWithin(exposure, outageCheckInterval, outageMaxCheckInterval)
		bound += int64(2 * calls * bankclient.DefaultRetryPolicy.MaxAttempts)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("outage of %s: %d payment and %d status requests (bound %d), at most %d at once",
		up.Sub(down).Round(time.Millisecond), during.Posts, during.Status, bound, during.MaxInflight)
	if during.Total() > bound {
		t.Errorf("retry traffic during the outage: %d requests, over the bound %d of the configured backoff", during.Total(), bound)
	}
	if during.Posts < n {
		t.Errorf("only %d payment requests for %d settlements during the outage", during.Posts, n)
	}
	if during.MaxInflight > outageBankConcurrency {
		t.Errorf("%d bank requests at once during the outage, over --bank-concurrency %d", during.MaxInflight, outageBankConcurrency)
	}

	// The bank comes back, slower: the drain shows the concurrency cap.
	if err := bank.SetFaults(fakebank.Faults{SettleDelayMS: 100, LatencyMinMS: 20, LatencyMaxMS: 60}); err != nil {
		t.Fatal(err)
	}
	bank.ResetMaxInflight()
	bank.SetDown(false)
	if err := loadtest.WaitTerminal(ctx, db.Pool, n); err != nil {
		t.Fatal(err)
	}
	var failed, failedTransitions int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM settlements WHERE state = 'failed'),
		(SELECT count(*) FROM settlement_transitions WHERE to_state = 'failed')`).Scan(&failed, &failedTransitions); err != nil {
		t.Fatal(err)
	}
	if failed != 0 || failedTransitions != 0 {
		t.Errorf("%d settlements failed (%d transitions to failed) though the bank was only away", failed, failedTransitions)
	}
	if c := bank.Counts(); c.MaxInflight > outageBankConcurrency {
		t.Errorf("%d bank requests at once, over --bank-concurrency %d", c.MaxInflight, outageBankConcurrency)
	} else {
		t.Logf("drain: at most %d bank requests at once (cap %d); total %+v", c.MaxInflight, outageBankConcurrency, c)
	}
	checkProducer(t, p)
	checkInvariants(t, db.Pool, bank, p.Acked())
}
