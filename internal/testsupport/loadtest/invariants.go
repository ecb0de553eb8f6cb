package loadtest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
)

// CheckInvariants runs the one exactly-once checker
// (audit.CheckInvariants) once every settlement should be terminal:
// every acknowledged settlement exists with the acknowledged amount, and,
// when bank is not nil, the ledger agrees with the bank's books. It returns
// every violation found (empty when all hold); acked may be nil.
func CheckInvariants(ctx context.Context, pool *pgxpool.Pool, bank *Bank, acked map[string]int64) ([]string, error) {
	e := audit.Expect{First: make(map[string]audit.Payload, len(acked)), Recovered: true}
	for id, amount := range acked {
		e.First[id] = audit.Payload{AmountCents: amount}
		e.Delivered = append(e.Delivered, id)
	}
	if bank != nil {
		client, err := settle.New(bank.URL, bankclient.Options{})
		if err != nil {
			return nil, err
		}
		if e.Payments, err = bankclient.AllPayments(ctx, client); err != nil {
			return nil, err
		}
		e.CheckBank = true
	}
	return audit.CheckInvariants(ctx, pool, e)
}

// StateCounts returns the number of settlements in each state.
func StateCounts(ctx context.Context, pool *pgxpool.Pool) (map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT state, count(*) FROM settlements GROUP BY state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]int)
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// WaitTerminal polls until want settlements exist and every one is
// confirmed or failed, or ctx ends; the error then says how far it got and
// lists a few settlements still open.
func WaitTerminal(ctx context.Context, pool *pgxpool.Pool, want int) error {
	for {
		var terminal, total int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state IN ('confirmed', 'failed')), count(*) FROM settlements`).Scan(&terminal, &total)
		if err == nil && terminal == want && total == want {
			return nil
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("%d of %d settlements terminal (want %d): %v", terminal, total, want, err)
			qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rows, qerr := pool.Query(qctx, `SELECT settlement_id, state, coalesce(investigation_reason, ''), next_check_at
				FROM settlements WHERE state NOT IN ('confirmed', 'failed') ORDER BY settlement_id LIMIT 10`)
			if qerr == nil {
				for rows.Next() {
					var id, st, reason string
					var next *time.Time
					_ = rows.Scan(&id, &st, &reason, &next)
					msg += fmt.Sprintf("\n  open: %s %s %q next_check_at=%v", id, st, reason, next)
				}
				rows.Close()
			}
			return fmt.Errorf("%s: %w", msg, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
