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
	// Bank is the bank it is bound to: its job goes on that bank's queue.
	Bank string
}

// ClaimDue claims, inside tx, up to limit open settlements (and confirmed
// ones in their return watch) whose next_check_at is due at now, oldest first, by pushing their next check
// one lease ahead: until tx commits no other sweep sees them, and after a
// lease without progress the sweep takes them again. Rows another
// transaction holds are skipped, not waited for.
func ClaimDue(ctx context.Context, tx pgx.Tx, now time.Time, lease time.Duration, limit int) ([]Due, error) {
	return ClaimDueOf(ctx, tx, now, lease, limit, nil)
}

// ClaimDueOf is ClaimDue for the settlements of banks alone (nil: every
// bank). The sweep passes the banks some worker serves: a settlement of a
// bank no worker serves is left unclaimed, due, until one comes, rather
// than re-enqueued every lease for nobody.
func ClaimDueOf(ctx context.Context, tx pgx.Tx, now time.Time, lease time.Duration, limit int, banks []string) ([]Due, error) {
	rows, err := tx.Query(ctx, `
		UPDATE settlements s SET next_check_at = $2
		FROM (
			SELECT settlement_id FROM settlements
			WHERE state IN ('pending', 'sent', 'uncertain', 'confirmed') AND next_check_at <= $1
			  AND ($4::text[] IS NULL OR bank = ANY($4))
			ORDER BY next_check_at
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		) due
		WHERE s.settlement_id = due.settlement_id
		RETURNING s.settlement_id, s.state = 'pending' AND s.first_attempt_at IS NULL, s.bank`,
		now, now.Add(lease), limit, banks)
	if err != nil {
		return nil, fmt.Errorf("error claiming due settlements: %w", err)
	}
	due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Due, error) {
		var d Due
		return d, row.Scan(&d.SettlementID, &d.NeverAttempted, &d.Bank)
	})
	if err != nil {
		return nil, fmt.Errorf("error claiming due settlements: %w", err)
	}
	return due, nil
}
