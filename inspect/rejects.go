package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reject is one message of an event source that could never be accepted
// (DESIGN.md section 18), as `settle reconcile rejects` lists it: its
// bytes stay in intake_rejects.raw; Size is their length.
type Reject struct {
	ID          int64     `json:"id"`
	Source      string    `json:"source"`
	TransportID string    `json:"transport_id"`
	ReceivedAt  time.Time `json:"received_at"`
	Reason      string    `json:"reason"`
	Size        int       `json:"size"`
}

// Rejects passes every recorded reject to fn, oldest first, and returns
// how many there were.
func (i *Inspector) Rejects(ctx context.Context, fn func(Reject) error) (int, error) {
	n := 0
	err := i.readTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id, source, transport_id, received_at, reason, octet_length(raw)
			FROM intake_rejects ORDER BY id`)
		if err != nil {
			return fmt.Errorf("error reading rejects: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r Reject
			if err := rows.Scan(&r.ID, &r.Source, &r.TransportID, &r.ReceivedAt, &r.Reason, &r.Size); err != nil {
				return fmt.Errorf("error reading a reject: %w", err)
			}
			n++
			if err := fn(r); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("error reading rejects: %w", err)
		}
		return nil
	})
	return n, err
}
