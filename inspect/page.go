package inspect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/settlement"
)

// Filter selects settlements for List and Page. The zero Filter selects
// every settlement.
type Filter struct {
	// State, when set, keeps the settlements in that state.
	State settlement.State
	// NeedsInvestigation keeps only the settlements flagged for a human.
	NeedsInvestigation bool
	// AccountID, when set, keeps the settlements of that debtor account.
	AccountID string
	// Bank, when set, keeps the settlements bound to that bank.
	Bank string
	// OlderThan, when positive, keeps only the settlements that entered
	// their current state at least this long ago.
	OlderThan time.Duration
}

// Validate reports a filter that cannot select anything sensible.
func (f Filter) Validate() error {
	switch {
	case f.State != "" && !f.State.Valid():
		return fmt.Errorf("unknown state %q (want one of %v)", f.State, settlement.States)
	case f.OlderThan < 0:
		return errors.New("older than must not be negative")
	case len(f.AccountID) > 128:
		return errors.New("account id longer than 128 characters")
	}
	if f.Bank != "" {
		if err := settlement.CheckBankName(f.Bank); err != nil {
			return fmt.Errorf("bank: %w", err)
		}
	}
	return nil
}

// Cursor is a position in the order of List and Page: oldest settlement
// first, by the time it was received (created_at), then by id. A page
// continues strictly after its cursor, so rows inserted or moved meanwhile
// never make a page repeat or skip the rows that stayed.
type Cursor struct {
	CreatedAt    time.Time
	SettlementID string
}

// IsZero reports whether c is the start of the list.
func (c Cursor) IsZero() bool { return c.CreatedAt.IsZero() && c.SettlementID == "" }

// String encodes c for a URL: the receipt time in Unix microseconds (the
// precision of timestamptz), a dot, and the id.
func (c Cursor) String() string {
	if c.IsZero() {
		return ""
	}
	return strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "." + c.SettlementID
}

// ParseCursor decodes Cursor.String; the empty string is the zero Cursor.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	micros, id, ok := strings.Cut(s, ".")
	us, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil || id == "" || len(id) > 128 {
		return Cursor{}, fmt.Errorf("malformed cursor %q", s)
	}
	return Cursor{CreatedAt: time.UnixMicro(us).UTC(), SettlementID: id}, nil
}

// Page is one page of settlements in list order.
type Page struct {
	Rows []SettlementRow
	// Next continues after the last row; zero when this is the last page.
	Next Cursor
}

// maxPageSize bounds Page's limit.
const maxPageSize = 500

// Page reads at most limit settlements selected by f that come after
// cursor after, in list order, in one read-only snapshot. It uses a keyset
// (never OFFSET) over an index that matches the order, so a page deep in a
// million settlements costs what the first one does.
func (i *Inspector) Page(ctx context.Context, f Filter, after Cursor, limit int) (Page, error) {
	if err := f.Validate(); err != nil {
		return Page{}, fmt.Errorf("error listing settlements: %w", err)
	}
	if limit <= 0 || limit > maxPageSize {
		limit = maxPageSize
	}
	var p Page
	now := i.now()
	err := i.readTx(ctx, func(tx pgx.Tx) error {
		// One row more than asked says whether there is a next page.
		return listRows(ctx, tx, f, after, limit+1, now, func(r SettlementRow) error {
			p.Rows = append(p.Rows, r)
			return nil
		})
	})
	if err != nil {
		return Page{}, err
	}
	if len(p.Rows) > limit {
		p.Rows = p.Rows[:limit]
		last := p.Rows[limit-1]
		p.Next = Cursor{CreatedAt: last.CreatedAt, SettlementID: last.SettlementID}
	}
	return p, nil
}

// listColumns are the columns of a SettlementRow, in scan order.
const listColumns = `s.settlement_id, s.state, coalesce(` + enteredStateSQL + `, s.created_at) AS since, s.created_at,
	s.account_id, s.amount_cents, s.currency, s.send_attempts, s.first_attempt_at,
	s.check_attempts, s.next_check_at, coalesce(s.bank_payment_id, ''), coalesce(s.bank_status, ''),
	s.needs_investigation, coalesce(s.investigation_reason, ''), s.bank`

// listRows passes the settlements selected by f after cursor after to fn,
// in list order, at most limit of them (0: all). The statement is built
// from fixed fragments chosen by which filters are set, so that each
// variant gets its own plan on the index that serves it (a generic plan of
// "$1 = ” OR state = $1" would use none); every value is a bound
// parameter.
func listRows(ctx context.Context, tx pgx.Tx, f Filter, after Cursor, limit int, now time.Time, fn func(SettlementRow) error) error {
	var (
		args  []any
		conds []string
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.AccountID != "" {
		conds = append(conds, "s.account_id = "+arg(f.AccountID))
	}
	if f.NeedsInvestigation {
		conds = append(conds, "s.needs_investigation")
	}
	if f.Bank != "" {
		conds = append(conds, "s.bank = "+arg(f.Bank))
	}
	if f.OlderThan > 0 {
		// A settlement entered its state no earlier than it was received:
		// the bound on created_at lets the index stop the scan.
		c := arg(now.Add(-f.OlderThan))
		conds = append(conds, "s.created_at <= "+c, "coalesce("+enteredStateSQL+", s.created_at) <= "+c)
	}
	if !after.IsZero() {
		conds = append(conds, "(s.created_at, s.settlement_id) > ("+arg(after.CreatedAt)+"::timestamptz, "+arg(after.SettlementID)+"::text)")
	}
	limitSQL := ""
	if limit > 0 {
		limitSQL = " LIMIT " + arg(limit)
	}
	// One ordered range per state: with a state, or with no account and no
	// flag to narrow the scan, each state's range of the (state,
	// created_at, settlement_id) index is read in order and the ranges are
	// merged (Merge Append), instead of sorting the whole table.
	var states []settlement.State
	switch {
	case f.State != "":
		states = []settlement.State{f.State}
	case f.AccountID == "" && !f.NeedsInvestigation:
		states = settlement.States
	}
	var q strings.Builder
	q.WriteString("SELECT * FROM (")
	if states == nil {
		q.WriteString("SELECT " + listColumns + " FROM settlements s")
		where(&q, conds)
		q.WriteString(" ORDER BY s.created_at, s.settlement_id" + limitSQL)
	} else {
		for k, st := range states {
			if k > 0 {
				q.WriteString(" UNION ALL ")
			}
			q.WriteString("(SELECT " + listColumns + " FROM settlements s")
			where(&q, append(conds[:len(conds):len(conds)], "s.state = "+arg(string(st))))
			q.WriteString(" ORDER BY s.created_at, s.settlement_id" + limitSQL + ")")
		}
	}
	q.WriteString(") o ORDER BY created_at, settlement_id" + limitSQL)

	// A page is an index read in order, stopped at the limit. The planner
	// cannot know how many rows the time-in-state filter (a subquery per
	// row) lets through and may prefer to collect them all and sort;
	// forbidding the sort in this read-only transaction keeps the ordered
	// index scan, which every filter has.
	if _, err := tx.Exec(ctx, "SET LOCAL enable_sort = off"); err != nil {
		return fmt.Errorf("error listing settlements: %w", err)
	}
	rows, err := tx.Query(ctx, q.String(), args...) //nolint:gosec // fixed fragments only; every value is a bound parameter
	if err != nil {
		return fmt.Errorf("error listing settlements: %w", err)
	}
	var r SettlementRow
	_, err = pgx.ForEachRow(rows, []any{&r.SettlementID, &r.State, &r.Since, &r.CreatedAt, &r.AccountID, &r.AmountCents,
		&r.Currency, &r.SendAttempts, &r.FirstAttemptAt, &r.CheckAttempts, &r.NextCheckAt,
		&r.BankPaymentID, &r.BankStatus, &r.NeedsInvestigation, &r.InvestigationReason, &r.Bank}, func() error {
		r.AgeSeconds = max(now.Sub(r.Since).Seconds(), 0)
		return fn(r)
	})
	if err != nil {
		return fmt.Errorf("error listing settlements: %w", err)
	}
	return nil
}

func where(q *strings.Builder, conds []string) {
	for k, c := range conds {
		if k == 0 {
			q.WriteString(" WHERE ")
		} else {
			q.WriteString(" AND ")
		}
		q.WriteString(c)
	}
}
