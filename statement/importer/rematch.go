package importer

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/reconcile"
)

// DefaultRematchWindow is how far back Rematcher looks: the lines of the
// files imported within it. It covers the 90 days within which a credit
// may be suggested as a return, and a little more.
const DefaultRematchWindow = 100 * 24 * time.Hour

// Rematcher examines again the statement lines that no settlement
// explained when they were imported: a line imported before its
// settlement existed, or before the reference settle sent for it was
// known, is matched when the settlement appears, not only at import. The
// sweep runs it periodically (jobs.RematchWorker) and settle reconcile
// bank --statements before its report.
//
// A line whose end-to-end reference is now the reference of a settlement
// is matched to it, as the import would have (its suggestion, if any, is
// dropped: a reference match is the only match); with Suggest, the lines
// still without one get a suggestion where a settlement with their amount,
// currency and a close date has appeared (suggestSQL, which looks at every
// settlement of that amount: the operator's report asks for it, the
// periodic sweep does not). In one transaction, so two runs at once match
// a line once. Then, with Returns set, the lines just
// matched are booked as an import books its matched lines (bookLines): a
// payment settle did not know the outcome of is paid, a return starts the
// return flow. A crash between the two leaves the line matched and not
// booked, which importing its file again repairs, as for an import.
type Rematcher struct {
	// DB is the database (required).
	DB *pgxpool.Pool
	// Returns, when set, books the lines matched (see above).
	Returns *reconcile.Resolver
	// Suggest makes a run look for suggestions for the lines still
	// unmatched.
	Suggest bool
	// Window bounds the lines examined to those of files imported within
	// it (default DefaultRematchWindow).
	Window time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log receives one event per run that matched or suggested something
	// (default: discard).
	Log *slog.Logger
}

// RematchResult is what one run of Rematcher did.
type RematchResult struct {
	// Examined counts the lines without a reference match within the
	// window before the run; Matched those matched by their reference now;
	// Suggested those that got a suggestion now.
	Examined  int64 `json:"examined"`
	Matched   int64 `json:"matched"`
	Suggested int64 `json:"suggested"`
}

// rematchScope is the lines of the files imported since $1.
const rematchScope = `e.statement_id IN (SELECT st2.id FROM bank_statements st2
	JOIN bank_statement_files f2 ON f2.id = st2.file_id WHERE f2.imported_at >= $1)`

// Run examines the unmatched lines once.
func (r *Rematcher) Run(ctx context.Context) (RematchResult, error) {
	now, window, log := time.Now, r.Window, r.Log
	if r.Now != nil {
		now = r.Now
	}
	if window <= 0 {
		window = DefaultRematchWindow
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	since := now().Add(-window)
	var (
		res     RematchResult
		matched []int64
	)
	err := pgx.BeginFunc(ctx, r.DB, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM bank_statement_entries e
			WHERE e.settlement_id IS NULL AND `+rematchScope, since).Scan(&res.Examined); err != nil {
			return fmt.Errorf("error counting the unmatched statement lines: %w", err)
		}
		if res.Examined == 0 {
			return nil
		}
		// The join is the import's (insertLinesSQL): the reference settle
		// sent the bank, indexed as that expression.
		rows, err := tx.Query(ctx, `UPDATE bank_statement_entries e
			SET settlement_id = s.settlement_id, match = 'reference', suggested_settlement_id = NULL, suggestion = NULL
			FROM settlements s
			WHERE e.settlement_id IS NULL AND e.end_to_end_id IS NOT NULL
			  AND coalesce(s.bank_reference, s.settlement_id) = e.end_to_end_id
			  AND `+rematchScope+`
			RETURNING e.id`, since)
		if err != nil {
			return fmt.Errorf("error matching the unmatched statement lines: %w", err)
		}
		if matched, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return fmt.Errorf("error matching the unmatched statement lines: %w", err)
		}
		res.Matched = int64(len(matched))
		if !r.Suggest {
			return nil
		}
		tag, err := tx.Exec(ctx, suggestSQL(rematchScope), since)
		if err != nil {
			return fmt.Errorf("error looking for suggestions: %w", err)
		}
		res.Suggested = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return RematchResult{}, err
	}
	if res.Matched > 0 || res.Suggested > 0 {
		log.Info("statement lines examined again", "examined", res.Examined, "matched", res.Matched, "suggested", res.Suggested)
	}
	if r.Returns != nil && len(matched) > 0 {
		if err := bookLines(ctx, r.DB, r.Returns, log, "e.id = ANY($1)", matched); err != nil {
			return res, err
		}
	}
	return res, nil
}
