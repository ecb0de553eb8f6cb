package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Due is a settlement the sweep claimed because its next check was due.
type Due struct {
	SettlementID string
	// NeverAttempted is true for a pending settlement never sent: its send
	// job was lost, so it needs sending, not checking.
	NeverAttempted bool
}

// ClaimDue claims, inside tx, up to limit open settlements (and confirmed
// ones in their return watch) whose next_check_at is due at now, oldest first, by pushing their next check
// one lease ahead: until tx commits no other sweep sees them, and after a
// lease without progress the sweep takes them again. Rows another
// transaction holds are skipped, not waited for.
func ClaimDue(ctx context.Context, tx pgx.Tx, now time.Time, lease time.Duration, limit int) ([]Due, error) {
	rows, err := tx.Query(ctx, `
		UPDATE settlements s SET next_check_at = $2
		FROM (
			SELECT settlement_id FROM settlements
			WHERE state IN ('pending', 'sent', 'uncertain', 'confirmed') AND next_check_at <= $1
			ORDER BY next_check_at
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		) due
		WHERE s.settlement_id = due.settlement_id
		RETURNING s.settlement_id, s.state = 'pending' AND s.first_attempt_at IS NULL`,
		now, now.Add(lease), limit)
	if err != nil {
		return nil, fmt.Errorf("error claiming due settlements: %w", err)
	}
	due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Due, error) {
		var d Due
		return d, row.Scan(&d.SettlementID, &d.NeverAttempted)
	})
	if err != nil {
		return nil, fmt.Errorf("error claiming due settlements: %w", err)
	}
	return due, nil
}
