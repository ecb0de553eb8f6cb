package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/settlecmd/worker"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// runWorker runs a worker of c until the test ends and returns its API's
// base URL.
func runWorker(t *testing.T, c worker.Config) string {
	t.Helper()
	c.Listen, c.ShutdownTimeout = "127.0.0.1:0", 5*time.Second
	c.SweepInterval, c.PendingGrace, c.CheckInterval, c.MaxCheckInterval = 200*time.Millisecond, 300*time.Millisecond, 50*time.Millisecond, 300*time.Millisecond
	c.FetchPollInterval = 50 * time.Millisecond
	w, err := worker.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- w.Run(ctx, func(string) { close(ready) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("worker stopped before it was ready: %v", err)
	}
	return "http://" + w.Addr()
}

// booksRefs lists the references of every payment a fakebank holds.
func booksRefs(t *testing.T, b *fakebank.Bank) []string {
	t.Helper()
	var refs []string
	after := ""
	for {
		page, err := b.Books(after, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page.Payments {
			refs = append(refs, p.Reference)
		}
		if page.Next == "" {
			sort.Strings(refs)
			return refs
		}
		after = page.Next
	}
}

// TestSeveralBanksOneWorker: one worker serving settle and stripe, each on
// its own URL and queue, pays every settlement once at its own bank: the
// event's bank field first, else the route of its currency.
func TestSeveralBanksOneWorker(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	settleBank, settleURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 1})
	stripeBank, stripeURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 2, Profile: "stripe"})
	c := worker.DefaultConfig()
	c.Pool = db.Pool
	c.Connectors = bankclient.Connectors{settle.Connector, stripe.Connector}
	c.Banks = []worker.BankConfig{{Name: "settle", URL: settleURL}, {Name: "stripe", URL: stripeURL}}
	if err := c.Routes.Set("USD=stripe,default=settle"); err != nil {
		t.Fatal(err)
	}
	api := runWorker(t, c)

	var wantSettle, wantStripe []string
	for i := range 12 {
		id := fmt.Sprintf("mb-%02d", i)
		var ev string
		switch i % 3 {
		case 0: // EUR: the default route, settle
			ev = fmt.Sprintf(`{"settlement_id":%q,"account_id":"acc","amount_cents":%d,"currency":"EUR","beneficiary":"bene"}`, id, 100+i)
			wantSettle = append(wantSettle, id)
		case 1: // USD: routed to stripe
			ev = fmt.Sprintf(`{"settlement_id":%q,"account_id":"acc","amount_cents":%d,"currency":"USD","beneficiary":"ba_1Multi"}`, id, 100+i)
			wantStripe = append(wantStripe, id)
		default: // USD, but the event names settle
			ev = fmt.Sprintf(`{"settlement_id":%q,"account_id":"acc","amount_cents":%d,"currency":"USD","beneficiary":"ba_1Named","bank":"settle"}`, id, 100+i)
			wantSettle = append(wantSettle, id)
		}
		if code, body := settletest.Do(t, http.MethodPost, api+"/v1/settlements", "", ev); code != http.StatusCreated {
			t.Fatalf("POST %s = %d %s", id, code, body)
		}
	}
	settletest.Wait(t, "every settlement confirmed", func() (bool, string) {
		var open int
		if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM settlements WHERE state <> 'confirmed'").Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open == 0, fmt.Sprintf("%d not confirmed", open)
	})
	sort.Strings(wantSettle)
	sort.Strings(wantStripe)
	if got := booksRefs(t, settleBank); strings.Join(got, ",") != strings.Join(wantSettle, ",") {
		t.Errorf("settle's books hold %v, want %v", got, wantSettle)
	}
	if got := booksRefs(t, stripeBank); strings.Join(got, ",") != strings.Join(wantStripe, ",") {
		t.Errorf("stripe's books hold %v, want %v", got, wantStripe)
	}
	rows, _ := db.Pool.Query(context.Background(), "SELECT DISTINCT queue FROM river_job WHERE kind IN ('send_instruction', 'reconcile_settlement') ORDER BY 1")
	queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(queues, ",") != "bank_settle,bank_stripe" {
		t.Errorf("bank jobs ran on %v (%v), want bank_settle and bank_stripe", queues, err)
	}
}

// TestWaitingForAWorkerOfItsBank: a worker of settle alone takes in an
// event routed to stripe, which it does not serve: the settlement stays
// pending, untouched by every sweep, and says it waits for a worker of
// stripe, while settle's own is paid.
func TestWaitingForAWorkerOfItsBank(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	_, settleURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 1})
	c := worker.DefaultConfig()
	c.Pool, c.BankURL = db.Pool, settleURL
	c.Connectors = bankclient.Connectors{settle.Connector, stripe.Connector}
	c.Routes = intake.Routes{ByCurrency: map[string]string{"USD": "stripe"}}
	api := runWorker(t, c)
	for _, ev := range []string{
		`{"settlement_id":"mine","account_id":"acc","amount_cents":100,"currency":"EUR","beneficiary":"bene"}`,
		`{"settlement_id":"theirs","account_id":"acc","amount_cents":100,"currency":"USD","beneficiary":"ba_1Wait"}`,
	} {
		if code, body := settletest.Do(t, http.MethodPost, api+"/v1/settlements", "", ev); code != http.StatusCreated {
			t.Fatalf("POST = %d %s", code, body)
		}
	}
	ctx := context.Background()
	// Past its pending grace, through several sweeps.
	var since time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT next_check_at FROM settlements WHERE settlement_id = 'theirs'").Scan(&since); err != nil {
		t.Fatal(err)
	}
	settletest.Wait(t, "settle's settlement confirmed and three sweeps past stripe's grace", func() (bool, string) {
		var mine string
		var sweeps int
		if err := db.Pool.QueryRow(ctx, `SELECT (SELECT state FROM settlements WHERE settlement_id = 'mine'),
			(SELECT count(*) FROM river_job WHERE kind = 'sweep' AND state = 'completed' AND finalized_at > $1)`, since).Scan(&mine, &sweeps); err != nil {
			t.Fatal(err)
		}
		return mine == "confirmed" && sweeps >= 3, fmt.Sprintf("mine %s, %d sweeps", mine, sweeps)
	})
	var state string
	var attempts, jobs int
	if err := db.Pool.QueryRow(ctx, `SELECT state, (SELECT count(*) FROM bank_attempts WHERE settlement_id = 'theirs'),
		(SELECT count(*) FROM river_job WHERE args->>'settlement_id' = 'theirs')
		FROM settlements WHERE settlement_id = 'theirs'`).Scan(&state, &attempts, &jobs); err != nil {
		t.Fatal(err)
	}
	if state != "pending" || attempts != 0 || jobs != 1 {
		t.Fatalf("stripe's settlement: %s, %d bank attempts, %d jobs; want pending, none, its one send job", state, attempts, jobs)
	}
	st, err := (&inspect.Inspector{DB: db.Pool}).Show(ctx, "theirs")
	if err != nil {
		t.Fatal(err)
	}
	if st.Waiting != "waiting for a worker of bank stripe" || st.Settlement.Bank != "stripe" {
		t.Fatalf("story: bank %q, waiting %q", st.Settlement.Bank, st.Waiting)
	}
	if mine, _ := (&inspect.Inspector{DB: db.Pool}).Show(ctx, "mine"); mine.Waiting != "" {
		t.Fatalf("a settled settlement waits: %q", mine.Waiting)
	}
}
