package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/checktest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// TestTwoBanksOneDatabase is issue 34's proof: two worker processes on one
// database, one configured for settle's bank and one for Stripe, take in
// one interleaved stream of events for both (bound by their bank field, or
// routed by currency), and the Stripe worker is SIGKILLed mid-stream and
// restarted. Every settlement must end terminal, paid exactly once and at
// its own bank: each fakebank's books hold exactly its own settlements, and
// the one invariant checker, run against each bank for that bank's
// settlements, finds nothing.
func TestTwoBanksOneDatabase(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-process end-to-end test")
	}
	const (
		n         = 240
		batchSize = 20
	)
	db := dbtest.New(t)
	faults := fakebank.Faults{DropResponseRate: 0.10, StatusErrorRate: 0.10, LatencyMinMS: 10, LatencyMaxMS: 50,
		SettlementFailureRate: 0.03, SettleDelayMS: 150}
	banks := map[string]*bank{
		"settle": startBankAs(t, 34, faults, "settle"),
		"stripe": startBankAs(t, 35, faults, "stripe"),
	}
	names := []string{"settle", "stripe"}
	routes := []string{"--route", "USD=stripe", "--route", "default=settle"}
	workers := make([]*workertest.Worker, 2)
	urls := &lockedURLs{urls: make([]string, 2)}
	for i, name := range names {
		flags := append(append(workerFlags(banks[name].url), "--bank", name), routes...)
		workers[i] = startWorker(t, "w-"+name, db.URL, nil, flags...)
		urls.set(i, workers[i].URL())
	}

	// The stream: EUR to settle by the default route, USD to Stripe by
	// its route, and each the other way round by the event's bank field.
	rng := rand.New(rand.NewPCG(34, 1))
	want := make(map[string]int64, n)
	wantBank := make(map[string]string, n)
	stream := make([]intake.Event, 0, n)
	for i := range n {
		ev := intake.Event{
			SettlementID: fmt.Sprintf("tb-%04d", i),
			AccountID:    fmt.Sprintf("acc-%02d", i%17),
			AmountCents:  int64(100 + rng.IntN(1_000_000)),
			Beneficiary:  fmt.Sprintf("ba_tb%04d", i),
			EventID:      fmt.Sprintf("evt-%04d", i),
		}
		switch i % 4 {
		case 0:
			ev.Currency, wantBank[ev.SettlementID] = "EUR", "settle"
		case 1:
			ev.Currency, wantBank[ev.SettlementID] = "USD", "stripe"
		case 2:
			ev.Currency, ev.Bank, wantBank[ev.SettlementID] = "EUR", "stripe", "stripe"
		default:
			ev.Currency, ev.Bank, wantBank[ev.SettlementID] = "USD", "settle", "settle"
		}
		want[ev.SettlementID] = ev.AmountCents
		stream = append(stream, ev)
	}

	batches := n / batchSize
	killAt := batches / 2
	counts := map[int]int{}
	for bi := range batches {
		var statuses []int
		deliver := func() { statuses = deliverBatch(t, urls, bi, stream[bi*batchSize:(bi+1)*batchSize]) }
		if bi != killAt {
			deliver()
		} else {
			// Mid-stream, with a call to Stripe in flight: SIGKILL its
			// worker and start it again on the same database.
			running, inFlight := killMidCall(t, db, banks["stripe"], "stripe", faults, deliver, func() {
				workers[1].Kill()
				workers[1] = startWorker(t, "w-stripe-restarted", db.URL, nil,
					append(append(workerFlags(banks["stripe"].url), "--bank", "stripe"), routes...)...)
				urls.set(1, workers[1].URL())
			})
			t.Logf("SIGKILLed the stripe worker after %d of %d batches, with %d stripe jobs running and %d calls to Stripe in flight", bi+1, batches, running, inFlight)
		}
		for _, s := range statuses {
			counts[s]++
		}
	}
	if counts[http.StatusCreated] != n {
		t.Fatalf("delivery outcomes %v, want %d created", counts, n)
	}
	waitAllTerminal(t, db, n)

	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT settlement_id, bank, coalesce(bank_reference, settlement_id) FROM settlements ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type bound struct{ id, bank, ref string }
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bound, error) {
		var b bound
		return b, r.Scan(&b.id, &b.bank, &b.ref)
	})
	if err != nil {
		t.Fatal(err)
	}
	refsOf := map[string][]string{}
	for _, s := range all {
		if s.bank != wantBank[s.id] {
			t.Errorf("%s bound to %s, want %s", s.id, s.bank, wantBank[s.id])
		}
		refsOf[s.bank] = append(refsOf[s.bank], s.ref)
	}
	for _, name := range names {
		b := banks[name]
		var held []string
		payments, err := bankclient.AllPayments(ctx, b.books(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range payments {
			held = append(held, p.Reference)
		}
		slices.Sort(held)
		slices.Sort(refsOf[name])
		if strings.Join(held, ",") != strings.Join(refsOf[name], ",") {
			t.Errorf("%s's books hold %d payments, its settlements are %d: books %v, settlements %v",
				name, len(held), len(refsOf[name]), held, refsOf[name])
		}
		if st := b.Stats(); st.MaxPaymentsPerReference > 1 {
			t.Errorf("%s paid a settlement %d times", name, st.MaxPaymentsPerReference)
		}
		checktest.CheckInvariantsAt(t, db.Pool, b.books(t), audit.Expect{First: checktest.Amounts(want), Recovered: true, Bank: name})
		t.Logf("%s: %d settlements, %d payments, %d POSTs, %d status calls", name, len(refsOf[name]), len(held), b.posts.Load(), b.status.Load())
	}
	var wrong int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job j JOIN settlements s ON s.settlement_id = j.args->>'settlement_id'
		WHERE j.kind IN ('send_instruction', 'reconcile_settlement') AND j.queue <> 'bank_' || s.bank`).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Errorf("%d bank jobs on another bank's queue", wrong)
	}
}
