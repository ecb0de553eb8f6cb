package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// TestReturnsEndToEnd is the acceptance test of issue 17 on the settle
// profile: a fifth of the settled payments come back shortly after they
// settle, two worker processes share the work and one of them is
// SIGKILLed mid-run. Every payment the bank returned ends returned with
// exactly one reversal (or failed with no movement when it came back
// before the engine saw it settle), every invariant holds, and
// `settle reconcile bank` is clean.
func TestReturnsEndToEnd(t *testing.T) {
	t.Parallel()
	returnsEndToEnd(t, target{name: settle.Connector.Name, beneficiary: "bene-%04d"})
}

// TestReturnsEndToEndStripe is TestReturnsEndToEnd through the Stripe
// connector and the fakebank's stripe profile, where a returned payout
// reads paid, then failed.
func TestReturnsEndToEndStripe(t *testing.T) {
	t.Parallel()
	returnsEndToEnd(t, target{name: "stripe", beneficiary: "ba_ret%04d"})
}

// TestReturnsEndToEndOBIE is TestReturnsEndToEnd through the UK Open
// Banking connector and the fakebank's obie profile, which reports returns
// only on its statements: the payment resource keeps reading settled, and
// the operator's `settle statement import` of the bank's camt.053 books
// every return.
func TestReturnsEndToEndOBIE(t *testing.T) {
	t.Parallel()
	tg := obieTarget
	tg.beneficiary = "SortCodeAccountNumber:0808002132%04d:ACME Ltd"
	returnsEndToEnd(t, tg)
}

// returnsEndToEnd runs the returns acceptance test against the bank of
// tg, its beneficiary formatting each settlement's number.
func returnsEndToEnd(t *testing.T, tg target) {
	if testing.Short() {
		t.Skip("multi-process end-to-end test")
	}
	const (
		n          = 150
		batchSize  = 10
		returnRate = 0.2
		settleMS   = 100
		returnMS   = 1000
	)
	db := dbtest.New(t)
	// No settlement failures: a payment the bank reports failed (or
	// returned) after it was paid is then a return at every profile.
	name := tg.name
	b, env := tg.bank(t, 17, fakebank.Faults{
		DropResponseRate: 0.1, StatusErrorRate: 0.05, LatencyMaxMS: 20,
		SettleDelayMS: settleMS, ReturnRate: returnRate, ReturnAfterMS: returnMS,
	})
	statementsOnly := b.conn.Capabilities.ReturnsOnStatementsOnly
	flags := append(workerFlags(b.url), "--bank", name)
	workers := []*workertest.Worker{
		startWorker(t, "w0", db.URL, env, flags...),
		startWorker(t, "w1", db.URL, env, flags...),
	}
	urls := &lockedURLs{urls: []string{workers[0].URL(), workers[1].URL()}}
	if tg.authorise {
		// w1 is never killed.
		accountHolder(t, func() string { return urls.get()[1] })
	}

	rng := rand.New(rand.NewPCG(17, 2))
	want := make(map[string]int64, n)
	stream := make([]intake.Event, 0, n)
	for i := range n {
		ev := intake.Event{
			SettlementID: fmt.Sprintf("ret-%04d", i),
			AccountID:    fmt.Sprintf("acc-%02d", i%7),
			AmountCents:  int64(100 + rng.IntN(100_000)),
			Currency:     []string{"EUR", "USD"}[i%2],
			Beneficiary:  fmt.Sprintf(tg.beneficiary, i),
			EventID:      fmt.Sprintf("evt-%04d", i),
		}
		if tg.currency != "" {
			ev.Currency = tg.currency
		}
		want[ev.SettlementID] = ev.AmountCents
		stream = append(stream, ev)
	}
	ctx := context.Background()
	batches := (n + batchSize - 1) / batchSize
	for bi := range batches {
		if bi == batches/2 {
			// Mid-run, once returns are being booked (at a bank that
			// reports them on statements only: once payments settle) and
			// bank jobs run: kill w0 (the first started, most likely
			// River's leader, which runs the sweep and so the return
			// watch).
			var returned, running int
			settletest.Wait(t, "a return booked", func() (bool, string) {
				if err := db.Pool.QueryRow(ctx, `SELECT
					(SELECT count(*) FROM settlements WHERE state IN ('returned', CASE WHEN $1 THEN 'confirmed' END)),
					(SELECT count(*) FROM river_job WHERE starts_with(queue, 'bank_') AND state = 'running')`, statementsOnly).Scan(&returned, &running); err != nil {
					t.Fatal(err)
				}
				return returned > 0, fmt.Sprintf("%d returned (or confirmed), %d bank jobs running", returned, running)
			})
			workers[0].Kill()
			t.Logf("SIGKILLed w0 after %d of %d batches, %d settlements returned (or, at a bank reporting returns on statements only, confirmed), %d bank jobs running", bi, batches, returned, running)
			urls.set(0, workers[1].URL())
		}
		evs := stream[bi*batchSize : min((bi+1)*batchSize, n)]
		for i, st := range deliverBatch(t, urls, bi, evs) {
			if st != http.StatusCreated && st != http.StatusOK {
				t.Fatalf("%s answered %d", evs[i].SettlementID, st)
			}
		}
	}

	// The waits below read the fakebank's own books, whose times are
	// exact: a connector's view may round them (Stripe's created is in
	// whole seconds), and a payment that looks older than its return
	// time by up to a second may not have come back yet.
	client := b.BooksClient()
	if statementsOnly {
		// Every payment settled and had its time to come back; then the
		// operator imports the bank's statement, which alone shows the
		// returns.
		settletest.Wait(t, "every payment old enough to have come back", func() (bool, string) {
			ps, err := bankclient.AllPayments(ctx, client)
			if err != nil {
				return false, err.Error()
			}
			young := 0
			for _, p := range ps {
				if time.Since(p.CreatedAt) < (settleMS+returnMS)*time.Millisecond {
					young++
				}
			}
			var open int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlements WHERE state NOT IN ('confirmed', 'failed', 'returned')`).Scan(&open); err != nil {
				t.Fatal(err)
			}
			return len(ps) == n && young == 0 && open == 0, fmt.Sprintf("%d bank payments (%d young), %d settlements open", len(ps), young, open)
		})
		data, err := b.RenderStatement(time.Now().UTC(), fakebank.FormatCamt053, 0)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "camt053.xml")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, code := runSettle(t, db.URL, "statement", "import", "--statement-account", statementAccounts, file); code != 0 && code != 1 {
			t.Fatalf("settle statement import exited %d:\n%s", code, out)
		}
	}
	// Every payment has had its time to come back (the bank's own clock
	// says so), and the engine has booked every return the bank shows.
	var returnedAtBank map[string]bool
	settletest.Wait(t, "every return booked", func() (bool, string) {
		ps, err := bankclient.AllPayments(ctx, client)
		if err != nil {
			return false, err.Error()
		}
		returnedAtBank = map[string]bool{}
		young := 0
		for _, p := range ps {
			if time.Since(p.CreatedAt) < (settleMS+returnMS)*time.Millisecond {
				young++
			}
			if p.Status == bankclient.StatusReturned || p.Status == bankclient.StatusFailed {
				returnedAtBank[p.Reference] = true
			}
		}
		var open, notBooked int
		if err := db.Pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state NOT IN ('confirmed', 'failed', 'returned')),
			count(*) FILTER (WHERE state = 'confirmed' AND settlement_id = ANY($1))
			FROM settlements`, keys(returnedAtBank)).Scan(&open, &notBooked); err != nil {
			t.Fatal(err)
		}
		return len(ps) == n && young == 0 && open == 0 && notBooked == 0,
			fmt.Sprintf("%d bank payments (%d young), %d returned at the bank, %d settlements open, %d returns not booked", len(ps), young, len(returnedAtBank), open, notBooked)
	})

	checkInvariants(t, db, b, want)
	type row struct {
		state                           string
		payouts, reversals, toConfirmed int
	}
	rows, err := db.Pool.Query(ctx, `SELECT settlement_id, state,
		(SELECT count(*) FROM ledger_movements m WHERE m.settlement_id = s.settlement_id AND kind = 'payout'),
		(SELECT count(*) FROM ledger_movements m WHERE m.settlement_id = s.settlement_id AND kind = 'reversal'),
		(SELECT count(*) FROM settlement_transitions t WHERE t.settlement_id = s.settlement_id AND to_state = 'confirmed')
		FROM settlements s`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.state, &r.payouts, &r.reversals, &r.toConfirmed); err != nil {
			t.Fatal(err)
		}
		got[id] = r
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	var returned, failedEarly int
	for id := range returnedAtBank {
		r := got[id]
		switch {
		case r.state == "returned" && r.payouts == 1 && r.reversals == 1:
			returned++
		case r.state == "failed" && r.toConfirmed == 0 && r.payouts == 0 && r.reversals == 0:
			failedEarly++ // back before the engine saw it settle: nothing to reverse
		default:
			t.Errorf("%s: the bank returned its payment; it is %s with %d payout(s) and %d reversal(s) (confirmed %d time(s))",
				id, r.state, r.payouts, r.reversals, r.toConfirmed)
		}
	}
	for id, r := range got {
		if !returnedAtBank[id] && r.state != "confirmed" {
			t.Errorf("%s: %s, but the bank holds its payment settled", id, r.state)
		}
	}
	if returned == 0 {
		t.Errorf("no settlement ended returned (%d returned at the bank)", len(returnedAtBank))
	}
	t.Logf("%s: %d payments returned at the bank: %d settlements returned with one reversal, %d failed before confirmation",
		name, len(returnedAtBank), returned, failedEarly)

	// The ledger agrees with the bank: `settle reconcile bank` exits 0
	// (against the imported statements at a bank without a list).
	var (
		out  string
		code int
	)
	if b.conn.Capabilities.NoList {
		out, code = runSettle(t, db.URL, "reconcile", "bank", "--json", "--bank", name, "--statements")
	} else {
		out, code = reconcileBank(t, db.URL, name, b.url)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("settle reconcile bank exited %d: %v\n%s", code, err, out)
	}
	if rep["returned_agreed"] != float64(returned) {
		t.Errorf("reconcile bank: returned_agreed %v, want %d", rep["returned_agreed"], returned)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// reconcileBank runs `settle reconcile bank --json` against the database
// and the bank of connector name, and returns its output and exit status.
func reconcileBank(t *testing.T, dbURL, name, bankURL string) (string, int) {
	t.Helper()
	return runSettle(t, dbURL, "reconcile", "bank", "--json", "--bank", name, "--bank-url", bankURL)
}

// statementAccounts are the accounts the returns tests pay from: their
// statements are for these (--statement-account).
// (the settle profile books each payout on its settlement's account, the
// stripe profile on the platform's balance, the obie profile on the
// customer's account).
const statementAccounts = "acc-1,acc-00,acc-01,acc-02,acc-03,acc-04,acc-05,acc-06," +
	fakebank.StripeBalanceAccount + "," + fakebank.OBIEDebtorAccount

// runSettle runs the settle binary with args against the database at
// dbURL (none of the user's SETTLE_* settings) and returns its standard
// output and exit status; standard error is logged.
func runSettle(t *testing.T, dbURL string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bintest.Build(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "SETTLE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "DATABASE_URL="+dbURL)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Errorf("settle %s: %v", args[0], err)
		return string(out), -1
	}
	if stderr.Len() > 0 {
		t.Logf("settle %s stderr: %s", strings.Join(args[:2], " "), stderr.String())
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestReturnCrashPoints kills a worker at each return crash point: after
// the transition to returned and its reversal are written, just before
// their transaction commits (neither remains: the settlement is still
// confirmed with its payout alone) and just after (both remain). A second
// worker then finishes the job: one reversal, one transition to returned,
// every invariant held, `settle reconcile bank` clean.
func TestReturnCrashPoints(t *testing.T) {
	t.Parallel()
	for _, name := range []string{settle.Connector.Name, "stripe"} {
		for _, point := range []string{crash.ReturnBeforeCommit, crash.ReturnAfterCommit} {
			t.Run(name+"/"+point, func(t *testing.T) {
				t.Parallel()
				returnCrash(t, name, point)
			})
		}
	}
}

func returnCrash(t *testing.T, name, point string) {
	ctx := context.Background()
	db := dbtest.New(t)
	b := startBankAs(t, 1, fakebank.Faults{SettleDelayMS: 100}, name)
	flags := append(workerFlags(b.url), "--bank", name)
	ev := intake.Event{SettlementID: "ret-crash", AccountID: "acc-1", AmountCents: 4242, Currency: "EUR",
		Beneficiary: map[string]string{"stripe": "ba_1RetCrash"}[name], EventID: "first"}
	if ev.Beneficiary == "" {
		ev.Beneficiary = "bene-1"
	}
	w1 := startWorker(t, "w1", db.URL, []string{"SETTLE_CRASH_AT=" + point}, flags...)
	if code, err := post(w1.URL(), ev); err != nil || code != http.StatusCreated {
		t.Fatalf("delivery = %d, %v", code, err)
	}
	var paymentID string
	settletest.Wait(t, "the settlement confirmed", func() (bool, string) {
		var state string
		if err := db.Pool.QueryRow(ctx, `SELECT state, coalesce(bank_payment_id, '') FROM settlements`).Scan(&state, &paymentID); err != nil {
			return false, err.Error()
		}
		return state == "confirmed" && paymentID != "", state
	})
	if err := b.Return(paymentID, "AC04"); err != nil {
		t.Fatal(err)
	}
	if ps := waitExit(t, w1, 2*time.Minute); !workerproc.KilledBySIGKILL(ps) {
		t.Fatalf("w1 did not die by SIGKILL at %s: %v", point, ps)
	}
	state, reversals, toReturned := returnFacts(t, db)
	want := map[string]struct {
		state string
		n     int
	}{crash.ReturnBeforeCommit: {"confirmed", 0}, crash.ReturnAfterCommit: {"returned", 1}}[point]
	if state != want.state || reversals != want.n || toReturned != want.n {
		t.Fatalf("after the crash at %s: %s with %d reversal(s) and %d transition(s) to returned, want %s with %d of each",
			point, state, reversals, toReturned, want.state, want.n)
	}

	startWorker(t, "w2", db.URL, nil, flags...)
	settletest.Wait(t, "the settlement returned", func() (bool, string) {
		state, _, _ := returnFacts(t, db)
		return state == "returned", state
	})
	if state, reversals, toReturned := returnFacts(t, db); reversals != 1 || toReturned != 1 {
		t.Errorf("%s with %d reversal(s) and %d transition(s) to returned, want one of each", state, reversals, toReturned)
	}
	checkInvariants(t, db, b, map[string]int64{ev.SettlementID: ev.AmountCents})
	if out, code := reconcileBank(t, db.URL, name, b.url); code != 0 {
		t.Errorf("settle reconcile bank exited %d:\n%s", code, out)
	}
}

// returnFacts reads the one settlement's state, its reversals and its
// transitions to returned.
func returnFacts(t *testing.T, db *dbtest.DB) (state string, reversals, toReturned int) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(), `SELECT state,
		(SELECT count(*) FROM ledger_movements WHERE kind = 'reversal'),
		(SELECT count(*) FROM settlement_transitions WHERE to_state = 'returned')
		FROM settlements`).Scan(&state, &reversals, &toReturned); err != nil {
		t.Fatal(err)
	}
	return state, reversals, toReturned
}

// TestReturnFromEverySourceAtOnceProcesses: the same returns reported at
// once by every source, through real processes: two workers' return
// watches (status checks), signed webhooks posted to both workers twice
// each, and `settle statement import` of the bank's camt.053 run twice at
// the same moment. Each returned settlement books one reversal and one
// transition to returned.
func TestReturnFromEverySourceAtOnceProcesses(t *testing.T) {
	t.Parallel()
	const (
		n      = 6
		secret = "whsec-returns-at-once"
	)
	ctx := context.Background()
	db := dbtest.New(t)
	b := startBankAs(t, 3, fakebank.Faults{SettleDelayMS: 100}, settle.Connector.Name)
	flags := workerFlags(b.url)
	env := []string{"SETTLE_BANK_WEBHOOK_SECRET=" + secret}
	workers := []*workertest.Worker{startWorker(t, "w0", db.URL, env, flags...), startWorker(t, "w1", db.URL, env, flags...)}
	for i := range n {
		ev := intake.Event{SettlementID: fmt.Sprintf("once-%d", i), AccountID: "acc-1", AmountCents: int64(1000 + i),
			Currency: "EUR", Beneficiary: "bene-1"}
		if code, err := post(workers[i%2].URL(), ev); err != nil || code != http.StatusCreated {
			t.Fatalf("delivery = %d, %v", code, err)
		}
	}
	settletest.Wait(t, "every settlement confirmed", func() (bool, string) {
		var confirmed int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlements WHERE state = 'confirmed'`).Scan(&confirmed); err != nil {
			t.Fatal(err)
		}
		return confirmed == n, fmt.Sprintf("%d of %d confirmed", confirmed, n)
	})
	client, err := b.conn.New(b.url, bankclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := bankclient.AllPayments(ctx, client)
	if err != nil || len(ps) != n {
		t.Fatalf("%d bank payments, %v", len(ps), err)
	}
	for _, p := range ps {
		if err := b.Return(p.ID, "MD06"); err != nil {
			t.Fatal(err)
		}
	}
	stmt, err := b.RenderStatement(time.Now().UTC(), fakebank.FormatCamt053, 3)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "returns.camt.053.xml")
	if err := os.WriteFile(file, stmt, 0o600); err != nil {
		t.Fatal(err)
	}

	back, err := bankclient.AllPayments(ctx, client) // as they are now: returned
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*n+2)
	for range 2 {
		wg.Go(func() {
			if out, code := runSettle(t, db.URL, "statement", "import", "--statement-account", statementAccounts, file); code != 0 && code != 1 {
				errs <- fmt.Errorf("settle statement import exited %d:\n%s", code, out)
			}
		})
	}
	for _, p := range back {
		body, err := json.Marshal(settle.Webhook{Type: "payment.returned", Payment: p})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range workers {
			for range 2 {
				wg.Go(func() { errs <- postWebhook(w.URL(), body, secret) })
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	settletest.Wait(t, "every settlement returned", func() (bool, string) {
		var returned int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlements WHERE state = 'returned'`).Scan(&returned); err != nil {
			t.Fatal(err)
		}
		return returned == n, fmt.Sprintf("%d of %d returned", returned, n)
	})
	var reversals, toReturned, byStatement int
	if err := db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM ledger_movements WHERE kind = 'reversal'),
		(SELECT count(*) FROM settlement_transitions WHERE to_state = 'returned'),
		(SELECT count(*) FROM settlement_transitions WHERE to_state = 'returned' AND source = 'statement')`).
		Scan(&reversals, &toReturned, &byStatement); err != nil {
		t.Fatal(err)
	}
	if reversals != n || toReturned != n {
		t.Errorf("%d reversals and %d transitions to returned for %d returned settlements", reversals, toReturned, n)
	}
	t.Logf("%d returns booked once each: %d by the statement import, %d by a status check (watch or webhook)", n, byStatement, n-byStatement)
	checkInvariants(t, db, b, nil)
	if out, code := reconcileBank(t, db.URL, settle.Connector.Name, b.url); code != 0 {
		t.Errorf("settle reconcile bank exited %d:\n%s", code, out)
	}
}

// postWebhook posts a webhook of the settle protocol, signed with secret,
// to the worker at baseURL; the worker must answer 202 (check enqueued).
func postWebhook(baseURL string, body []byte, secret string) error {
	req, err := http.NewRequest(http.MethodPost, baseURL+"/v1/bank/webhooks/settle", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(settle.SignatureHeader, bankhttp.SignHMAC(body, secret, time.Now()))
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return nil
}
