package audit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
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
