package statemachine_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

type testBundle struct {
	tx pgx.Tx
}

// setup gives the test a transaction on a migrated database, rolled back
// when the test ends, holding one pending settlement "s1".
func setup(t *testing.T, db *dbtest.DB) *testBundle {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		VALUES ('s1', 'acc', 'ben', 100, 'EUR', 'pending', 'k1', 'sha256:00')`); err != nil {
		t.Fatal(err)
	}
	return &testBundle{tx: tx}
}

func TestAllowedTable(t *testing.T) {
	t.Parallel()
	want := map[[2]settlement.State]bool{
		{"pending", "sent"}: true, {"pending", "uncertain"}: true, {"pending", "failed"}: true, {"pending", "confirmed"}: true,
		{"sent", "confirmed"}: true, {"sent", "failed"}: true, {"sent", "uncertain"}: true,
		{"uncertain", "sent"}: true, {"uncertain", "confirmed"}: true, {"uncertain", "failed"}: true, {"uncertain", "pending"}: true,
		{"confirmed", "returned"}: true,
	}
	n := 0
	for _, from := range settlement.States {
		for _, to := range settlement.States {
			if got := statemachine.Allowed(from, to); got != want[[2]settlement.State{from, to}] {
				t.Errorf("Allowed(%s, %s) = %v", from, to, got)
			}
			if statemachine.Allowed(from, to) {
				n++
			}
		}
		if from.Terminal() != (from == settlement.Confirmed || from == settlement.Failed || from == settlement.Returned) {
			t.Errorf("%s.Terminal() wrong", from)
		}
	}
	if n != len(want) {
		t.Errorf("%d allowed transitions, want %d", n, len(want))
	}
	if settlement.State("paid").Valid() || statemachine.Allowed("paid", "sent") {
		t.Error("an unknown state is accepted")
	}
}

// TestTransitionEveryPair runs every (from, to) pair against the database:
// allowed pairs move the row and append history, the others change nothing.
func TestTransitionEveryPair(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	for _, from := range settlement.States {
		for _, to := range settlement.States {
			t.Run(string(from)+"_to_"+string(to), func(t *testing.T) {
				t.Parallel()
				b := setup(t, db)
				ctx := context.Background()
				if _, err := b.tx.Exec(ctx, "UPDATE settlements SET state = $1 WHERE settlement_id = 's1'", string(from)); err != nil {
					t.Fatal(err)
				}
				err := statemachine.Transition(ctx, b.tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "s1", From: from, To: to, Reason: "test", At: time.Unix(1700000000, 0)})
				var state string
				var history int
				if err := b.tx.QueryRow(ctx, "SELECT state, (SELECT count(*) FROM settlement_transitions WHERE settlement_id = 's1') FROM settlements WHERE settlement_id = 's1'").Scan(&state, &history); err != nil {
					t.Fatal(err)
				}
				if statemachine.Allowed(from, to) {
					if err != nil || state != string(to) || history != 1 {
						t.Fatalf("allowed %s→%s: err=%v state=%s history=%d", from, to, err, state, history)
					}
					return
				}
				if !errors.Is(err, statemachine.ErrForbidden) || state != string(from) || history != 0 {
					t.Fatalf("forbidden %s→%s: err=%v state=%s history=%d", from, to, err, state, history)
				}
			})
		}
	}
}

func TestTransitionLostRaceAndNotFound(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := setup(t, db)
	ctx := context.Background()
	// The settlement is pending; a worker believing it is sent loses.
	err := statemachine.Transition(ctx, b.tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "s1", From: settlement.Sent, To: settlement.Confirmed, Reason: "test"})
	var te *statemachine.TransitionError
	if !errors.Is(err, statemachine.ErrLostRace) || !errors.As(err, &te) || te.Actual != settlement.Pending {
		t.Fatalf("err = %v, want lost race with actual pending", err)
	}
	err = statemachine.Transition(ctx, b.tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "nope", From: settlement.Pending, To: settlement.Sent, Reason: "test"})
	if !errors.Is(err, settlement.ErrNotFound) {
		t.Fatalf("err = %v, want not found", err)
	}
}

// TestConcurrentTransitionsOneWinner races two transactions from the same
// state: exactly one commits its transition.
func TestConcurrentTransitionsOneWinner(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		VALUES ('r1', 'acc', 'ben', 100, 'EUR', 'sent', 'k1', 'sha256:00')`); err != nil {
		t.Fatal(err)
	}
	const n = 8
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		to := settlement.Confirmed
		if i%2 == 1 {
			to = settlement.Failed
		}
		go func() {
			errs <- pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "r1", From: settlement.Sent, To: to, Reason: "race"})
			})
		}()
	}
	wins := 0
	for i := 0; i < n; i++ {
		err := <-errs
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, statemachine.ErrLostRace):
			t.Errorf("unexpected error: %v", err)
		}
	}
	var history int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM settlement_transitions WHERE settlement_id = 'r1'").Scan(&history); err != nil {
		t.Fatal(err)
	}
	if wins != 1 || history != 1 {
		t.Fatalf("wins=%d history=%d, want 1 and 1", wins, history)
	}
}

// TestCreatedMany records the creation of many settlements in one call:
// one pending transition each, none for an empty call.
func TestCreatedMany(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := setup(t, db)
	ctx := context.Background()
	ids := []string{"s1"}
	for _, id := range []string{"m1", "m2", "m3"} {
		if _, err := b.tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ($1, 'acc', 'ben', 100, 'EUR', 'pending', 'k-'||$1, 'sha256:00')`, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}, ids[:1]...); err != nil {
		t.Fatal(err)
	}
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}, ids[1:]...); err != nil {
		t.Fatal(err)
	}
	var n, distinct int
	if err := b.tx.QueryRow(ctx, `SELECT count(*), count(DISTINCT settlement_id) FROM settlement_transitions
		WHERE from_state IS NULL AND to_state = 'pending' AND reason = 'received'`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != 4 || distinct != 4 {
		t.Fatalf("%d creation transitions for %d settlements, want 4 and 4", n, distinct)
	}
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}, "missing"); err == nil {
		t.Fatal("creation of an unknown settlement recorded")
	}
}

// countRowVersions makes every new version of a settlements row in db
// count in the transaction's setting test.row_versions (a trigger of this
// test's own database), so that a test can read how many times a
// transaction rewrote settlements rows.
func countRowVersions(t *testing.T, db *dbtest.DB) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `
		CREATE FUNCTION test_count_row_versions() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM set_config('test.row_versions',
				(coalesce(nullif(current_setting('test.row_versions', true), ''), '0')::int + 1)::text, true);
			RETURN NULL;
		END $$;
		CREATE TRIGGER test_count_row_versions AFTER UPDATE ON settlements
			FOR EACH ROW EXECUTE FUNCTION test_count_row_versions()`); err != nil {
		t.Fatal(err)
	}
}

// rowVersions is how many settlements rows q's transaction has rewritten
// so far (countRowVersions).
func rowVersions(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var n int
	err := q.QueryRow(ctx, "SELECT coalesce(nullif(current_setting('test.row_versions', true), ''), '0')::int").Scan(&n)
	return n, err
}

// rowUpdates is rowVersions of tx, failing t on an error.
func rowUpdates(t *testing.T, tx pgx.Tx) int {
	t.Helper()
	n, err := rowVersions(context.Background(), tx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCreatedCountedWritesNoRowVersion records the creation of a
// settlement inserted with its creation event counted without rewriting
// its row, and still counts the event of one inserted without: both get
// event 1, and a second creation of the first is refused.
func TestCreatedCountedWritesNoRowVersion(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	countRowVersions(t, db)
	b := setup(t, db) // s1, inserted with event_seq 0
	ctx := context.Background()
	if _, err := b.tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, event_seq)
		VALUES ('c1', 'acc', 'ben', 100, 'EUR', 'pending', 'k-c1', 'sha256:00', `+statemachine.CreationCounted+`)`); err != nil {
		t.Fatal(err)
	}
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}, "c1"); err != nil {
		t.Fatal(err)
	}
	if n := rowUpdates(t, b.tx); n != 0 {
		t.Fatalf("Created rewrote %d rows of a settlement inserted with its creation counted, want 0", n)
	}
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}, "s1"); err != nil {
		t.Fatal(err)
	}
	if n := rowUpdates(t, b.tx); n != 1 {
		t.Fatalf("Created counted %d rows of a settlement inserted without, want 1", n)
	}
	for _, id := range []string{"c1", "s1"} {
		var seq, events, held int
		if err := b.tx.QueryRow(ctx, `SELECT event_seq,
				(SELECT count(*) FROM settlement_events e WHERE e.settlement_id = s.settlement_id AND e.n = 1 AND e.type = 'settlement.pending'),
				(SELECT count(*) FROM ledger_holds h WHERE h.settlement_id = s.settlement_id AND h.state = 'held')
			FROM settlements s WHERE settlement_id = $1`, id).Scan(&seq, &events, &held); err != nil {
			t.Fatal(err)
		}
		if seq != 1 || events != 1 || held != 1 {
			t.Errorf("%s: event_seq %d, creation events %d, holds %d; want 1, 1, 1", id, seq, events, held)
		}
	}
	if _, err := b.tx.Exec(ctx, "SAVEPOINT again"); err != nil {
		t.Fatal(err)
	}
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}, "c1"); err == nil {
		t.Fatal("a second creation of c1 was recorded")
	}
	if _, err := b.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT again"); err != nil {
		t.Fatal(err)
	}
}

// TestTransitionSetRewritesTheRowOnce writes the caller's columns with the
// transition, in its one UPDATE, and refuses a Set that assigns a column of
// the transition itself.
func TestTransitionSetRewritesTheRowOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	countRowVersions(t, db)
	b := setup(t, db)
	ctx := context.Background()
	err := statemachine.Transition(ctx, b.tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "s1", From: settlement.Pending, To: settlement.Sent, Reason: "test",
		Set: "bank_payment_id = COALESCE($6, bank_payment_id), check_attempts = check_attempts + $7", SetArgs: []any{"pay-1", 2}})
	if err != nil {
		t.Fatal(err)
	}
	if n := rowUpdates(t, b.tx); n != 1 {
		t.Fatalf("the transition and its Set made %d row versions, want 1", n)
	}
	var state, paymentID string
	var checks, seq int
	if err := b.tx.QueryRow(ctx, "SELECT state, bank_payment_id, check_attempts, event_seq FROM settlements WHERE settlement_id = 's1'").
		Scan(&state, &paymentID, &checks, &seq); err != nil {
		t.Fatal(err)
	}
	if state != "sent" || paymentID != "pay-1" || checks != 2 || seq != 1 {
		t.Fatalf("row: state %s, payment %s, checks %d, event_seq %d", state, paymentID, checks, seq)
	}
	for _, set := range []string{"state = 'failed'", "bank_status = 'x', event_seq = 0", "UPDATED_AT=now()"} {
		err := statemachine.Transition(ctx, b.tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "s1", From: settlement.Sent, To: settlement.Confirmed, Reason: "test", Set: set})
		if err == nil || errors.Is(err, statemachine.ErrLostRace) {
			t.Errorf("Set %q: err = %v, want refused", set, err)
		}
	}
	if n := rowUpdates(t, b.tx); n != 1 {
		t.Fatalf("a refused Set wrote: %d row versions", n)
	}
}

// TestTransitionSource: every transition records who made it: the
// creation intake, a Change its Source, a Change naming none the worker;
// a Set's parameters keep their numbers.
func TestTransitionSource(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := setup(t, db)
	ctx := context.Background()
	if err := statemachine.Created(ctx, b.tx, "received", time.Now(), "s1"); err != nil {
		t.Fatal(err)
	}
	if err := statemachine.Transition(ctx, b.tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "s1", From: settlement.Pending, To: settlement.Sent, Reason: "test",
		Set: "bank_payment_id = $6", SetArgs: []any{"pay-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := statemachine.Transition(ctx, b.tx, statemachine.Change{SettlementID: "s1", From: settlement.Sent, To: settlement.Confirmed, Reason: "statement: paid",
		Source: settlement.SourceStatement}); err != nil {
		t.Fatal(err)
	}
	// A Change that does not say who moved the settlement is refused,
	// never recorded as someone else's.
	if err := statemachine.Transition(ctx, b.tx, statemachine.Change{SettlementID: "s1", From: settlement.Confirmed, To: settlement.Returned,
		Reason: "returned"}); !errors.Is(err, statemachine.ErrNoSource) {
		t.Errorf("a change without a source: %v, want ErrNoSource", err)
	}
	if err := statemachine.Transition(ctx, b.tx, statemachine.Change{SettlementID: "s1", From: settlement.Confirmed, To: settlement.Returned,
		Reason: "returned", Source: settlement.SourceRedirect}); err != nil {
		t.Fatal(err)
	}
	rows, err := b.tx.Query(ctx, `SELECT to_state || ':' || source FROM settlement_transitions WHERE settlement_id = 's1' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"pending:intake", "sent:worker", "confirmed:statement", "returned:redirect"}; !slices.Equal(got, want) {
		t.Errorf("transitions %v, want %v", got, want)
	}
	var paymentID string
	if err := b.tx.QueryRow(ctx, `SELECT bank_payment_id FROM settlements WHERE settlement_id = 's1'`).Scan(&paymentID); err != nil || paymentID != "pay-1" {
		t.Errorf("bank_payment_id %q, %v; want pay-1", paymentID, err)
	}
}
