package reconcile

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
)

// Querier runs a query; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// FindByHint returns the settlement a bank webhook names: by the reference
// we sent, the bank's payment id or our idempotency key. found is false
// when none matches (or the hint names two settlements, which only a
// forged hint could).
func FindByHint(ctx context.Context, db Querier, h bankclient.Hint) (id string, found bool, err error) {
	rows, err := db.Query(ctx, `
		SELECT settlement_id FROM settlements
		WHERE ($1 <> '' AND coalesce(bank_reference, settlement_id) = $1)
		   OR ($2 <> '' AND bank_payment_id = $2)
		   OR ($3 <> '' AND bank_key = $3)
		LIMIT 2`, h.Reference, h.PaymentID, h.Key)
	if err != nil {
		return "", false, fmt.Errorf("error finding the settlement of a webhook: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", false, fmt.Errorf("error finding the settlement of a webhook: %w", err)
	}
	if len(ids) != 1 {
		return "", false, nil
	}
	return ids[0], true, nil
}
