package inspect

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// StatementLine is one stored line of an imported bank statement: a
// transaction detail of an entry, or an entry without details (DESIGN
// section 14). Null in JSON where the statement says nothing.
type StatementLine struct {
	// SettlementID is set only when the line's end-to-end reference is
	// what settle sent the bank for that settlement. A suggestion never
	// sets it.
	SettlementID *string `json:"settlement_id"`
	// SuggestedSettlementID is a settlement the line may belong to, by its
	// amount, currency and date; Suggestion says why. Never a match.
	SuggestedSettlementID string `json:"suggested_settlement_id,omitempty"`
	Suggestion            string `json:"suggestion,omitempty"`
	// File is the name the file was first imported under; Statement the
	// statement's digest (the file's digest and its place in the file).
	File      string  `json:"file"`
	Statement string  `json:"statement"`
	Account   *string `json:"account"`
	// Position is the entry's place in its statement, TxIndex the detail's
	// in its entry, TxCount how many details the entry has (0: none).
	Position int `json:"position"`
	TxIndex  int `json:"tx_index"`
	TxCount  int `json:"tx_count"`
	// EntryRef is the bank's own reference of the entry.
	EntryRef *string `json:"entry_ref"`
	// EndToEndID is the originator's reference of the detail.
	EndToEndID *string `json:"end_to_end_id"`
	// AmountMinor is the detail's amount (nil when the bank gives it only
	// in another currency); EntryAmountMinor the whole entry's.
	AmountMinor      *int64  `json:"amount_minor"`
	EntryAmountMinor int64   `json:"entry_amount_minor"`
	Currency         string  `json:"currency"`
	Direction        string  `json:"direction"`
	BookedOn         *string `json:"booked_on"`
	ValueOn          *string `json:"value_on"`
	Reversal         bool    `json:"reversal"`
	ReturnReason     *string `json:"return_reason"`
	// Counterparty and CounterpartyAccount are the other party's name and
	// account as the bank reports them (statement.Transaction); empty when
	// the file does not say.
	Counterparty        string `json:"counterparty,omitempty"`
	CounterpartyAccount string `json:"counterparty_account,omitempty"`
	// Problem, for a line matched by reference, says why it books nothing
	// on its settlement (see lineProblemSQL); empty when nothing stands in
	// its way.
	Problem string `json:"problem,omitempty"`
}

// Return reports whether the line brings a payout back to the account
// that paid: a credit (settle's payouts are debits) that carries return
// information (a return reason or a reversal mark).
func (l StatementLine) Return() bool {
	return l.Direction == "credit" && (l.Reversal || l.ReturnReason != nil)
}

// LineProblemSQL says why a line e matched by reference books nothing on
// its settlement s, as DecidePaid and DecideReturn decide it; NULL when
// nothing stands in its way (a debit that is a reversal or return pays
// nothing, and says so too).
const LineProblemSQL = `CASE
	WHEN e.direction = 'debit' AND (e.reversal OR e.return_reason IS NOT NULL)
		THEN 'a debit marked as a return or reversal: it pays nothing'
	WHEN e.direction = 'credit' AND NOT e.reversal AND e.return_reason IS NULL
		THEN 'a credit without return information (no return reason, no reversal mark): not a return'
	WHEN e.amount_minor IS NULL THEN 'no amount in ' || e.currency || ': nothing booked'
	WHEN e.amount_minor = 0 THEN 'an amount of zero: nothing booked'
	WHEN e.currency <> s.currency
		THEN 'another currency: ' || e.amount_minor || ' ' || e.currency || ', the settlement is ' || s.amount_cents || ' ' || s.currency || ': nothing booked'
	WHEN e.amount_minor <> s.amount_cents
		THEN 'another amount: ' || e.amount_minor || ' ' || e.currency || ', the settlement is ' || s.amount_cents || ' ' || s.currency || ': nothing booked'
	END`

// LineIsReturnSQL holds for a line e that brings a payout back.
const LineIsReturnSQL = `(e.direction = 'credit' AND (e.reversal OR e.return_reason IS NOT NULL))`

// CreditRefSQL is the ref of the ledger posting by which a credit line e
// of statement st brought money into a ledger account (settle statement
// import --credit-prefix), computed by PostgreSQL so that every query
// agrees. A line the bank gave a booking reference (entry_ref) is
// credited once per booking, whatever the files that show it (an
// intraday report and the day's statement, a statement sent again): the
// ref is the reference and a digest of the booking's identity (account,
// reference, booking date, direction, amount, detail), each text field
// with its length so that no two bookings run together. A line without
// one is credited once per line: its statement's digest and place.
const CreditRefSQL = `(CASE WHEN e.entry_ref IS NULL
	THEN ` + lineCreditRefSQL + `
	ELSE 'statement:booking ' || left(e.entry_ref, 64) || ' ' || encode(sha256(convert_to(concat_ws(' ',
		length(coalesce(st.account, '')), coalesce(st.account, ''), length(e.entry_ref), e.entry_ref,
		coalesce(to_char(e.booked_on, 'YYYY-MM-DD'), '-'), e.direction, e.entry_amount_minor, e.tx_index), 'UTF8')), 'hex')
	END)`

// lineCreditRefSQL is the ref credits had before they were kept per
// booking: the line's statement digest and place. A line credited under
// it is credited.
const lineCreditRefSQL = `'statement:' || st.digest || ' entry ' || e.position || ' detail ' || e.tx_index`

// LineCreditedSQL holds for a line e of statement st whose money a ledger
// credit took in (its ref is CreditRefSQL's, or the line's from before):
// no settlement explains it, and none needs to.
const LineCreditedSQL = `EXISTS (SELECT 1 FROM ledger_postings p WHERE p.kind = 'credit'
	AND p.ref IN (` + CreditRefSQL + `, ` + lineCreditRefSQL + `))`

// BalanceBreak is a statement whose opening balance plus its entries is not
// its closing balance. It is no settlement's: SettlementID is always nil
// (the contract's lists all carry the key).
type BalanceBreak struct {
	SettlementID *string `json:"settlement_id"`
	File         string  `json:"file"`
	Statement    string  `json:"statement"`
	Format       string  `json:"format"`
	Account      *string `json:"account"`
	Currency     *string `json:"currency"`
	OpeningMinor int64   `json:"opening_minor"`
	ClosingMinor int64   `json:"closing_minor"`
	// CreditsMinor and DebitsMinor add up the statement's entries in its
	// currency; DifferenceMinor is closing - (opening + credits - debits),
	// nil when it does not fit in an int64.
	CreditsMinor    int64     `json:"credits_minor"`
	DebitsMinor     int64     `json:"debits_minor"`
	DifferenceMinor *int64    `json:"difference_minor"`
	Entries         int       `json:"entries"`
	ImportedAt      time.Time `json:"imported_at"`
}

// DB is what the statement reads and RecordAction need; pgx.Tx, *pgx.Conn and
// *pgxpool.Pool satisfy it.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// LineSelect reads StatementLines: e is bank_statement_entries, st its
// bank_statements row, f its bank_statement_files row. Scan with scanLine.
const LineSelect = `SELECT e.settlement_id, coalesce(e.suggested_settlement_id, ''), coalesce(e.suggestion, ''),
	f.file_name, st.digest, st.account, e.position, e.tx_index, e.tx_count, e.entry_ref, e.end_to_end_id,
	e.amount_minor, e.entry_amount_minor, e.currency, e.direction, to_char(e.booked_on, 'YYYY-MM-DD'),
	to_char(e.value_on, 'YYYY-MM-DD'), e.reversal, e.return_reason,
	coalesce(e.counterparty, ''), coalesce(e.counterparty_account, ''),
	coalesce((SELECT ` + LineProblemSQL + ` FROM settlements s WHERE s.settlement_id = e.settlement_id), '')`

func (l *StatementLine) scanTargets() []any {
	return []any{&l.SettlementID, &l.SuggestedSettlementID, &l.Suggestion, &l.File, &l.Statement, &l.Account,
		&l.Position, &l.TxIndex, &l.TxCount, &l.EntryRef, &l.EndToEndID, &l.AmountMinor, &l.EntryAmountMinor,
		&l.Currency, &l.Direction, &l.BookedOn, &l.ValueOn, &l.Reversal, &l.ReturnReason,
		&l.Counterparty, &l.CounterpartyAccount, &l.Problem}
}

// EachLine runs sql (which starts with lineSelect) and calls fn for each
// line as it arrives. fn owns its argument.
func EachLine(ctx context.Context, q DB, sql string, args []any, fn func(StatementLine) error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	var l StatementLine
	_, err = pgx.ForEachRow(rows, l.scanTargets(), func() error {
		c := l
		return fn(c)
	})
	return err
}

// BalanceBreakSelect reads BalanceBreaks of the statements st (joined with
// their file f) that do not balance. Scan with BalanceBreak.scanTargets.
const BalanceBreakSelect = `SELECT f.file_name, st.digest, st.format, st.account, st.currency,
	st.opening_minor, st.closing_minor, coalesce(x.credits, 0), coalesce(x.debits, 0), st.entries, st.imported_at
	FROM bank_statements st JOIN bank_statement_files f ON f.id = st.file_id
	LEFT JOIN LATERAL (
		SELECT sum(e.entry_amount_minor) FILTER (WHERE e.direction = 'credit')::bigint AS credits,
		       sum(e.entry_amount_minor) FILTER (WHERE e.direction = 'debit')::bigint AS debits
		FROM bank_statement_entries e
		WHERE e.statement_id = st.id AND e.tx_index = 1 AND e.currency = st.currency) x ON true
	WHERE st.balanced = false`

func (b *BalanceBreak) scanTargets() []any {
	return []any{&b.File, &b.Statement, &b.Format, &b.Account, &b.Currency, &b.OpeningMinor, &b.ClosingMinor,
		&b.CreditsMinor, &b.DebitsMinor, &b.Entries, &b.ImportedAt}
}

// EachBalanceBreak runs sql (which starts with balanceBreakSelect) and calls
// fn for each statement that does not balance.
func EachBalanceBreak(ctx context.Context, q DB, sql string, args []any, fn func(BalanceBreak) error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	var b BalanceBreak
	_, err = pgx.ForEachRow(rows, b.scanTargets(), func() error {
		c := b
		c.DifferenceMinor = difference(c.ClosingMinor, c.OpeningMinor, c.CreditsMinor, c.DebitsMinor)
		return fn(c)
	})
	if err != nil {
		return fmt.Errorf("error reading statements that do not balance: %w", err)
	}
	return nil
}

// difference is closing - (opening + credits - debits), or nil when it does
// not fit in an int64 (a hostile statement's figures may not).
func difference(closing, opening, credits, debits int64) *int64 {
	d := new(big.Int).SetInt64(closing)
	d.Sub(d, big.NewInt(opening))
	d.Sub(d, big.NewInt(credits))
	d.Add(d, big.NewInt(debits))
	if !d.IsInt64() {
		return nil
	}
	v := d.Int64()
	return &v
}
