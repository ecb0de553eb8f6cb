package inspect

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Querier is what CheckInvariants needs of the database; *pgxpool.Pool,
// *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Collect runs sql on db and collects its rows with fn; its errors read
// "error checking invariants".
func Collect[T any](ctx context.Context, db Querier, sql string, fn pgx.RowToFunc[T], args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("error checking invariants: %w", err)
	}
	out, err := pgx.CollectRows(rows, fn)
	if err != nil {
		return nil, fmt.Errorf("error checking invariants: %w", err)
	}
	return out, nil
}
