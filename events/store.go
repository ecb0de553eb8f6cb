package events

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/settle/settle/settlement"
)

// DB is what the store functions need; *pgxpool.Pool and pgx.Tx satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Delivery is the state of one event at one sink.
type Delivery struct {
	Sink     string `json:"sink"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	// LastStatus is the HTTP status of the last attempt (nil: none).
	LastStatus  *int       `json:"last_status"`
	LastError   string     `json:"last_error,omitempty"`
	LastBody    string     `json:"last_body,omitempty"`
	NextAttempt *time.Time `json:"next_attempt_at,omitempty"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
}

// Attempt is one recorded attempt to deliver an event.
type Attempt struct {
	Sink       string    `json:"sink"`
	At         time.Time `json:"at"`
	DurationMS int64     `json:"duration_ms"`
	HTTPStatus *int      `json:"http_status"`
	OK         bool      `json:"ok"`
	Detail     string    `json:"detail,omitempty"`
}

// Listed is one event with its deliveries, as `settle events list` shows it.
type Listed struct {
	EventID      string     `json:"event_id"`
	SettlementID string     `json:"settlement_id"`
	Type         string     `json:"type"`
	CreatedAt    time.Time  `json:"created_at"`
	Deliveries   []Delivery `json:"deliveries"`
	// Attempts are filled only by Story.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// Filter selects the events List returns.
type Filter struct {
	// SettlementID, when set, keeps that settlement's events.
	SettlementID string
	// Undelivered keeps events not delivered to every sink (pending or
	// dead somewhere, or with no sink at all).
	Undelivered bool
	// Dead keeps events dead at some sink.
	Dead bool
	// Limit caps the number of events (0: 1000).
	Limit int
}

// List returns the events matching f, oldest first.
func List(ctx context.Context, db DB, f Filter) ([]Listed, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	rows, err := db.Query(ctx, `
		SELECT e.event_id, e.settlement_id, e.type, e.created_at,
		       coalesce((SELECT jsonb_agg(jsonb_build_object('sink', d.sink, 'state', d.state, 'attempts', d.attempts,
		                    'last_status', d.last_status, 'last_error', coalesce(d.last_error, ''), 'last_body', coalesce(d.last_body, ''),
		                    'next_attempt_at', CASE WHEN d.state = 'pending' THEN settle_json_time(d.next_attempt_at) END,
		                    'delivered_at', settle_json_time(d.delivered_at)) ORDER BY d.sink)
		                 FROM event_deliveries d WHERE d.event_seq = e.seq), '[]')
		FROM settlement_events e
		WHERE ($1 = '' OR e.settlement_id = $1)
		  AND (NOT $2 OR NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event_seq = e.seq)
		       OR EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event_seq = e.seq AND d.state <> 'delivered'))
		  AND (NOT $3 OR EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event_seq = e.seq AND d.state = 'dead'))
		ORDER BY e.seq
		LIMIT $4`, f.SettlementID, f.Undelivered, f.Dead, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("error listing events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Listed, error) {
		var l Listed
		err := row.Scan(&l.EventID, &l.SettlementID, &l.Type, &l.CreatedAt, &l.Deliveries)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("error listing events: %w", err)
	}
	if out == nil {
		out = []Listed{}
	}
	return out, nil
}

// Story returns settlement id's events with their deliveries and every
// attempt, for the console.
func Story(ctx context.Context, db DB, id string) ([]Listed, error) {
	evs, err := List(ctx, db, Filter{SettlementID: id, Limit: 10000})
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `
		SELECT e.event_id, a.sink, a.at, a.duration_ms, a.http_status, a.ok, coalesce(a.detail, '')
		FROM event_attempts a JOIN settlement_events e ON e.seq = a.event_seq
		WHERE e.settlement_id = $1 ORDER BY a.id`, id)
	if err != nil {
		return nil, fmt.Errorf("error reading event attempts of %s: %w", id, err)
	}
	byID := map[string]int{}
	for i, e := range evs {
		byID[e.EventID] = i
	}
	for rows.Next() {
		var eid string
		var a Attempt
		if err := rows.Scan(&eid, &a.Sink, &a.At, &a.DurationMS, &a.HTTPStatus, &a.OK, &a.Detail); err != nil {
			rows.Close()
			return nil, fmt.Errorf("error reading event attempts of %s: %w", id, err)
		}
		if i, ok := byID[eid]; ok {
			evs[i].Attempts = append(evs[i].Attempts, a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading event attempts of %s: %w", id, err)
	}
	return evs, nil
}

// Target says what Redeliver sends again: one event, a settlement's
// events, or every dead delivery. Exactly one is set.
type Target struct {
	EventID      string
	SettlementID string
	Dead         bool
}

// ErrNoTarget is matched (errors.Is) by a Target naming nothing or several
// things.
var ErrNoTarget = errors.New("redeliver wants exactly one of an event id, --settlement or --dead")

// Redelivered is what Redeliver did for one settlement.
type Redelivered struct {
	SettlementID string
	Deliveries   int
}

// Redeliver queues the target's events again at every known sink (their
// deliveries become pending, due now, with a fresh retry window; a sink
// that never had them gets them), in one transaction, and returns what it
// queued per settlement. A forgotten sink gets nothing. It returns an
// error matching settlement.ErrNotFound when an event id or settlement
// names no event.
func Redeliver(ctx context.Context, tx DB, t Target, now time.Time) ([]Redelivered, error) {
	set := 0
	for _, b := range []bool{t.EventID != "", t.SettlementID != "", t.Dead} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, ErrNoTarget
	}
	// An event is found by its settlement and number, which its id is
	// made of (migration 0026 dropped the index on the id itself).
	var idSettlement string
	var idN int
	if t.EventID != "" {
		var ok bool
		if idSettlement, idN, ok = SplitEventID(t.EventID); !ok {
			return nil, fmt.Errorf("no event %s: %w", t.EventID, settlement.ErrNotFound)
		}
	}
	rows, err := tx.Query(ctx, `
		WITH target AS (
			SELECT DISTINCT e.seq, e.settlement_id, e.n FROM settlement_events e
			WHERE (e.settlement_id = $1 AND e.n = $5) OR e.settlement_id = $2
			   OR ($3 AND EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event_seq = e.seq AND d.state = 'dead'))
		), queued AS (
			INSERT INTO event_deliveries (event_seq, sink, settlement_id, n, state, next_attempt_at)
			SELECT t.seq, k.sink, t.settlement_id, t.n, 'pending', $4
			FROM target t JOIN event_sinks k ON k.forgotten_at IS NULL
			WHERE NOT $3 OR EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event_seq = t.seq AND d.sink = k.sink AND d.state = 'dead')
			ON CONFLICT (event_seq, sink) DO UPDATE
			SET state = 'pending', next_attempt_at = $4, first_attempt_at = NULL, delivered_at = NULL
			RETURNING settlement_id
		)
		SELECT settlement_id, count(*) FROM queued GROUP BY settlement_id ORDER BY settlement_id`,
		idSettlement, t.SettlementID, t.Dead, now, idN)
	if err != nil {
		return nil, fmt.Errorf("error queueing events again: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Redelivered, error) {
		var r Redelivered
		return r, row.Scan(&r.SettlementID, &r.Deliveries)
	})
	if err != nil {
		return nil, fmt.Errorf("error queueing events again: %w", err)
	}
	if len(out) == 0 && !t.Dead {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM settlement_events WHERE (settlement_id = $1 AND n = $3) OR settlement_id = $2)`,
			idSettlement, t.SettlementID, idN).Scan(&exists); err != nil {
			return nil, fmt.Errorf("error queueing events again: %w", err)
		}
		if !exists {
			return nil, fmt.Errorf("no event %s%s: %w", t.EventID, t.SettlementID, settlement.ErrNotFound)
		}
	}
	return out, nil
}

// SplitEventID returns the settlement and the number an event id is made
// of (<settlement_id>:<n>, n from 1, in decimal without leading zeros, so
// the id splits at its last colon), and false for a string no event id
// can be.
func SplitEventID(id string) (settlementID string, n int, ok bool) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n < 1 || strconv.Itoa(n) != id[i+1:] {
		return "", 0, false
	}
	return id[:i], n, true
}

// Prune deletes, in one batch of at most limit, the events created before
// cutoff that are delivered to every sink they were queued for (or were
// queued for none); an event pending or dead anywhere is kept, whatever
// its age. First it drops the pending deliveries of forgotten sinks (an
// event committed while ForgetSink ran may have queued one). It
// returns how many events it deleted.
func Prune(ctx context.Context, db DB, cutoff time.Time, limit int) (int64, error) {
	if _, err := db.Exec(ctx, `
		DELETE FROM event_deliveries
		WHERE state = 'pending' AND sink IN (SELECT sink FROM event_sinks WHERE forgotten_at IS NOT NULL)`); err != nil {
		return 0, fmt.Errorf("error dropping the deliveries of forgotten sinks: %w", err)
	}
	tag, err := db.Exec(ctx, `
		DELETE FROM settlement_events WHERE seq IN (
			SELECT e.seq FROM settlement_events e
			WHERE e.created_at < $1
			  AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event_seq = e.seq AND d.state <> 'delivered')
			ORDER BY e.created_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("error pruning delivered events: %w", err)
	}
	return tag.RowsAffected(), nil
}
