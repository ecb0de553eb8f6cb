package jobs

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/testsupport/checktest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
	"github.com/settle/settle/statement/importer"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

type testBundle struct {
	db     *dbtest.DB
	bank   *fakebank.Bank
	url    string // the bank's
	client *river.Client[pgx.Tx]
	intake *intake.Service
	deps   Deps
}

// setup starts an in-process River client with every settle worker and
// short intervals against a fresh database and fakebank. start=false builds
// the client without starting it.
func setup(t *testing.T, faults fakebank.Faults, start bool, tweak func(*Deps)) *testBundle {
	t.Helper()
	db := dbtest.New(t)
	bank, url := fakebanktest.NewServer(t, fakebank.Options{Seed: 11, Faults: faults})
	bc, err := settle.New(url, bankclient.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewUnregistered()
	deps := Deps{
		Pool: db.Pool,
		Resolver: &reconcile.Resolver{
			DB: db.Pool, Bank: bc, KeyTTL: time.Hour,
			CheckInterval: 50 * time.Millisecond, MaxCheckInterval: 500 * time.Millisecond,
			Lease: 4 * time.Second, Metrics: m,
		},
		SweepInterval:     200 * time.Millisecond,
		JobTimeout:        3 * time.Second,
		FetchPollInterval: 50 * time.Millisecond,
		SoftStopTimeout:   2 * time.Second,
	}
	if tweak != nil {
		tweak(&deps)
	}
	if err := deps.Validate(); err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(db.Pool), NewRiverConfig(deps))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.NewService(intake.Config{DB: db.Pool, Jobs: Inserter{Client: client}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	b := &testBundle{db: db, bank: bank, url: url, client: client, intake: svc, deps: deps}
	if start {
		b.start(t)
	}
	return b
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		stopCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		if err := b.client.Stop(stopCtx); err != nil {
			t.Errorf("stopping River: %v", err)
		}
	})
}

func (b *testBundle) submit(t *testing.T, id string, amount int64) {
	t.Helper()
	_, err := b.intake.Submit(context.Background(), intake.Event{
		SettlementID: id, AccountID: "acc-" + id, AmountCents: amount, Currency: "EUR", Beneficiary: "bene-" + id,
	})
	if err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
}

// waitTerminal waits until want settlements exist and every one is
// confirmed or failed.
func waitTerminal(t *testing.T, db *dbtest.DB, want int) {
	t.Helper()
	settletest.Wait(t, fmt.Sprintf("%d terminal settlements", want), func() (bool, string) {
		var terminal, total int
		if err := db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FILTER (WHERE state IN ('confirmed', 'failed')), count(*) FROM settlements`).Scan(&terminal, &total); err != nil {
			t.Fatal(err)
		}
		state := fmt.Sprintf("%d of %d terminal", terminal, total)
		rows, _ := db.Pool.Query(context.Background(), `SELECT settlement_id || ' ' || state || ' ' || coalesce(investigation_reason, '')
			FROM settlements WHERE state NOT IN ('confirmed', 'failed') ORDER BY 1 LIMIT 5`)
		open, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		if len(open) > 0 {
			state += "; open: " + strings.Join(open, ", ")
		}
		return terminal == want && total == want, state
	})
}

func TestWorkersSettleUnderFaults(t *testing.T) {
	t.Parallel()
	b := setup(t, fakebank.Faults{
		FailBeforeRate: 0.1, DropResponseRate: 0.2, StatusErrorRate: 0.15,
		SettlementFailureRate: 0.05, RejectRate: 0.02, LatencyMaxMS: 10, SettleDelayMS: 100,
	}, true, nil)
	const n = 40
	for i := range n {
		b.submit(t, fmt.Sprintf("w-%03d", i), int64(100+i))
	}
	waitTerminal(t, b.db, n)
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{Recovered: true})

	// The send jobs completed in the transaction of their outcome.
	var notDone int
	if err := b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE kind = 'send_instruction' AND state NOT IN ('completed', 'cancelled')`).Scan(&notDone); err != nil {
		t.Fatal(err)
	}
	if notDone != 0 {
		t.Errorf("%d send_instruction jobs not completed", notDone)
	}
}

// history writes the transitions of a settlement inserted by hand, through
// states from its creation, and their events, so its history is what the
// engine would have written.
func history(t *testing.T, db *dbtest.DB, id string, states ...settlement.State) {
	t.Helper()
	var from *settlement.State
	for _, to := range states {
		if from == nil {
			// The creation, with its event and hold, by the state machine.
			if err := statemachine.Created(context.Background(), db.Pool, "written by the test", time.Now(), id); err != nil {
				t.Fatal(err)
			}
			from = &to
			continue
		}
		if _, err := db.Pool.Exec(context.Background(), `INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason, at)
			VALUES ($1, $2, $3, 'written by the test', now())`, id, from, to); err != nil {
			t.Fatal(err)
		}
		// And its event, as the state machine writes it.
		if _, err := db.Pool.Exec(context.Background(), `WITH s AS (
				UPDATE settlements SET event_seq = event_seq + 1 WHERE settlement_id = $1 RETURNING event_seq
			)
			INSERT INTO settlement_events (settlement_id, n, event_id, type, payload, created_at)
			SELECT $1, event_seq, $1 || ':' || event_seq, 'settlement.' || $3::text,
				jsonb_strip_nulls(jsonb_build_object('reason', 'written by the test', 'from_state', $2::text)), now()
			FROM s`, id, from, to); err != nil {
			t.Fatal(err)
		}
		from = &to
	}
}

// TestSweepSendsPendingWhoseJobWasLost: a pending settlement without any job
// (its send job was lost) is sent by the sweep once its next check is due.
func TestSweepSendsPendingWhoseJobWasLost(t *testing.T) {
	t.Parallel()
	b := setup(t, fakebank.Faults{SettleDelayMS: 50}, true, nil)
	ctx := context.Background()
	b.submit(t, "normal", 100)
	// A settlement as intake writes it, but without its job, already due.
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, next_check_at)
		VALUES ('orphan', 'acc', 'bene', 555, 'EUR', 'pending', $1, 'sha256:00', now() - interval '1 second')`, bankclient.KeyFor("orphan")); err != nil {
		t.Fatal(err)
	}
	history(t, b.db, "orphan", settlement.Pending)
	waitTerminal(t, b.db, 2)
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{Recovered: true})
	var kind string
	if err := b.db.Pool.QueryRow(ctx, `SELECT kind FROM river_job WHERE args->>'settlement_id' = 'orphan' ORDER BY id LIMIT 1`).Scan(&kind); err != nil {
		t.Fatal(err)
	}
	if kind != "send_instruction" {
		t.Errorf("sweep enqueued %s for a never-attempted pending settlement, want send_instruction", kind)
	}
}

// TestSweepNotBlockedByDeadRunningJob: a reconcile_settlement job left
// running by a dead process (not yet rescued) does not stop the sweep from
// enqueueing a new one.
func TestSweepNotBlockedByDeadRunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t, fakebank.Faults{SettleDelayMS: 0}, false, func(d *Deps) {
		d.JobTimeout, d.RescueAfter = 3*time.Second, time.Hour // no rescue during the test
	})
	ctx := context.Background()
	// A settlement sent (the bank has it) whose reconcile job died.
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, next_check_at, first_attempt_at)
		VALUES ('dead', 'acc', 'bene', 900, 'EUR', 'sent', $1, 'sha256:00', now() - interval '1 second', now())`, bankclient.KeyFor("dead")); err != nil {
		t.Fatal(err)
	}
	history(t, b.db, "dead", settlement.Pending, settlement.Sent)
	if _, err := b.deps.Resolver.Bank.Send(ctx, bankclient.KeyFor("dead"), bankclient.PaymentRequest{
		AmountCents: 900, Currency: "EUR", DebtorAccount: "acc", CreditorAccount: "bene", Reference: "dead"}); err != nil {
		t.Fatal(err)
	}
	// The dead job: inserted by an earlier sweep with the same uniqueness,
	// then left running.
	res, err := b.client.Insert(ctx, ReconcileSettlementArgs{SettlementID: "dead"}, &river.InsertOpts{
		Queue:       QueueFor(DefaultBank),
		ScheduledAt: time.Now().Add(-time.Minute),
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByPeriod: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, res.Job.ID); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	waitTerminal(t, b.db, 1)
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{Recovered: true})
}

func TestRetentionDeletesOnlyOldTerminalReceipts(t *testing.T) {
	t.Parallel()
	b := setup(t, fakebank.Faults{}, false, func(d *Deps) {
		d.ReplayHorizon = time.Hour
		d.RetentionInterval = 100 * time.Millisecond
	})
	ctx := context.Background()
	for _, s := range []struct {
		id, state string
		age       string
	}{{"old-done", "confirmed", "2 hours"}, {"old-moving", "uncertain", "2 hours"}, {"new-done", "failed", "1 minute"}} {
		if _, err := b.db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ($1, 'a', 'b', 1, 'EUR', $2, $3, 'sha256:00')`, s.id, s.state, bankclient.KeyFor(s.id)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.db.Pool.Exec(ctx, `INSERT INTO settlement_receipts (settlement_id, payload_hash, received_at)
			VALUES ($1, 'sha256:'||repeat('0', 64), now() - $2::interval)`, s.id, s.age); err != nil {
			t.Fatal(err)
		}
	}
	b.start(t)
	settletest.Wait(t, "retention to delete the old receipts", func() (bool, string) {
		rows, err := b.db.Pool.Query(ctx, `SELECT settlement_id FROM settlement_receipts ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 2 && (ids[0] != "new-done" || ids[1] != "old-moving") {
			t.Fatalf("receipts left: %v", ids)
		}
		return len(ids) == 2, fmt.Sprintf("receipts left: %v", ids)
	})
}

func TestDepsValidate(t *testing.T) {
	t.Parallel()
	if err := (Deps{}).Validate(); err == nil {
		t.Error("empty Deps validated")
	}
	d := Deps{Pool: nil}
	if err := d.Validate(); err == nil {
		t.Error("Deps without pool validated")
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: time.Minute, 100: time.Minute} {
		if got := retryDelay(attempt); got != want {
			t.Errorf("retryDelay(%d) = %s, want %s", attempt, got, want)
		}
	}
}

// TestRateLimitStormSlowsButNeverFails: a bank answering 429 past five
// requests a second slows the engine down; every settlement still ends
// confirmed, none failed or flagged, each paid once.
func TestRateLimitStormSlowsButNeverFails(t *testing.T) {
	t.Parallel()
	b := setup(t, fakebank.Faults{RateLimitPerS: 5, SettleDelayMS: 20}, true, nil)
	const n = 20
	for i := range n {
		b.submit(t, fmt.Sprintf("rl-%02d", i), int64(100+i))
	}
	waitTerminal(t, b.db, n)
	var confirmed, flagged int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE state = 'confirmed'),
		count(*) FILTER (WHERE needs_investigation) FROM settlements`).Scan(&confirmed, &flagged); err != nil {
		t.Fatal(err)
	}
	if confirmed != n || flagged != 0 {
		t.Errorf("%d confirmed, %d flagged; want all %d confirmed, none flagged", confirmed, flagged, n)
	}
	if tr := b.bank.Traffic(); tr.RateLimited == 0 {
		t.Errorf("the bank never rate-limited (%+v): the storm did not happen", tr)
	}
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{Recovered: true})
}

// TestReturnsFoundByTheWatch: the bank returns some settled payments a
// little after they settled; the return watch finds each, and every one
// ends returned with exactly one reversal, the others confirmed.
func TestReturnsFoundByTheWatch(t *testing.T) {
	t.Parallel()
	returnsFoundByTheWatch(t, false)
}

// TestReturnsFoundByTheWatchInRounds is TestReturnsFoundByTheWatch with
// the watch in rounds (reconcile.Resolver.WatchInBulk): the bank's list of
// returns, asked once a round, finds each return, and no confirmed
// settlement has a check of its own scheduled.
func TestReturnsFoundByTheWatchInRounds(t *testing.T) {
	t.Parallel()
	b := returnsFoundByTheWatch(t, true)
	ctx := context.Background()
	// Every fate can be booked before a round has completed: a payment
	// that came back before the engine first looked ends failed, with
	// nothing to watch. A round comes every WatchInterval all the same.
	settletest.Wait(t, "a watch round completed", func() (bool, string) {
		var n int
		if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'watch_returns' AND state = 'completed'`).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n > 0, fmt.Sprintf("%d watch rounds completed", n)
	})
	var scheduled, rounds int
	if err := b.db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM settlements WHERE state = 'confirmed' AND next_check_at IS NOT NULL),
		(SELECT count(*) FROM river_job WHERE kind = 'watch_returns' AND state = 'completed')`).Scan(&scheduled, &rounds); err != nil {
		t.Fatal(err)
	}
	if scheduled != 0 || rounds == 0 {
		t.Errorf("%d confirmed settlements with a check of their own, %d watch rounds completed; want none and some", scheduled, rounds)
	}
}

// returnsFoundByTheWatch runs TestReturnsFoundByTheWatch, the watch in
// rounds when inRounds.
func returnsFoundByTheWatch(t *testing.T, inRounds bool) *testBundle {
	b := setup(t, fakebank.Faults{ReturnRate: 0.5, ReturnAfterMS: 300, SettleDelayMS: 20}, true, func(d *Deps) {
		d.Resolver.ReturnWatch = time.Hour
		d.Resolver.WatchInBulk = inRounds
		d.WatchInterval = time.Second
	})
	const n = 16
	for i := range n {
		b.submit(t, fmt.Sprintf("rw-%02d", i), int64(500+i))
	}
	ctx := context.Background()
	// The bank settles every payment and returns about half 300 ms later.
	// A settlement the engine saw settle ends returned, with its reversal;
	// one whose payment came back before the engine looked ends failed
	// (nothing to reverse): both are right, which one is a matter of timing.
	settletest.Wait(t, "every payment's fate booked", func() (bool, string) {
		ps, err := bankclient.AllPayments(ctx, b.deps.Resolver.Bank)
		if err != nil {
			return false, err.Error()
		}
		rows, err := b.db.Pool.Query(ctx, `SELECT settlement_id, state FROM settlements`)
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]string{}
		for rows.Next() {
			var id, st string
			_ = rows.Scan(&id, &st)
			states[id] = st
		}
		rows.Close()
		open, atBank := 0, 0
		for _, p := range ps {
			switch st := states[p.Reference]; {
			case p.Status == bankclient.StatusReturned:
				atBank++
				if st != "returned" && st != "failed" {
					open++
				}
			case st != "confirmed":
				open++
			}
		}
		return len(ps) == n && open == 0 && atBank > 0, fmt.Sprintf("bank: %d payments, %d returned; %d settlements not yet where the bank says", len(ps), atBank, open)
	})
	var reversals int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_movements WHERE kind = 'reversal'`).Scan(&reversals); err != nil {
		t.Fatal(err)
	}
	var returned int
	_ = b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlements WHERE state = 'returned'`).Scan(&returned)
	if reversals != returned {
		t.Errorf("%d reversals for %d returned settlements", reversals, returned)
	}
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{Recovered: true})
	return b
}

// TestCheckNowAsksAfterTheHint: a webhook's hint must make the bank be
// asked after the hint came. A hint rides on a hint check not yet started;
// never on a finished one (which read the bank before the news: a return
// pushed a second after the settled push waited for the return watch) nor
// on a running one (which may have asked already).
func TestCheckNowAsksAfterTheHint(t *testing.T) {
	t.Parallel()
	b := setup(t, fakebank.Faults{}, false, nil)
	ctx := t.Context()
	in := Inserter{Client: b.client}
	jobs := func() (waiting, all int) {
		t.Helper()
		err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'available'), count(*)
			FROM river_job WHERE kind = 'reconcile_settlement' AND args->>'settlement_id' = 'st-hint'`).Scan(&waiting, &all)
		if err != nil {
			t.Fatal(err)
		}
		return waiting, all
	}
	hint := func() {
		t.Helper()
		if err := in.CheckNow(ctx, "st-hint", "settle"); err != nil {
			t.Fatal(err)
		}
	}
	hint()
	hint()
	if w, a := jobs(); w != 1 || a != 1 {
		t.Fatalf("two hints on a waiting check: %d waiting of %d jobs, want 1 of 1", w, a)
	}
	if _, err := b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'completed', attempt = 1, attempted_at = now(), finalized_at = now()
		WHERE kind = 'reconcile_settlement'`); err != nil {
		t.Fatal(err)
	}
	hint()
	if w, a := jobs(); w != 1 || a != 2 {
		t.Fatalf("a hint after a completed check: %d waiting of %d jobs, want a new one (1 of 2)", w, a)
	}
	if _, err := b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
		WHERE kind = 'reconcile_settlement' AND state = 'available'`); err != nil {
		t.Fatal(err)
	}
	hint()
	hint()
	if w, a := jobs(); w != 1 || a != 3 {
		t.Fatalf("two hints while a check runs: %d waiting of %d jobs, want one new (1 of 3)", w, a)
	}
	// The settlement's own scheduled check is no hint check: a hint does
	// not ride on it.
	if _, err := b.db.Pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'reconcile_settlement'`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Insert(ctx, ReconcileSettlementArgs{SettlementID: "st-hint", NotBefore: time.Now().Add(time.Hour)},
		&river.InsertOpts{Queue: QueueFor("settle")}); err != nil {
		t.Fatal(err)
	}
	hint()
	if w, a := jobs(); w != 2 || a != 2 {
		t.Fatalf("a hint beside the settlement's own check due in an hour: %d waiting of %d jobs, want 2 of 2", w, a)
	}
}

// TestRematchMatchesALineImportedBeforeItsSettlement: a statement line
// imported before its settlement existed is matched by the worker's
// periodic statement_rematch once the settlement is paid, with nothing
// booked twice (the one invariant checker, against the bank's books).
func TestRematchMatchesALineImportedBeforeItsSettlement(t *testing.T) {
	t.Parallel()
	b := setup(t, fakebank.Faults{}, true, func(d *Deps) { d.RematchInterval = 100 * time.Millisecond })
	ctx := context.Background()
	ref := bankclient.Capabilities{}.Reference("rm-1")
	file := ":20:EARLY\n:25:acc-rm\n:28C:1/1\n:60F:C300101EUR100,00\n" +
		":61:3001010101D15,00NTRFNONREF//B-1\n:86:/EREF/" + ref + "/NAME/bene-rm-1\n:62F:C300101EUR85,00\n"
	im := &importer.StatementImporter{DB: b.db.Pool, Accounts: []string{"acc-rm"}}
	res, err := im.Import(ctx, "early.sta", strings.NewReader(file))
	if err != nil || res.Matched != 0 || res.Unmatched != 1 {
		t.Fatalf("import before the settlement: %+v, %v; want one unmatched line", res, err)
	}
	b.submit(t, "rm-1", 1500)
	waitTerminal(t, b.db, 1)
	settletest.Wait(t, "the line to be matched", func() (bool, string) {
		var match, sid string
		if err := b.db.Pool.QueryRow(ctx, `SELECT match, coalesce(settlement_id, '') FROM bank_statement_entries`).Scan(&match, &sid); err != nil {
			t.Fatal(err)
		}
		return match == "reference" && sid == "rm-1", "line " + match + " " + sid
	})
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{Recovered: true})
}

// racingBank loses the answer to the first Send (the payment is made) and
// holds the next call, whichever it is, until released: the settlement's
// own check is then asking the bank while the test moves the settlement
// under it.
type racingBank struct {
	bankclient.Bank
	mu      sync.Mutex
	calls   int
	asking  chan struct{}
	release chan struct{}
}

// next counts a call and holds the second until released.
func (b *racingBank) next(ctx context.Context) (int, error) {
	b.mu.Lock()
	b.calls++
	n := b.calls
	b.mu.Unlock()
	if n == 2 {
		close(b.asking)
		select {
		case <-b.release:
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
	return n, nil
}

func (b *racingBank) Send(ctx context.Context, key string, req bankclient.PaymentRequest) (bankclient.SendResult, error) {
	n, err := b.next(ctx)
	if err != nil {
		return bankclient.SendResult{}, err
	}
	res, err := b.Bank.Send(ctx, key, req)
	if n == 1 && err == nil {
		return bankclient.SendResult{}, &bankclient.AmbiguousError{Op: bankclient.OpSend}
	}
	return res, err
}

func (b *racingBank) StatusByKey(ctx context.Context, key string) (bankclient.Payment, error) {
	if _, err := b.next(ctx); err != nil {
		return bankclient.Payment{}, err
	}
	return b.Bank.StatusByKey(ctx, key)
}

// TestOwnCheckKeepsTheScheduleAfterALostRace: while the settlement's own
// check asks the bank, another process (a webhook's hint check, or the
// console's redirect) moves the settlement onward to sent. The own check's
// decision is stale (a lost race), and it is the check that keeps the
// settlement's schedule: it goes on from sent and the settlement is
// confirmed, with the sweep unable to take over (a lease of an hour).
func TestOwnCheckKeepsTheScheduleAfterALostRace(t *testing.T) {
	t.Parallel()
	bank := &racingBank{asking: make(chan struct{}), release: make(chan struct{})}
	b := setup(t, fakebank.Faults{SettleDelayMS: 1500}, false, func(d *Deps) {
		bank.Bank = d.Resolver.Bank
		d.Resolver.Bank = bank
		d.Resolver.Lease = time.Hour
	})
	b.start(t)
	b.submit(t, "st-race", 1234)
	select {
	case <-bank.asking:
	case <-time.After(settletest.WaitLimit):
		t.Fatal("the own check never asked the bank")
	}
	// Another process checks it meanwhile: the bank holds the payment,
	// not settled yet, and the settlement moves uncertain → sent.
	out, err := b.deps.Resolver.Resolve(t.Context(), "st-race", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != settlement.Sent {
		t.Fatalf("the other check moved it to %s, want sent", out.State)
	}
	close(bank.release)
	waitTerminal(t, b.db, 1)
	var state string
	if err := b.db.Pool.QueryRow(t.Context(), `SELECT state FROM settlements WHERE settlement_id = 'st-race'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != string(settlement.Confirmed) {
		t.Fatalf("settlement %s, want confirmed", state)
	}
	checktest.CheckInvariants(t, b.db.Pool, b.url, audit.Expect{Recovered: true})
}

// TestCheckRedirectRecordsTheRedirect: the account holder's redirect
// inserts a hint check whose transitions record the redirect, not a bank's
// webhook; a webhook's hint records the webhook, the sweep's check the
// sweep, any other the worker.
func TestCheckRedirectRecordsTheRedirect(t *testing.T) {
	t.Parallel()
	b := setup(t, fakebank.Faults{}, false, nil)
	ctx := t.Context()
	if err := (Inserter{Client: b.client}).CheckRedirect(ctx, "st-redirect", "settle"); err != nil {
		t.Fatal(err)
	}
	var args ReconcileSettlementArgs
	if err := b.db.Pool.QueryRow(ctx, `SELECT args FROM river_job WHERE kind = 'reconcile_settlement' AND args->>'settlement_id' = 'st-redirect'`).
		Scan(&args); err != nil {
		t.Fatal(err)
	}
	if !args.Hint || args.source() != settlement.SourceRedirect {
		t.Errorf("the redirect's check %+v records %q, want a hint recording redirect", args, args.source())
	}
	for _, tc := range []struct {
		args ReconcileSettlementArgs
		want settlement.Source
	}{
		{ReconcileSettlementArgs{Hint: true}, settlement.SourceWebhook},
		{ReconcileSettlementArgs{Sweep: true}, settlement.SourceSweep},
		{ReconcileSettlementArgs{}, settlement.SourceWorker},
	} {
		if got := tc.args.source(); got != tc.want {
			t.Errorf("%+v records %q, want %q", tc.args, got, tc.want)
		}
	}
}
