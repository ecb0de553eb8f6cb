// Package statemachine owns the table of allowed transitions between the
// states of a settlement (settlement.State) and the one function that changes
// settlements.state. No other code may write that column.
//
// Every transition is an optimistic UPDATE … WHERE state = $from inside the
// caller's transaction, appended to settlement_transitions in the same
// transaction, with its outcome event in settlement_events (the outbox of
// DESIGN.md section 19) and its ledger effects (the hold of a new
// settlement, the postings of confirmed and returned, the release or void
// of the hold: DESIGN.md section 20, ledger.go). Flags (Flag) and receipt conflicts
// (RecordConflicts) write their events here too, so no caller can forget
// one. A forbidden transition or a lost race is an error, never a
// silent no-op: the caller decides whether a lost race means "someone else
// already did it" (safe to stop) or a bug.
package statemachine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/settle/settle/settlement"
)

// allowed is the transition table of DESIGN.md section 3.
var allowed = map[settlement.State]map[settlement.State]bool{
	settlement.Pending:   {settlement.Sent: true, settlement.Uncertain: true, settlement.Failed: true, settlement.Confirmed: true},
	settlement.Sent:      {settlement.Confirmed: true, settlement.Failed: true, settlement.Uncertain: true},
	settlement.Uncertain: {settlement.Sent: true, settlement.Confirmed: true, settlement.Failed: true, settlement.Pending: true},
	settlement.Confirmed: {settlement.Returned: true},
}

// Allowed reports whether the table allows from → to.
func Allowed(from, to settlement.State) bool { return allowed[from][to] }

// ErrForbidden is matched (errors.Is) by a transition the table does not allow.
var ErrForbidden = errors.New("transition not allowed")

// ErrLostRace is matched (errors.Is) when the settlement was not in the
// expected state any more: another process moved it first.
var ErrLostRace = errors.New("settlement is no longer in the expected state")

// ErrNoSource is returned for a Change that does not say who moved the
// settlement (Change.Source): a bug of the caller, never defaulted.
var ErrNoSource = errors.New("transition without a source")

// TransitionError describes a transition that did not happen.
type TransitionError struct {
	SettlementID string
	From, To     settlement.State
	// Actual is the state found when the race was lost ("" if unknown).
	Actual settlement.State
	Err    error // ErrForbidden, ErrLostRace or settlement.ErrNotFound
}

func (e *TransitionError) Error() string {
	if e.Actual != "" {
		return fmt.Sprintf("settlement %s: %s → %s: %v (it is %s)", e.SettlementID, e.From, e.To, e.Err, e.Actual)
	}
	return fmt.Sprintf("settlement %s: %s → %s: %v", e.SettlementID, e.From, e.To, e.Err)
}

func (e *TransitionError) Unwrap() error { return e.Err }

// DBTX is what Transition needs of a transaction; pgx.Tx satisfies it.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Change is one transition to apply.
type Change struct {
	SettlementID string
	From, To     settlement.State
	// Reason is recorded with the transition ("bank accepted", …).
	Reason string
	// Source is who moved it (settlement_transitions.source): required,
	// so that a writer that forgets it fails (ErrNoSource) rather than
	// recording someone else.
	Source settlement.Source
	// At is the time of the transition (the injected clock).
	At time.Time
	// Set, when not empty, holds the caller's own assignments to the
	// settlements row ("col = expr, …"), made by the UPDATE that moves the
	// state: a caller that writes columns of its own with a transition (the
	// bank's answer, the next check) rewrites the row once instead of twice,
	// one row version and one entry in every index of settlements fewer.
	// Its parameters are $6 onwards, bound to SetArgs; the expressions see
	// the row as it was before the transition. It may not assign state,
	// event_seq or updated_at, which the transition sets.
	Set     string
	SetArgs []any
}

// ownColumns are the columns of settlements a Change's Set may not assign.
var ownColumns = regexp.MustCompile(`(?i)(^|[\s,])(state|event_seq|updated_at)\s*=`)

// Transition moves a settlement from c.From to c.To inside tx and appends
// the transition to its history, with its outcome event. It returns a
// *TransitionError wrapping ErrForbidden, ErrLostRace or ErrNotFound when
// it did not happen; the caller must then roll back whatever else it wrote
// in tx.
//
// Its caller may write more about the settlement after it, so the event is
// inserted without the settlement and filled in when tx commits (the
// deferred trigger settle_events_fill). A caller that writes its other
// facts after the transition in a known order writes the event once
// instead, in its final form: TransitionHeld, then QueueEvents.
func Transition(ctx context.Context, tx DBTX, c Change) error {
	_, err := transition(ctx, tx, c, false)
	return err
}

// Held is the outcome event of a transition (TransitionHeld), numbered
// but not written yet: its writer writes it with QueueEvents, after the
// transaction's other writes to the settlement.
type Held struct {
	SettlementID string
	// N is the event's number (event_id is SettlementID:N).
	N      int
	From   settlement.State
	To     settlement.State
	Reason string
	At     time.Time
}

// TransitionHeld is Transition with the event held back: the transition,
// its history row and its ledger effects are written, and the event,
// numbered, is returned for the caller to write last in tx with QueueEvents,
// so that it is written once, with the settlement as tx leaves it. A caller
// that forgets it fails the outbox's invariant (events numbered 1..n, n
// being event_seq: audit.EventViolations) and the caller's tests.
func TransitionHeld(ctx context.Context, tx DBTX, c Change) (Held, error) {
	if c.At.IsZero() {
		c.At = time.Now()
	}
	n, err := transition(ctx, tx, c, true)
	if err != nil {
		return Held{}, err
	}
	return Held{SettlementID: c.SettlementID, N: n, From: c.From, To: c.To, Reason: c.Reason, At: c.At}, nil
}

// transition applies c and returns the number of its event, written by
// the statement unless held.
func transition(ctx context.Context, tx DBTX, c Change, held bool) (int, error) {
	if !Allowed(c.From, c.To) {
		return 0, &TransitionError{SettlementID: c.SettlementID, From: c.From, To: c.To, Err: ErrForbidden}
	}
	if c.At.IsZero() {
		c.At = time.Now()
	}
	if c.Source == "" {
		return 0, fmt.Errorf("error moving settlement %s from %s to %s: %w", c.SettlementID, c.From, c.To, ErrNoSource)
	}
	set := ""
	if c.Set != "" {
		if ownColumns.MatchString(c.Set) {
			return 0, fmt.Errorf("error moving settlement %s from %s to %s: Set assigns a column of the transition: %s", c.SettlementID, c.From, c.To, c.Set)
		}
		set = ", " + c.Set
	}
	event := `, event AS (
			` + insertEventSQL + `
				SELECT settlement_id, event_seq AS n, 'settlement.' || $3::text AS type,
					jsonb_build_object('event_id', settlement_id || ':' || event_seq, 'reason', $4::text,
						'at', settle_json_time($5), 'from_state', $2::text) AS payload, $5::timestamptz AS created_at
				FROM moved
			) e
		)`
	if held {
		event = ""
	}
	// One statement: the optimistic update and the history row commit or
	// fail together, and the row count says whether we won.
	var n int
	err := tx.QueryRow(ctx, `
		WITH moved AS (
			UPDATE settlements SET state = $3, updated_at = $5, event_seq = event_seq + 1`+set+`
			WHERE settlement_id = $1 AND state = $2
			RETURNING settlement_id, event_seq, account_id, amount_cents, currency, bank
		)`+event+transitionLedgerSQL[c.To]+`
		INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason, at, source)
		SELECT settlement_id, $2, $3, $4, $5, $`+strconv.Itoa(6+len(c.SetArgs))+` FROM moved
		RETURNING (SELECT event_seq FROM moved)`,
		append(append([]any{c.SettlementID, string(c.From), string(c.To), c.Reason, c.At}, c.SetArgs...), string(c.Source))...).Scan(&n)
	if err == nil {
		return n, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("error moving settlement %s from %s to %s: %w", c.SettlementID, c.From, c.To, err)
	}
	var actual string
	err = tx.QueryRow(ctx, "SELECT state FROM settlements WHERE settlement_id = $1", c.SettlementID).Scan(&actual)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, &TransitionError{SettlementID: c.SettlementID, From: c.From, To: c.To, Err: settlement.ErrNotFound}
	case err != nil:
		return 0, fmt.Errorf("error reading state of settlement %s: %w", c.SettlementID, err)
	}
	return 0, &TransitionError{SettlementID: c.SettlementID, From: c.From, To: c.To, Actual: settlement.State(actual), Err: ErrLostRace}
}

// CreationCounted is the event_seq (an SQL literal) of a settlements row
// inserted with its creation event already counted. Intake inserts its settlements so, and
// Created then numbers their creation event 1 without rewriting the rows
// inserted a moment before in the same transaction: each rewrite is a new
// row version, written to the WAL with an entry in every index of
// settlements. A row inserted with no event counted (event_seq 0, the
// column's default) is counted by Created.
const CreationCounted = "1"

// Created records the creation of settlements (→ pending) in their
// history, with each one's creation event, and takes each one's hold on its
// account (creating the account on first use), in one statement however
// many there are. The settlements rows themselves are inserted by the
// caller in the same transaction, with event_seq CreationCounted or 0.
//
// Its caller may write more about the settlements after it, so the events
// are inserted without the settlement and filled in when the transaction
// commits; a caller that knows its last write to them writes the events
// once instead: CreatedHeld, then CreationEvents.
func Created(ctx context.Context, tx DBTX, reason string, at time.Time, settlementIDs ...string) error {
	return created(ctx, tx, reason, at, settlementIDs, false)
}

// CreatedHeld is Created with the creation events held back: its caller
// writes them with CreationEvents after the transaction's other writes to
// the settlements (intake: after the replays it counts), once, in their
// final form.
func CreatedHeld(ctx context.Context, tx DBTX, reason string, at time.Time, settlementIDs ...string) error {
	return created(ctx, tx, reason, at, settlementIDs, true)
}

func created(ctx context.Context, tx DBTX, reason string, at time.Time, settlementIDs []string, held bool) error {
	if len(settlementIDs) == 0 {
		return nil
	}
	if at.IsZero() {
		at = time.Now()
	}
	event := `, event AS (
			` + insertEventSQL + `
				SELECT settlement_id, event_seq AS n, 'settlement.' || $2::text AS type,
					jsonb_build_object('event_id', settlement_id || ':' || event_seq, 'reason', $3::text,
						'at', settle_json_time($4)) AS payload, $4::timestamptz AS created_at
				FROM moved
			) e
		)`
	if held {
		event = ""
	}
	// The transition rows name the ids given (a missing settlement is a
	// foreign key error); the events are numbered by the settlements' rows.
	// A row whose creation is counted already is read as it is, any other
	// is counted here; the UPDATE and the SELECT both see the rows as they
	// were before the statement, so no row is taken twice. A settlement
	// whose creation event exists already fails on that event's unique
	// number, or gets the next one: never a second event numbered alike.
	_, err := tx.Exec(ctx, `
		WITH counted AS (
			UPDATE settlements SET event_seq = event_seq + 1
			WHERE settlement_id = ANY($1::text[]) AND event_seq <> `+CreationCounted+`
			RETURNING settlement_id, event_seq, account_id, amount_cents, currency, bank
		), moved AS (
			SELECT * FROM counted
			UNION ALL
			SELECT settlement_id, event_seq, account_id, amount_cents, currency, bank FROM settlements
			WHERE settlement_id = ANY($1::text[]) AND event_seq = `+CreationCounted+`
		)`+event+holdSQL+`
		INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason, at, source)
		SELECT id, NULL, $2, $3, $4, 'intake' FROM unnest($1::text[]) AS id`,
		settlementIDs, string(settlement.Pending), reason, at)
	if err != nil {
		return fmt.Errorf("error recording creation of %d settlements: %w", len(settlementIDs), err)
	}
	return nil
}

// CreationEvents writes the creation events that CreatedHeld held back,
// with the same reason and time, each numbered by its settlement's
// event_seq as CreatedHeld left it and holding the settlement as the
// statement finds it: call it after the transaction's last other write to
// those settlements, and before any other event of theirs.
func CreationEvents(ctx context.Context, tx DBTX, reason string, at time.Time, settlementIDs ...string) error {
	if len(settlementIDs) == 0 {
		return nil
	}
	if at.IsZero() {
		at = time.Now()
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO settlement_events (settlement_id, n, event_id, type, payload, created_at)
		SELECT s.settlement_id, s.event_seq, s.settlement_id || ':' || s.event_seq, '`+EventType(string(settlement.Pending))+`',
			(SELECT v.doc FROM settle_settlement_views(ARRAY[s.settlement_id]) v) || jsonb_build_object('event_id', s.settlement_id || ':' || s.event_seq,
				'reason', $2::text, 'at', settle_json_time($3)),
			$3::timestamptz
		FROM settlements s WHERE s.settlement_id = ANY($1::text[])
		ORDER BY s.settlement_id`,
		settlementIDs, reason, at)
	if err != nil {
		return fmt.Errorf("error writing the creation events of %d settlements: %w", len(settlementIDs), err)
	}
	return nil
}
