package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Heartbeats of the banks workers serve (bank_workers): a running worker
// refreshes each of its banks every BankHeartbeat; a bank none refreshed
// within BankWorkerGone has no worker. Times are the database's, so that
// the workers' clocks need not agree.
const (
	BankHeartbeat  = 5 * time.Second
	BankWorkerGone = 30 * time.Second
)

// reportSettlements is the settlements a report reads: those of the bank
// set for its transaction by setReportBank, or all when none is.
const reportSettlements = `(SELECT * FROM settlements
	WHERE coalesce(current_setting('settle.report_bank', true), '') IN ('', bank))`

// setReportBank restricts the report of transaction tx to the settlements
// of bank (empty: every bank); the value is bound, never interpolated.
func setReportBank(ctx context.Context, tx pgx.Tx, bank string) error {
	if _, err := tx.Exec(ctx, "SELECT set_config('settle.report_bank', $1, true)", bank); err != nil {
		return fmt.Errorf("error preparing the report: %w", err)
	}
	return nil
}

// WrongBankError is the refusal of a Resolver asked to send, check or
// resolve a settlement bound to another bank than its own: nothing was
// asked of any bank.
type WrongBankError struct {
	SettlementID string
	// Bank is the settlement's bank; Served the Resolver's.
	Bank, Served string
}

func (e *WrongBankError) Error() string {
	return fmt.Sprintf("settlement %s belongs to bank %s, not to %s: only a worker of %s may send, check or resolve it",
		e.SettlementID, e.Bank, e.Served, e.Bank)
}

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

// LiveBanks lists the banks some worker served within BankWorkerGone.
func LiveBanks(ctx context.Context, db RowQuerier) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT bank FROM bank_workers WHERE seen_at > now() - $1::bigint * interval '1 millisecond' ORDER BY bank`,
		BankWorkerGone.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("error reading the banks served: %w", err)
	}
	banks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error reading the banks served: %w", err)
	}
	return banks, nil
}

// WaitingReason says why an open settlement of bank does not move when no
// worker of its bank runs ("waiting for a worker of bank stripe"); empty
// when one does, or when the settlement is not open (state).
func WaitingReason(state, bank string, live []string) string {
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
