package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Heartbeats of the banks workers serve (bank_workers): a running worker
// refreshes each of its banks every BankHeartbeat; a bank none refreshed
// within bankWorkerGone has no worker. Times are the database's, so that
// the workers' clocks need not agree.
const (
	BankHeartbeat  = 5 * time.Second
	bankWorkerGone = 30 * time.Second
)

// Execer runs a statement; *pgxpool.Pool and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// BeatBanks records that a worker serving banks runs now.
func BeatBanks(ctx context.Context, db Execer, banks []string) error {
	_, err := db.Exec(ctx, `INSERT INTO bank_workers (bank, seen_at)
		SELECT b, now() FROM unnest($1::text[]) AS b
		ON CONFLICT (bank) DO UPDATE SET seen_at = EXCLUDED.seen_at`, banks)
	if err != nil {
		return fmt.Errorf("error recording the banks this worker serves: %w", err)
	}
	return nil
}

// RowQuerier runs a query; *pgxpool.Pool and pgx.Tx satisfy it.
type RowQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// LiveBanks lists the banks some worker served within bankWorkerGone.
func LiveBanks(ctx context.Context, db RowQuerier) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT bank FROM bank_workers WHERE seen_at > now() - $1::bigint * interval '1 millisecond' ORDER BY bank`,
		bankWorkerGone.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("error reading the banks served: %w", err)
	}
	banks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error reading the banks served: %w", err)
	}
	return banks, nil
}

// waitingReason says why an open settlement of bank does not move when no
// worker of its bank runs ("waiting for a worker of bank stripe"); empty
// when one does, or when the settlement is not open (state).
func waitingReason(state, bank string, live []string) string {
	switch state {
	case "pending", "sent", "uncertain":
	default:
		return ""
	}
	for _, b := range live {
		if b == bank {
			return ""
		}
	}
	return "waiting for a worker of bank " + bank
}
