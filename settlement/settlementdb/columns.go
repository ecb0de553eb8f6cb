package settlementdb

import (
	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/settlement"
)

// Columns are the columns of a settlements row that make a
// settlement.Settlement, in the order Scan and Targets take them. A query
// selects (or returns) them first and may add its own after them.
const Columns = `settlement_id, account_id, amount_cents, currency, beneficiary, state,
	payload_hash, bank_key, coalesce(bank_reference, settlement_id), needs_investigation, coalesce(investigation_reason, ''),
	created_at, updated_at, bank`

// Targets are the scan destinations of Columns in st.
func Targets(st *settlement.Settlement) []any {
	return []any{&st.SettlementID, &st.AccountID, &st.AmountCents, &st.Currency, &st.Beneficiary, &st.State,
		&st.PayloadHash, &st.BankKey, &st.BankReference, &st.NeedsInvestigation, &st.InvestigationReason,
		&st.CreatedAt, &st.UpdatedAt, &st.Bank}
}

// Scan reads a row that starts with Columns, and its further columns into
// extra.
func Scan(row pgx.Row, extra ...any) (settlement.Settlement, error) {
	var st settlement.Settlement
	if err := row.Scan(append(Targets(&st), extra...)...); err != nil {
		return settlement.Settlement{}, err
	}
	return st, nil
}
