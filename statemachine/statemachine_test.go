package statemachine_test

import (
	"context"
	"errors"
	"os"
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
				err := statemachine.Transition(ctx, b.tx, statemachine.Change{SettlementID: "s1", From: from, To: to, Reason: "test", At: time.Unix(1700000000, 0)})
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
	err := statemachine.Transition(ctx, b.tx, statemachine.Change{SettlementID: "s1", From: settlement.Sent, To: settlement.Confirmed, Reason: "test"})
	var te *statemachine.TransitionError
	if !errors.Is(err, statemachine.ErrLostRace) || !errors.As(err, &te) || te.Actual != settlement.Pending {
		t.Fatalf("err = %v, want lost race with actual pending", err)
	}
	err = statemachine.Transition(ctx, b.tx, statemachine.Change{SettlementID: "nope", From: settlement.Pending, To: settlement.Sent, Reason: "test"})
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
				return statemachine.Transition(ctx, tx, statemachine.Change{SettlementID: "r1", From: settlement.Sent, To: to, Reason: "race"})
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
