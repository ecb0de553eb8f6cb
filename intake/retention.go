package intake

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeleteOldReceipts deletes, inside tx, up to limit receipts received
// before cutoff (now − the replay horizon) whose settlement is terminal,
// and returns how many it deleted. Receipts of settlements still moving are
// kept whatever their age: a redelivery of one must stay a replay.
func DeleteOldReceipts(ctx context.Context, tx pgx.Tx, cutoff time.Time, limit int) (int64, error) {
	tag, err := tx.Exec(ctx, `
		DELETE FROM settlement_receipts r
		WHERE r.ctid IN (
			SELECT r2.ctid FROM settlement_receipts r2
			JOIN settlements s ON s.settlement_id = r2.settlement_id
			WHERE r2.received_at < $1 AND s.state IN ('confirmed', 'failed', 'returned')
			LIMIT $2
		)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("error deleting old receipts: %w", err)
	}
	return tag.RowsAffected(), nil
}
