package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/settlement"
)

// SinkIdle is how long a sink must have gone without a relay registering
// it (event_sinks.seen_at) before ForgetSink takes it without force: four
// heartbeats, so a worker that still relays to it is never overruled by
// accident.
const SinkIdle = 4 * DefaultHeartbeat

// SinkInfo is one sink as `settle events sinks` shows it.
type SinkInfo struct {
	Sink      string    `json:"sink"`
	CreatedAt time.Time `json:"created_at"`
	// SeenAt is when a relay last registered it (nil: before the relays
	// said so). A sink no worker is configured with stops being seen.
	SeenAt *time.Time `json:"seen_at"`
	// ForgottenAt and ForgottenBy are set once an operator forgot it.
	ForgottenAt *time.Time `json:"forgotten_at,omitempty"`
	ForgottenBy string     `json:"forgotten_by,omitempty"`
	Pending     int64      `json:"pending"`
	Dead        int64      `json:"dead"`
	Delivered   int64      `json:"delivered"`
	// OldestPending is the creation time of its oldest pending event.
	OldestPending *time.Time `json:"oldest_pending,omitempty"`
}

// Relayed reports whether some relay registered the sink within idle of
// now: a worker is configured with it.
func (s SinkInfo) Relayed(now time.Time, idle time.Duration) bool {
	return s.ForgottenAt == nil && s.SeenAt != nil && now.Sub(*s.SeenAt) < idle
}

// Sinks returns every sink events were ever queued for, by name.
func Sinks(ctx context.Context, db DB) ([]SinkInfo, error) {
	rows, err := db.Query(ctx, `
		SELECT k.sink, k.created_at, k.seen_at, k.forgotten_at, coalesce(k.forgotten_by, ''),
		       count(d.event_seq) FILTER (WHERE d.state = 'pending'),
		       count(d.event_seq) FILTER (WHERE d.state = 'dead'),
		       count(d.event_seq) FILTER (WHERE d.state = 'delivered'),
		       min(e.created_at) FILTER (WHERE d.state = 'pending')
		FROM event_sinks k
		LEFT JOIN event_deliveries d ON d.sink = k.sink
		LEFT JOIN settlement_events e ON e.seq = d.event_seq
		GROUP BY k.sink ORDER BY k.sink`)
	if err != nil {
		return nil, fmt.Errorf("error listing event sinks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SinkInfo, error) {
		var s SinkInfo
		return s, row.Scan(&s.Sink, &s.CreatedAt, &s.SeenAt, &s.ForgottenAt, &s.ForgottenBy, &s.Pending, &s.Dead, &s.Delivered, &s.OldestPending)
	})
	if err != nil {
		return nil, fmt.Errorf("error listing event sinks: %w", err)
	}
	if out == nil {
		out = []SinkInfo{}
	}
	return out, nil
}

// ErrSinkInUse is matched (errors.Is) by ForgetSink when a relay
// registered the sink less than SinkIdle ago: some worker is still
// configured with it.
var ErrSinkInUse = errors.New("a worker relayed to this sink recently")

// Forgotten is what ForgetSink dropped for one settlement.
type Forgotten struct {
	SettlementID string
	Deliveries   int
}

// ForgetSink is the end of a sink taken out of the workers' configuration:
// it is marked forgotten by operator at now, its pending and dead
// deliveries are deleted (its delivered ones stay, and every attempt), and
// no event is queued for it from then on. It returns, per settlement,
// how many undelivered deliveries it dropped, for the operator actions the
// caller records in the same transaction. It returns an error matching
// settlement.ErrNotFound for an unknown sink and ErrSinkInUse when a
// relay registered it less than SinkIdle before now, unless force.
// Forgetting a forgotten sink again drops what is still undelivered there.
func ForgetSink(ctx context.Context, tx DB, sink, operator string, now time.Time, force bool) ([]Forgotten, error) {
	var seen *time.Time
	err := tx.QueryRow(ctx, `SELECT seen_at FROM event_sinks WHERE sink = $1 FOR UPDATE`, sink).Scan(&seen)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("no event sink %q: %w", sink, settlement.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("error forgetting event sink %s: %w", sink, err)
	}
	if !force && seen != nil && now.Sub(*seen) < SinkIdle {
		return nil, fmt.Errorf("sink %s registered by a worker %s ago: %w (take it out of every worker's --events-url first, or force)",
			sink, now.Sub(*seen).Round(time.Second), ErrSinkInUse)
	}
	if _, err := tx.Exec(ctx, `UPDATE event_sinks SET forgotten_at = coalesce(forgotten_at, $2), forgotten_by = coalesce(forgotten_by, $3) WHERE sink = $1`,
		sink, now, operator); err != nil {
		return nil, fmt.Errorf("error forgetting event sink %s: %w", sink, err)
	}
	rows, err := tx.Query(ctx, `
		WITH dropped AS (
			DELETE FROM event_deliveries WHERE sink = $1 AND state <> 'delivered' RETURNING settlement_id)
		SELECT settlement_id, count(*) FROM dropped GROUP BY settlement_id ORDER BY settlement_id`, sink)
	if err != nil {
		return nil, fmt.Errorf("error forgetting event sink %s: %w", sink, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Forgotten, error) {
		var f Forgotten
		return f, row.Scan(&f.SettlementID, &f.Deliveries)
	})
	if err != nil {
		return nil, fmt.Errorf("error forgetting event sink %s: %w", sink, err)
	}
	return out, nil
}
