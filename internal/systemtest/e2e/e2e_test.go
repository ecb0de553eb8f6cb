package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// TestEndToEnd is the acceptance test of issue 5: 500 settlements, 20% of
// the events delivered twice and 5 conflicts, against a bank that fails
// before processing 10% of payments, drops 20% of its answers, fails 15% of
// status calls, answers in 0–40 ms and fails 3% of settlements; three worker
// processes share one database and one of them is SIGKILLed and restarted
// mid-run. Every settlement must end terminal, with one movement per
// confirmed settlement (of the first accepted payload's amount) and none
// otherwise, and the bank must have paid no settlement twice.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	endToEnd(t, target{name: settle.Connector.Name, beneficiary: "bene-%04d"})
}

// TestEndToEndStripe is TestEndToEnd through the Stripe connector and the
// fakebank's stripe profile (beneficiaries are Stripe bank account ids).
func TestEndToEndStripe(t *testing.T) {
	t.Parallel()
	endToEnd(t, target{name: "stripe", beneficiary: "ba_e2e%04d"})
}

// TestEndToEndOBIE is TestEndToEnd through the UK Open Banking connector
// and the fakebank's obie profile: every settlement a consent (its
// requests as faulty as the payments'), authorised by its account holder
// through the console's link after a delay (a fifth of the token answers
// lost, a tenth of the token requests failed: the link is opened again),
// then a payment with the account holder's token, both signed; sterling
// to sort codes.
func TestEndToEndOBIE(t *testing.T) {
	t.Parallel()
	tg := obieTarget
	tg.beneficiary = "SortCodeAccountNumber:0808002132%04d:ACME Ltd"
	endToEnd(t, tg)
}

// endToEnd runs the acceptance test against the bank of tg, its
// beneficiary formatting each settlement's number.
func endToEnd(t *testing.T, tg target) {
	if testing.Short() {
		t.Skip("multi-process end-to-end test")
	}
	const (
		n         = 500
		dupEvery  = 5 // 20% delivered twice
		conflicts = 5
		batchSize = 25
	)
	db := dbtest.New(t)
	name := tg.name
	faults := fakebank.Faults{
		FailBeforeRate: 0.10, DropResponseRate: 0.20, StatusErrorRate: 0.15,
		LatencyMinMS: 0, LatencyMaxMS: 40, SettlementFailureRate: 0.03, SettleDelayMS: 200, ConsentDelayMS: 150,
		TokenErrorRate: 0.1, TokenDropRate: 0.2,
	}
	b, env := tg.bank(t, 42, faults)
	flags := append(workerFlags(b.url), "--bank", name)
	workers := make([]*workertest.Worker, 3)
	urls := &lockedURLs{urls: make([]string, 3)}
	for i := range workers {
		workers[i] = startWorker(t, fmt.Sprintf("w%d", i), db.URL, env, flags...)
		urls.set(i, workers[i].URL())
	}
	if tg.authorise {
		// w1 is never killed.
		accountHolder(t, func() string { return urls.get()[1] })
	}

	// The stream: every settlement once, 20% again later (another event id,
	// same business payload), and at the end 5 conflicting payloads.
	rng := rand.New(rand.NewPCG(42, 5))
	want := make(map[string]int64, n)
	var stream []intake.Event
	for i := range n {
		ev := intake.Event{
			SettlementID: fmt.Sprintf("e2e-%04d", i),
			AccountID:    fmt.Sprintf("acc-%03d", i%37),
			AmountCents:  int64(100 + rng.IntN(1_000_000)),
			Currency:     []string{"EUR", "USD", "GBP"}[i%3],
			Beneficiary:  fmt.Sprintf(tg.beneficiary, i),
			EventID:      fmt.Sprintf("evt-%04d-a", i),
		}
		if tg.currency != "" {
			ev.Currency = tg.currency
		}
		want[ev.SettlementID] = ev.AmountCents
		stream = append(stream, ev)
	}
	for i := 0; i < n; i += dupEvery {
		dup := stream[i]
		dup.EventID = fmt.Sprintf("evt-%04d-b", i)
		// Redelivered somewhere later in the stream.
		at := min(i+1+rng.IntN(120), len(stream))
		stream = append(stream[:at], append([]intake.Event{dup}, stream[at:]...)...)
	}
	for i := range conflicts {
		c := stream[i*97]
		c.AmountCents++
		c.EventID = fmt.Sprintf("evt-conflict-%d", i)
		stream = append(stream, c)
	}

	start := time.Now()
	counts := map[int]int{}
	batches := (len(stream) + batchSize - 1) / batchSize
	killAt := batches * 2 / 5
	for bi := 0; bi < batches; bi++ {
		evs := stream[bi*batchSize : min((bi+1)*batchSize, len(stream))]
		var statuses []int
		deliver := func() { statuses = deliverBatch(t, urls, bi, evs) }
		if bi != killAt {
			deliver()
		} else {
			// Mid-run, with a bank call in flight: kill w0 (the first
			// started, so most likely River's leader, which runs the
			// sweep: the harder case), and restart it on the same
			// database.
			var open int
			var leader string
			running, inFlight := killMidCall(t, db, b, name, faults, deliver, func() {
				_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM settlements WHERE state NOT IN ('confirmed', 'failed')`).Scan(&open)
				_ = db.Pool.QueryRow(context.Background(), `SELECT leader_id FROM river_leader`).Scan(&leader)
				workers[0].Kill()
				workers[0] = startWorker(t, "w0-restarted", db.URL, env, flags...)
				urls.set(0, workers[0].URL())
			})
			t.Logf("SIGKILLed w0 after %d of %d batches (%s), with %d bank jobs running, %d bank calls in flight and %d settlements open; leader was %s",
				bi+1, batches, time.Since(start).Round(time.Millisecond), running, inFlight, open, leader)
		}
		for _, s := range statuses {
			counts[s]++
		}
	}
	delivered := time.Since(start)
	if counts[http.StatusCreated] != n || counts[http.StatusConflict] != conflicts || counts[http.StatusOK] < n/dupEvery {
		t.Errorf("delivery outcomes %v: want %d created, ≥%d replays, %d conflicts", counts, n, n/dupEvery, conflicts)
	}

	waitAllTerminal(t, db, n)
	elapsed := time.Since(start)

	checkInvariants(t, db, b, want)
	ctx := context.Background()
	var confirmed, failed, flagged, recorded, attempts, sends, statusChecks, moved, lost int
	if err := db.Pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE state = 'confirmed'), count(*) FILTER (WHERE state = 'failed'),
		count(*) FILTER (WHERE needs_investigation),
		(SELECT count(*) FROM receipt_conflicts),
		(SELECT count(*) FROM bank_attempts),
		(SELECT count(*) FROM bank_attempts WHERE op = 'send'),
		(SELECT count(*) FROM bank_attempts WHERE op = 'status'),
		(SELECT count(*) FROM ledger_movements),
		(SELECT count(*) FROM bank_attempts WHERE finished_at IS NULL)
		FROM settlements`).Scan(&confirmed, &failed, &flagged, &recorded, &attempts, &sends, &statusChecks, &moved, &lost); err != nil {
		t.Fatal(err)
	}
	if recorded != conflicts {
		t.Errorf("%d receipt conflicts recorded, want %d", recorded, conflicts)
	}
	if flagged != 0 {
		t.Errorf("%d settlements flagged needs_investigation", flagged)
	}
	if moved != confirmed {
		t.Errorf("%d movements for %d confirmed settlements", moved, confirmed)
	}
	st := b.Stats()
	httpCalls := b.posts.Load() + b.status.Load()
	t.Logf("end-to-end: %d settlements (%d events delivered: %v) terminal in %s (delivery took %s): %d confirmed, %d failed",
		n, len(stream), counts, elapsed.Round(time.Millisecond), delivered.Round(time.Millisecond), confirmed, failed)
	var leader string
	_ = db.Pool.QueryRow(ctx, `SELECT leader_id FROM river_leader`).Scan(&leader)
	t.Logf("%d bank calls died unanswered with the killed worker; leader now %s", lost, leader)
	t.Logf("%s bank: %d HTTP calls = %.2f per settlement (%d POST, %d status); engine recorded %d calls = %.2f per settlement (%d send, %d status); bank stats %+v",
		name, httpCalls, float64(httpCalls)/n, b.posts.Load(), b.status.Load(), attempts, float64(attempts)/n, sends, statusChecks, st)
}

// deliverBatch delivers evs to worker bi%3, and to the others in turn when
// that one gives no answer (it was killed): the producer redelivers.
func deliverBatch(t *testing.T, urls *lockedURLs, bi int, evs []intake.Event) []int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for try := 0; time.Now().Before(deadline); try++ {
		us := urls.get()
		st, err := postBatch(us[(bi+try)%len(us)], evs)
		if err == nil {
			return st
		}
		t.Logf("batch %d: %v; redelivering", bi, err)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("batch %d not delivered", bi)
	return nil
}
