package statemachine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/settlement/settlementdb"
	"github.com/settle/settle/statemachine"
)

type eventRow struct {
	id, typ string
	n       int
	payload map[string]any
}

func events(t *testing.T, q inspect.Querier, id string) []eventRow {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT event_id, type, n, payload FROM settlement_events WHERE settlement_id = $1 ORDER BY n`, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (eventRow, error) {
		var e eventRow
		return e, row.Scan(&e.id, &e.typ, &e.n, &e.payload)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func insertSettlement(t *testing.T, q statemachine.DBTX, id string) {
	t.Helper()
	if _, err := q.Exec(context.Background(), `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		VALUES ($1, 'acc', 'ben', 100, 'EUR', 'pending', 'k-'||$1, 'sha256:00')`, id); err != nil {
		t.Fatal(err)
	}
}

// createSettlement inserts settlement id and records its creation, in a
// transaction of its own, committed.
func createSettlement(t *testing.T, db *dbtest.DB, id string) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		insertSettlement(t, tx, id)
		return statemachine.Created(ctx, tx, "received", time.Time{}, id)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestEventsOfAStory walks one settlement through creation, transitions, a
// flag and a conflict, committing each step, and checks its events: their
// ids, types, order, and a payload that is the settlement as GET shows it
// at the commit of each step.
func TestEventsOfAStory(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	step := func(fn func(tx pgx.Tx) error) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, db.Pool, fn); err != nil {
			t.Fatal(err)
		}
	}
	step(func(tx pgx.Tx) error {
		insertSettlement(t, tx, "st1")
		return statemachine.Created(ctx, tx, "received", at, "st1")
	})
	step(func(tx pgx.Tx) error {
		return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "st1", From: settlement.Pending, To: settlement.Sent, Reason: "accepted", At: at})
	})
	step(func(tx pgx.Tx) error {
		return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "st1", From: settlement.Sent, To: settlement.Uncertain, Reason: "timeout", At: at})
	})
	step(func(tx pgx.Tx) error { return statemachine.Flag(ctx, tx, "st1", "key_ttl_passed", at) })
	step(func(tx pgx.Tx) error { return statemachine.Flag(ctx, tx, "st1", "key_ttl_passed", at) }) // no change, no event
	step(func(tx pgx.Tx) error {
		return statemachine.RecordConflicts(ctx, tx, at,
			statemachine.Conflict{SettlementID: "st1", StoredHash: "sha256:00", IncomingHash: "sha256:01", Incoming: []byte(`{"amount_cents":5}`)},
			statemachine.Conflict{SettlementID: "st1", StoredHash: "sha256:00", IncomingHash: "sha256:02", EventID: "e9"})
	})
	step(func(tx pgx.Tx) error {
		if err := statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "st1", From: settlement.Uncertain, To: settlement.Confirmed, Reason: "settled", At: at}); err != nil {
			return err
		}
		if err := statemachine.Flag(ctx, tx, "st1", "", at); err != nil { // clearing writes no event
			return err
		}
		// Written after the transition, in its transaction: the event shows it.
		_, err := tx.Exec(ctx, `INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency, bank_payment_id)
			VALUES ('st1', 'payout', 'acc', 100, 'EUR', 'pay_1')`)
		return err
	})

	got := events(t, db.Pool, "st1")
	want := []struct{ typ, from, reason string }{
		{"settlement.pending", "", "received"},
		{"settlement.sent", "pending", "accepted"},
		{"settlement.uncertain", "sent", "timeout"},
		{"settlement.flagged", "", "key_ttl_passed"},
		{"settlement.conflict", "", "receipt_conflict"},
		{"settlement.conflict", "", "receipt_conflict"},
		{"settlement.confirmed", "uncertain", "settled"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		id := fmt.Sprintf("st1:%d", i+1)
		if e.id != id || e.n != i+1 || e.typ != w.typ || e.payload["event_id"] != id || e.payload["reason"] != w.reason {
			t.Errorf("event %d = %s %s n=%d payload %v, want %s %s %s", i, e.id, e.typ, e.n, e.payload, id, w.typ, w.reason)
		}
		if from, _ := e.payload["from_state"].(string); from != w.from {
			t.Errorf("event %s from_state %q, want %q", id, from, w.from)
		}
		if e.payload["at"] != "2026-01-02T03:04:05.000000Z" {
			t.Errorf("event %s at %v", id, e.payload["at"])
		}
		st := e.payload["settlement"].(map[string]any)
		if st["settlement_id"] != "st1" || st["amount_cents"] != float64(100) {
			t.Errorf("event %s settlement %v", id, st)
		}
	}
	if got[4].payload["incoming_hash"] != "sha256:01" || got[5].payload["incoming_event_id"] != "e9" {
		t.Errorf("conflict payloads %v %v", got[4].payload, got[5].payload)
	}
	if st := got[3].payload["settlement"].(map[string]any); st["state"] != "uncertain" || st["investigation_reason"] != "key_ttl_passed" {
		t.Errorf("flag event shows %v", st)
	}

	// The last event's payload is GET /v1/settlements/{id} at its commit.
	var fromEvent settlement.View
	raw, _ := json.Marshal(got[6].payload)
	if err := json.Unmarshal(raw, &fromEvent); err != nil {
		t.Fatal(err)
	}
	view, err := settlementdb.LoadView(ctx, db.Pool, "st1")
	if err != nil {
		t.Fatal(err)
	}
	if fromEvent.Movement == nil || fromEvent.Movement.BankPaymentID != "pay_1" || fromEvent.Settlement.State != settlement.Confirmed ||
		fromEvent.Settlement.NeedsInvestigation || len(fromEvent.Transitions) != 4 {
		t.Fatalf("confirmed event's settlement = %+v", fromEvent)
	}
	a, _ := json.Marshal(utc(fromEvent))
	b, _ := json.Marshal(utc(view))
	if string(a) != string(b) {
		t.Errorf("event payload differs from GET:\n%s\n%s", a, b)
	}

	if v, err := audit.EventViolations(ctx, db.Pool); err != nil || len(v) != 0 {
		t.Fatalf("invariants: %v %v", v, err)
	}
}

// utc puts every time of v in UTC, to microseconds (what PostgreSQL keeps).
func utc(v settlement.View) settlement.View {
	u := func(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
	up := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		x := u(*t)
		return &x
	}
	v.Settlement.CreatedAt, v.Settlement.UpdatedAt = u(v.Settlement.CreatedAt), u(v.Settlement.UpdatedAt)
	v.Bank.FirstAttemptAt, v.Bank.NextCheckAt = up(v.Bank.FirstAttemptAt), up(v.Bank.NextCheckAt)
	for i := range v.Transitions {
		v.Transitions[i].At = u(v.Transitions[i].At)
	}
	for i := range v.BankAttempts {
		v.BankAttempts[i].StartedAt, v.BankAttempts[i].FinishedAt = u(v.BankAttempts[i].StartedAt), up(v.BankAttempts[i].FinishedAt)
	}
	if v.Movement != nil {
		m := *v.Movement
		m.CreatedAt = u(m.CreatedAt)
		v.Movement = &m
	}
	if v.Receipt != nil {
		r := *v.Receipt
		r.ReceivedAt, r.OccurredAt, r.LastReplayAt = u(r.ReceivedAt), up(r.OccurredAt), up(r.LastReplayAt)
		v.Receipt = &r
	}
	return v
}

// TestEventsNumberedUnderConcurrency flags, records conflicts and moves
// one settlement from many transactions at once: its events are numbered
// 1..n without a gap or a duplicate, and a rolled-back transaction leaves
// no event.
func TestEventsNumberedUnderConcurrency(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createSettlement(t, db, "c1")
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				return statemachine.RecordConflicts(ctx, tx, time.Time{}, statemachine.Conflict{SettlementID: "c1", StoredHash: "sha256:00", IncomingHash: fmt.Sprintf("sha256:%02d", i+1)})
			})
		}()
		go func() {
			defer wg.Done()
			errs <- pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				return statemachine.Flag(ctx, tx, "c1", []string{"consent_lost", "key_ttl_passed"}[i%2], time.Time{})
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A rolled-back transition leaves nothing.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "c1", From: settlement.Pending, To: settlement.Sent, Reason: "x"}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)

	got := events(t, db.Pool, "c1")
	conflicts := 0
	for i, e := range got {
		if e.n != i+1 || e.id != fmt.Sprintf("c1:%d", i+1) {
			t.Fatalf("event %d is %s (n=%d)", i, e.id, e.n)
		}
		if e.typ == statemachine.EventConflict {
			conflicts++
		}
	}
	if conflicts != n {
		t.Fatalf("%d conflict events, want %d", conflicts, n)
	}
	if v, err := audit.EventViolations(ctx, db.Pool); err != nil || len(v) != 0 {
		t.Fatalf("invariants: %v %v", v, err)
	}
}

// TestInvariantsCatchAMissingEvent: a transition written behind the state
// machine's back (no event) is a violation.
func TestInvariantsCatchAMissingEvent(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := setup(t, db)
	ctx := context.Background()
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.tx.Exec(ctx, `UPDATE settlements SET state = 'sent' WHERE settlement_id = 's1';
		INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason) VALUES ('s1', 'pending', 'sent', 'sneaky')`); err != nil {
		t.Fatal(err)
	}
	v, err := audit.EventViolations(ctx, b.tx)
	if err != nil {
		t.Fatal(err)
	}
	// Two: the transition without its event, and the settlement's last
	// event, which does not hold the state it is in (nor, before this
	// transaction's commit fills it, any state).
	if len(v) != 2 || !strings.Contains(v[0], "transition 2 (pending → sent) has event none") || !strings.Contains(v[1], "its last event s1:1") {
		t.Fatalf("violations %q, want one for the transition without its event and one for the last event", v)
	}
}

// TestInvariantsCatchAStaleLastEvent: once committed, a settlement's last
// event holds it as it is. An event whose settlement changed behind the
// state machine's back (its amount here), or whose payload was rewritten,
// is a violation naming both sides; the settlement as the machine left it
// is none.
func TestInvariantsCatchAStaleLastEvent(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		insertSettlement(t, tx, "le1")
		if err := statemachine.Created(ctx, tx, "received", time.Time{}, "le1"); err != nil {
			return err
		}
		return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "le1", From: settlement.Pending, To: settlement.Sent, Reason: "sent"})
	}); err != nil {
		t.Fatal(err)
	}
	if v, err := audit.EventViolations(ctx, db.Pool); err != nil || len(v) != 0 {
		t.Fatalf("violations of the machine's own work: %q, %v", v, err)
	}
	for _, tc := range []struct{ name, change, undo, want string }{
		{"amount", `UPDATE settlements SET amount_cents = amount_cents + 1 WHERE settlement_id = 'le1'`,
			`UPDATE settlements SET amount_cents = amount_cents - 1 WHERE settlement_id = 'le1'`, "le1: its last event le1:2 holds it sent, "},
		{"payload", `UPDATE settlement_events SET payload = jsonb_set(payload, '{settlement,state}', '"pending"') WHERE event_id = 'le1:2'`,
			`UPDATE settlement_events SET payload = jsonb_set(payload, '{settlement,state}', '"sent"') WHERE event_id = 'le1:2'`, "le1: its last event le1:2 holds it pending, "},
	} {
		if _, err := db.Pool.Exec(ctx, tc.change); err != nil {
			t.Fatal(err)
		}
		v, err := audit.EventViolations(ctx, db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) != 1 || !strings.HasPrefix(v[0], tc.want) || !strings.Contains(v[0], "it is sent") {
			t.Errorf("%s: violations %q, want one starting %q", tc.name, v, tc.want)
		}
		if _, err := db.Pool.Exec(ctx, tc.undo); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConflictEventWaitsForTheSettlement: a receipt conflict recorded
// while another transaction holds its settlement and moves it waits for
// that transaction, and its event, numbered after that transaction's,
// holds the settlement as that transaction left it, not as it was when
// the conflict's statement began: the settlement's last event tells its
// state (the invariant checker's rule; the demo found the race).
func TestConflictEventWaitsForTheSettlement(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createSettlement(t, db, "cw1")
	mover, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mover.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := statemachine.Transition(ctx, mover, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "cw1", From: settlement.Pending, To: settlement.Sent, Reason: "sent"}); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := mover.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			return statemachine.RecordConflicts(ctx, tx, time.Time{}, statemachine.Conflict{SettlementID: "cw1", StoredHash: "sha256:00", IncomingHash: "sha256:01"})
		})
	}()
	// The conflict waits for the mover's lock.
	settletest.Wait(t, "the conflict waiting for the settlement's lock", func() (bool, string) {
		var waiting bool
		if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting, "not yet"
	})
	if err := mover.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := events(t, db.Pool, "cw1")
	if len(got) != 3 || got[1].typ != "settlement.sent" || got[2].typ != statemachine.EventConflict {
		t.Fatalf("events %+v, want created, sent, conflict", got)
	}
	if v, err := audit.EventViolations(ctx, db.Pool); err != nil || len(v) != 0 {
		t.Fatalf("violations %q, %v", v, err)
	}
}
