package statemachine

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event types of DESIGN.md section 19 besides settlement.<to_state>.
const (
	EventFlagged  = "settlement.flagged"
	EventConflict = "settlement.conflict"
)

// EventType is the type of the event of a transition to state to.
func EventType(to string) string { return "settlement." + to }

// insertEventSQL starts the INSERT of outcome events; the statement that
// uses it selects (settlement_id, n, type, payload, created_at). The event
// number n comes from settlements.event_seq, incremented by the same
// statement's UPDATE of the settlement, so the settlement's row lock numbers
// its events. The payload holds event_id, reason, at (and from_state for a
// transition), and the settlement when the statement can tell how the
// transaction leaves it (QueueEvents, CreationEvents, RecordConflicts:
// written once, in their final form); an event inserted without it
// (Transition, Flag, Created: their callers may write more) gets it when
// the transaction commits (the deferred trigger settle_events_fill,
// migrations 0011 and 0024), as the settlement stands then.
const insertEventSQL = `INSERT INTO settlement_events (settlement_id, n, event_id, type, payload, created_at)
			SELECT settlement_id, n, settlement_id || ':' || n, type, payload, created_at
			FROM (`

// flagSQL sets or clears a settlement's flag; setting it or changing its
// reason writes a settlement.flagged event. $1 id, $2 reason (empty clears),
// $3 time.
const flagSQL = `
	WITH flagged AS (
		UPDATE settlements
		SET needs_investigation = ($2::text <> ''), investigation_reason = NULLIF($2::text, ''),
		    event_seq = event_seq + CASE WHEN $2::text <> '' THEN 1 ELSE 0 END,
		    updated_at = $3
		WHERE settlement_id = $1 AND investigation_reason IS DISTINCT FROM NULLIF($2::text, '')
		RETURNING settlement_id, event_seq
	)
	` + insertEventSQL + `
		SELECT settlement_id, event_seq AS n, '` + EventFlagged + `' AS type,
			jsonb_build_object('event_id', settlement_id || ':' || event_seq, 'reason', $2::text,
				'at', settle_json_time($3)) AS payload, $3::timestamptz AS created_at
		FROM flagged WHERE $2::text <> ''
	) e`

// Flag flags settlement id needs_investigation with reason (one of the
// reasons of DESIGN.md section 5), or clears its flag when reason is
// empty, in the caller's transaction. Setting a flag, or changing its
// reason, writes a settlement.flagged event; clearing it writes none (the
// transition that clears it has its own); setting the flag it already has
// changes nothing.
func Flag(ctx context.Context, tx DBTX, id, reason string, at time.Time) error {
	if at.IsZero() {
		at = time.Now()
	}
	if _, err := tx.Exec(ctx, flagSQL, id, reason, at); err != nil {
		return fmt.Errorf("error flagging settlement %s (%q): %w", id, reason, err)
	}
	return nil
}

// QueueFlag queues Flag's statement in b, for a caller that sends its
// statements in one round trip. Its event gets the settlement when the
// transaction commits, as Flag's.
func QueueFlag(b *pgx.Batch, id, reason string, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	b.Queue(flagSQL, id, reason, at)
}

// QueueEvents queues in b the INSERT of the events that TransitionHeld
// held back, each written once, in its final form: its payload is the
// settlement as the statement finds it (settle_settlement_views, planned
// with the statement), so it must be the last write of the transaction to
// those settlements (a River job may follow; a bank attempt, a movement, a
// flag or a transition may not). It queues nothing when held is empty.
func QueueEvents(b *pgx.Batch, held ...Held) {
	if len(held) == 0 {
		return
	}
	ids, from, to, reasons := make([]string, len(held)), make([]string, len(held)), make([]string, len(held)), make([]string, len(held))
	ns := make([]int32, len(held))
	ats := make([]time.Time, len(held))
	for i, h := range held {
		ids[i], ns[i], from[i], to[i], reasons[i], ats[i] = h.SettlementID, int32(h.N), string(h.From), string(h.To), h.Reason, h.At
	}
	if len(held) == 1 {
		// One event, the common case, by a statement of one row: its
		// generic plan costs what a custom plan does, so PostgreSQL keeps
		// the prepared plan. The unnest form is estimated at 100 rows
		// whatever the arrays hold, so it is planned afresh every time,
		// the settlement's view with it (more than half of its time).
		b.Queue(`
		`+insertEventSQL+queuedEventSelect+`
			FROM (VALUES ($1::text, $2::int, $3::text, $4::text, $5::text, $6::timestamptz))
				AS h(settlement_id, n, from_state, to_state, reason, at)
		) e`,
			ids[0], ns[0], from[0], to[0], reasons[0], ats[0])
		return
	}
	b.Queue(`
		`+insertEventSQL+queuedEventSelect+`
			FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
				AS h(settlement_id, n, from_state, to_state, reason, at)
		) e`,
		ids, ns, from, to, reasons, ats)
}

// queuedEventSelect builds QueueEvents' events from h, the held events.
const queuedEventSelect = `
			SELECT h.settlement_id, h.n, 'settlement.' || h.to_state AS type,
				coalesce((SELECT v.doc FROM settle_settlement_views(ARRAY[h.settlement_id]) v), '{}') ||
				jsonb_build_object('event_id', h.settlement_id || ':' || h.n, 'reason', h.reason,
					'at', settle_json_time(h.at), 'from_state', h.from_state) AS payload, h.at AS created_at`

// Conflict is one receipt conflict: an event whose settlement_id was
// received before with another payload (DESIGN.md section 1, rule 3).
type Conflict struct {
	SettlementID string
	StoredHash   string
	IncomingHash string
	// EventID is the producer's event id, if it gave one.
	EventID string
	// Incoming is the JSON of the rejected event's business fields.
	Incoming []byte
}

// RecordConflicts writes conflicts to receipt_conflicts, each with its
// settlement.conflict event, in the caller's transaction (READ COMMITTED,
// PostgreSQL's default): one statement locks the settlements, the next
// writes. It changes nothing GET shows of the settlements, so each event
// is written once with the settlement as that statement finds it, its
// locks held: the caller records the conflicts after its other writes to
// those settlements (intake, in a transaction of their own).
// The settlements are locked in id order, so that two callers never
// deadlock.
func RecordConflicts(ctx context.Context, tx DBTX, at time.Time, conflicts ...Conflict) error {
	if len(conflicts) == 0 {
		return nil
	}
	if at.IsZero() {
		at = time.Now()
	}
	cs := append([]Conflict(nil), conflicts...)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].SettlementID < cs[j].SettlementID })
	ids, stored, incoming, eventIDs, bodies := make([]string, len(cs)), make([]string, len(cs)), make([]string, len(cs)), make([]string, len(cs)), make([]string, len(cs))
	for i, c := range cs {
		ids[i], stored[i], incoming[i], eventIDs[i] = c.SettlementID, c.StoredHash, c.IncomingHash, c.EventID
		bodies[i] = string(c.Incoming)
		if len(c.Incoming) == 0 {
			bodies[i] = "null"
		}
	}
	// Lock the settlements first, in a statement of their own. Under READ
	// COMMITTED a statement reads with the snapshot it started with, and
	// the statement below builds each event's view with it: had it waited
	// there for a transaction that moved the settlement (its confirmation,
	// say), its UPDATE would number the event after that transaction's
	// but its view would show the settlement as it was before, and the
	// settlement's last event would tell a stale state. Started once the
	// locks are held, its snapshot holds every change made before them.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM settlements WHERE settlement_id = ANY($1::text[]) ORDER BY settlement_id FOR UPDATE`, ids); err != nil {
		return fmt.Errorf("error locking the settlements of %d receipt conflicts: %w", len(cs), err)
	}
	_, err := tx.Exec(ctx, `
		WITH c AS (
			SELECT settlement_id, stored_hash, incoming_hash, NULLIF(event_id, '') AS event_id, incoming::jsonb AS incoming,
				row_number() OVER (PARTITION BY settlement_id ORDER BY ord) AS k
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY
				AS c(settlement_id, stored_hash, incoming_hash, event_id, incoming, ord)
		), counts AS (
			SELECT settlement_id, count(*)::int AS cnt FROM c GROUP BY settlement_id
		), bumped AS (
			UPDATE settlements s SET event_seq = s.event_seq + counts.cnt
			FROM counts
			WHERE s.settlement_id = counts.settlement_id
			RETURNING s.settlement_id, s.event_seq - counts.cnt AS base
		), recorded AS (
			INSERT INTO receipt_conflicts (settlement_id, stored_hash, incoming_hash, detected_at, event_id, incoming)
			SELECT settlement_id, stored_hash, incoming_hash, $6, event_id, incoming FROM c
		)
		`+insertEventSQL+`
			SELECT c.settlement_id, b.base + c.k AS n, '`+EventConflict+`' AS type,
				coalesce((SELECT v.doc FROM settle_settlement_views(ARRAY[c.settlement_id]) v), '{}') ||
				jsonb_build_object('event_id', c.settlement_id || ':' || (b.base + c.k), 'reason', 'receipt_conflict',
					'at', settle_json_time($6), 'stored_hash', c.stored_hash, 'incoming_hash', c.incoming_hash,
					'incoming_event_id', c.event_id) AS payload,
				$6::timestamptz AS created_at
			FROM c JOIN bumped b USING (settlement_id)
		) e`,
		ids, stored, incoming, eventIDs, bodies, at)
	if err != nil {
		return fmt.Errorf("error recording %d receipt conflicts: %w", len(cs), err)
	}
	return nil
}
