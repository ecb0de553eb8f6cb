package importer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/ledger"
)

// LedgerCredit is a statement line that brought money into a ledger
// account (StatementImporter.CreditPrefix), or that names one and could
// not (Error says why).
type LedgerCredit struct {
	// Line is where the line is: the statement's digest, the entry's
	// position and the detail's index ("sha256:…/1 entry 3 detail 1").
	Line        string `json:"line"`
	Reference   string `json:"reference"`
	AccountID   string `json:"account_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	// Ref is the ledger posting's ref (settle ledger postings shows it):
	// "statement:booking", the bank's booking reference and a digest of
	// the booking, or for a line without a booking reference "statement:"
	// and the line (inspect.CreditRefSQL).
	Ref string `json:"ref"`
	// Replayed is true when the line had been credited before (the file
	// imported again): nothing was posted twice.
	Replayed bool   `json:"replayed,omitempty"`
	Error    string `json:"error,omitempty"`
}

// credit posts, for each line of the file with digest that is a credit
// matched to no settlement, carrying no return information (no return
// reason, no reversal mark), with an amount in its currency, and whose
// end-to-end reference is CreditPrefix followed by an account id, a
// ledger credit of its amount to that account (ledger.Credit, idempotent
// by the posting's ref, inspect.CreditRefSQL: one per booking, so that
// importing the file again, or another file that shows the same booking,
// posts nothing twice, and importing it again repairs a crash between the
// import and its credits, as for the payments and returns it books). A line
// whose account the ledger refuses (a reserved account, an amount the
// currency cannot hold) is listed with the error and posts nothing; the
// others are posted all the same.
func (im *StatementImporter) credit(ctx context.Context, digest string) ([]LedgerCredit, error) {
	if im.CreditPrefix == "" {
		return nil, nil
	}
	rows, err := im.DB.Query(ctx, `SELECT st.digest, e.position, e.tx_index, e.end_to_end_id, e.amount_minor, e.currency,
		`+inspect.CreditRefSQL+`, `+inspect.LineCreditedSQL+`
		FROM bank_statement_entries e JOIN bank_statements st ON st.id = e.statement_id
		JOIN bank_statement_files f ON f.id = st.file_id
		WHERE f.digest = $1 AND e.direction = 'credit' AND e.settlement_id IS NULL
		  AND NOT e.reversal AND e.return_reason IS NULL AND e.amount_minor > 0
		  AND starts_with(e.end_to_end_id, $2)
		ORDER BY st.seq, e.position, e.tx_index`, digest, im.CreditPrefix)
	if err != nil {
		return nil, fmt.Errorf("error reading the credits of the statement: %w", err)
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LedgerCredit, error) {
		var (
			c        LedgerCredit
			stmt     string
			pos, idx int
		)
		// Replayed: the line's money was taken in before, under this ref
		// or under the line's from before credits were kept per booking.
		err := row.Scan(&stmt, &pos, &idx, &c.Reference, &c.AmountMinor, &c.Currency, &c.Ref, &c.Replayed)
		c.Line = fmt.Sprintf("%s entry %d detail %d", stmt, pos, idx)
		c.AccountID = strings.TrimSpace(strings.TrimPrefix(c.Reference, im.CreditPrefix))
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("error reading the credits of the statement: %w", err)
	}
	var errs []error
	for i := range lines {
		c := &lines[i]
		if c.Replayed {
			continue // posted once already
		}
		res, err := ledger.Credit(ctx, im.DB, ledger.CreditRequest{AccountID: c.AccountID, AmountMinor: c.AmountMinor, Currency: c.Currency, Ref: c.Ref})
		switch {
		case errors.Is(err, ledger.ErrInvalid) || errors.Is(err, ledger.ErrRefMismatch):
			c.Error = err.Error()
		case err != nil:
			errs = append(errs, fmt.Errorf("error crediting line %s to %s: %w", c.Line, c.AccountID, err))
			c.Error = err.Error()
		default:
			c.Replayed = res.Replayed
			if !res.Replayed {
				im.log().Info("statement: credit posted to the ledger", "line", c.Line, "account_id", c.AccountID,
					"amount_minor", c.AmountMinor, "currency", c.Currency)
			}
		}
	}
	if len(errs) > 0 {
		return lines, fmt.Errorf("error crediting %d of the %d credits of the statement (the others are posted): %w",
			len(errs), len(lines), errors.Join(errs...))
	}
	return lines, nil
}
