package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/settle/settle/inspect"
)

// ErrNoStatements: the report against statements has nothing to compare
// the ledger with.
var ErrNoStatements = errors.New("no bank statement imported yet (settle statement import FILE)")

// StatementReporter reconciles the ledger with the bank statements
// imported by StatementImporter, instead of the bank's API: the classes of
// BankReporter, matched on the settlement through the statement lines'
// references, plus returned (returns the ledger has not reversed),
// unmatched entries and balance breaks (`settle reconcile bank
// --statements`, DESIGN section 8).
//
// # What the statements say about a settlement
//
// Its lines are the statement lines matched to it by reference. A debit
// pays it, a credit brings the payout back (a return or a reversal). A
// booking shown by several imported files (the day's camt.054 and its
// camt.053, or one statement sent twice) counts once: a line is known by
// its account, the bank's entry reference, booking date, direction, entry
// amount and its place in the entry; a line without a bank reference counts
// on its own. paid - back is what the bank moved net.
//
// # Classes
//
// In this order, the first that applies: duplicate_at_bank (two payments
// net); status_mismatch (a movement for a settlement neither confirmed nor
// returned, a reversal for one not returned); unresolved (not terminal;
// also a confirmed settlement on no statement yet because it was confirmed
// after the last import); missing_in_ledger (confirmed, paid, no
// movement), status_mismatch (confirmed, not paid, no movement); returned
// (confirmed, and the payout came back); missing_at_bank (confirmed with
// its movement, on no statement); amount_mismatch (the paid amount or
// currency, or the movement's, is not the settlement's); matched. Returned
// here: returned_agreed, or status_mismatch when the statements show it
// paid and not returned, or its movements are not a payout and a reversal.
// Failed here: failed_agreed, or status_mismatch when the statements show
// it paid.
//
// # Consistent while the worker runs
//
// Everything is read in one REPEATABLE READ, READ ONLY snapshot, which
// takes only the ACCESS SHARE locks of a SELECT: it never blocks the
// worker nor an import. PostgreSQL classifies; the process holds one row at
// a time.
type StatementReporter struct {
	// DB is the database (required).
	DB *pgxpool.Pool
	// Progress, when set, is called as the breaks are streamed (phase
	// "report").
	Progress func(BankProgress)
	// Now is the clock of BankCounts.AsOf. Default: the database's.
	Now func() time.Time
	// BankName, when set, reconciles only the settlements bound to that
	// bank; lines matched to another bank's settlements are left out.
	BankName string
}

// bookingKey identifies a booking across the files that show it (see
// StatementReporter); e is bank_statement_entries, st its statement.
const bookingKey = `CASE WHEN e.entry_ref IS NULL THEN 'line ' || e.id
	ELSE concat_ws(' ', length(coalesce(st.account, '')), coalesce(st.account, ''), length(e.entry_ref), e.entry_ref,
	               e.booked_on, e.direction, e.entry_amount_minor, e.tx_index) END`

// stmtClassifySQL classifies every settlement against its statement lines;
// $1 is the time of the last import.
const stmtClassifySQL = `
	WITH lines AS (
		SELECT DISTINCT ON (x.bk) x.settlement_id, x.direction, x.amount_minor, x.currency
		FROM (SELECT e.id, e.settlement_id, e.direction, e.amount_minor, e.currency, ` + bookingKey + ` AS bk
		      FROM bank_statement_entries e JOIN bank_statements st ON st.id = e.statement_id
		      WHERE e.settlement_id IS NOT NULL
		        -- A payment is a debit that is no reversal or return, a
		        -- return a credit that carries return information: a
		        -- line that is neither pays nor brings back anything.
		        AND CASE WHEN e.direction = 'debit' THEN NOT e.reversal AND e.return_reason IS NULL
		                 ELSE e.reversal OR e.return_reason IS NOT NULL END) x
		ORDER BY x.bk, x.id
	), b AS (
		SELECT settlement_id,
		       count(*) FILTER (WHERE direction = 'debit') AS n_paid,
		       count(*) FILTER (WHERE direction = 'credit') AS n_back,
		       min(amount_minor) FILTER (WHERE direction = 'debit') AS paid_min,
		       max(amount_minor) FILTER (WHERE direction = 'debit') AS paid_max,
		       coalesce(bool_or(amount_minor IS NULL) FILTER (WHERE direction = 'debit'), false) AS paid_unknown,
		       min(currency) FILTER (WHERE direction = 'debit') AS paid_ccy_min,
		       max(currency) FILTER (WHERE direction = 'debit') AS paid_ccy_max
		FROM lines GROUP BY settlement_id
	), j AS (
		SELECT s.settlement_id, s.state, s.amount_cents, s.currency, s.needs_investigation, s.investigation_reason,
		       m.settlement_id IS NOT NULL AS has_mv, m.amount_cents AS mv_amount, m.currency AS mv_currency,
		       r.settlement_id IS NOT NULL AS has_rev, r.amount_cents AS rev_amount, r.currency AS rev_currency,
		       coalesce(b.n_paid, 0) AS n_paid, coalesce(b.n_back, 0) AS n_back,
		       b.paid_min, b.paid_max, coalesce(b.paid_unknown, false) AS paid_unknown, b.paid_ccy_min, b.paid_ccy_max
		FROM ` + reportSettlements + ` s
		LEFT JOIN ledger_movements m ON m.settlement_id = s.settlement_id AND m.kind = 'payout'
		LEFT JOIN ledger_movements r ON r.settlement_id = s.settlement_id AND r.kind = 'reversal'
		LEFT JOIN b ON b.settlement_id = s.settlement_id
	), c AS (
		SELECT j.*, CASE
			WHEN n_paid >= 2 AND n_paid - n_back >= 2 THEN 'duplicate_at_bank'
			WHEN has_mv AND state NOT IN ('confirmed', 'returned') THEN 'status_mismatch'
			WHEN has_rev AND state <> 'returned' THEN 'status_mismatch'
			WHEN state NOT IN ('confirmed', 'failed', 'returned') THEN 'unresolved'
			WHEN state = 'confirmed' AND NOT has_mv THEN
				CASE WHEN n_paid > n_back THEN 'missing_in_ledger' ELSE 'status_mismatch' END
			WHEN state = 'confirmed' AND n_back > 0 AND n_paid <= n_back THEN 'returned'
			WHEN state = 'confirmed' AND n_paid = 0
			     AND (SELECT max(t.at) FROM settlement_transitions t
			           WHERE t.settlement_id = j.settlement_id AND t.to_state = 'confirmed') > $1 THEN 'unresolved'
			WHEN state = 'confirmed' AND n_paid = 0 THEN 'missing_at_bank'
			WHEN state = 'confirmed' AND (paid_unknown OR paid_min <> amount_cents OR paid_max <> amount_cents
			                              OR paid_ccy_min <> currency OR paid_ccy_max <> currency
			                              OR mv_amount <> amount_cents OR mv_currency <> currency) THEN 'amount_mismatch'
			WHEN state = 'confirmed' THEN 'matched'
			WHEN state = 'returned' AND (NOT has_mv OR NOT has_rev OR n_paid > n_back) THEN 'status_mismatch'
			WHEN state = 'returned' THEN 'returned_agreed'
			WHEN n_paid > n_back THEN 'status_mismatch'
			ELSE 'failed_agreed'
		END AS class
		FROM j
	)`

// unmatchedSQL selects the ids of the lines no settlement explains and no
// ledger credit took in (settle statement import --credit-prefix), each
// booking once.
const unmatchedSQL = `
	SELECT DISTINCT ON (x.bk) x.id
	FROM (SELECT e.id, ` + bookingKey + ` AS bk
	      FROM bank_statement_entries e JOIN bank_statements st ON st.id = e.statement_id
	      WHERE e.settlement_id IS NULL AND NOT ` + inspect.LineCreditedSQL + `) x
	ORDER BY x.bk, x.id`

// Run produces the report into sink and returns its counts. It fails with
// ErrNoStatements, passing nothing to sink, when no file was imported.
func (r *StatementReporter) Run(ctx context.Context, sink StatementSink) (BankCounts, error) {
	counts := BankCounts{Source: SourceStatements, ByClass: map[Class]int64{}}
	err := inspect.ReadTx(ctx, r.DB, func(tx pgx.Tx) error {
		for _, sql := range []string{
			"SET LOCAL statement_timeout = '15min'",
			"SET LOCAL idle_in_transaction_session_timeout = '15min'",
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("error preparing the report: %w", err)
			}
		}
		var last *time.Time
		if err := setReportBank(ctx, tx, r.BankName); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+reportSettlements+` s), now(),
			(SELECT count(*) FROM bank_statement_files), (SELECT max(imported_at) FROM bank_statement_files),
			(SELECT count(*) FROM bank_statements), (SELECT count(*) FROM bank_statement_entries)`).
			Scan(&counts.Settlements, &counts.AsOf, &counts.StatementFiles, &last, &counts.Statements, &counts.StatementLines)
		if err != nil {
			return fmt.Errorf("error counting: %w", err)
		}
		if counts.StatementFiles == 0 || last == nil {
			return ErrNoStatements
		}
		counts.LastImportAt = *last
		if r.Now != nil {
			counts.AsOf = r.Now()
		}
		if err := stmtClassCounts(ctx, tx, &counts); err != nil {
			return err
		}
		if err := sink.Counts(counts); err != nil {
			return err
		}
		if err := r.streamBreaks(ctx, tx, counts.LastImportAt, sink); err != nil {
			return err
		}
		err = inspect.EachLine(ctx, tx, inspect.LineSelect+` FROM (`+unmatchedSQL+`) u
			JOIN bank_statement_entries e ON e.id = u.id JOIN bank_statements st ON st.id = e.statement_id
			JOIN bank_statement_files f ON f.id = st.file_id
			ORDER BY f.id, st.seq, e.position, e.tx_index`, nil, sink.UnmatchedEntry)
		if err != nil {
			return fmt.Errorf("error listing unmatched entries: %w", err)
		}
		return inspect.EachBalanceBreak(ctx, tx, inspect.BalanceBreakSelect+` ORDER BY f.id, st.seq`, nil, sink.BalanceBreak)
	})
	if err != nil {
		return BankCounts{}, err
	}
	return counts, nil
}

func stmtClassCounts(ctx context.Context, tx pgx.Tx, counts *BankCounts) error {
	for _, cl := range []Class{ClassMatched, ClassFailedAgreed, ClassReturnedAgreed, ClassUnmatchedEntries, ClassBalanceBreaks} {
		counts.ByClass[cl] = 0
	}
	for _, cl := range StatementBreakClasses {
		counts.ByClass[cl] = 0
	}
	if err := countClasses(ctx, tx, stmtClassifySQL, counts, counts.LastImportAt); err != nil {
		return err
	}
	var unmatched, unbalanced int64
	err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM (`+unmatchedSQL+`) u),
		(SELECT count(*) FROM bank_statements WHERE balanced = false)`).Scan(&unmatched, &unbalanced)
	if err != nil {
		return fmt.Errorf("error counting unmatched entries: %w", err)
	}
	counts.ByClass[ClassUnmatchedEntries], counts.ByClass[ClassBalanceBreaks] = unmatched, unbalanced
	return nil
}

// streamBreaks streams the listed classes in the order of
// StatementBreakClasses, by settlement id.
func (r *StatementReporter) streamBreaks(ctx context.Context, tx pgx.Tx, lastImport time.Time, sink StatementSink) error {
	var order strings.Builder
	order.WriteString("CASE c.class")
	for i, cl := range StatementBreakClasses {
		fmt.Fprintf(&order, " WHEN '%s' THEN %d", cl, i)
	}
	order.WriteString(" END")
	rows, err := tx.Query(ctx, stmtClassifySQL+`
		SELECT c.class, c.settlement_id, c.state, c.amount_cents, c.currency,
		       c.needs_investigation, coalesce(c.investigation_reason, ''),
		       c.has_mv, c.mv_amount, c.mv_currency, c.has_rev, c.rev_amount, c.rev_currency,
		       CASE WHEN c.class = 'unresolved' THEN
		            (SELECT t.at FROM settlement_transitions t
		              WHERE t.settlement_id = c.settlement_id AND t.to_state = c.state
		              ORDER BY t.id DESC LIMIT 1) END,
		       coalesce((SELECT json_agg(json_build_object(
		                        'settlement_id', e.settlement_id, 'file', f.file_name, 'statement', st.digest,
		                        'account', st.account, 'position', e.position, 'tx_index', e.tx_index,
		                        'tx_count', e.tx_count, 'entry_ref', e.entry_ref, 'end_to_end_id', e.end_to_end_id,
		                        'amount_minor', e.amount_minor, 'entry_amount_minor', e.entry_amount_minor,
		                        'currency', e.currency, 'direction', e.direction,
		                        'booked_on', to_char(e.booked_on, 'YYYY-MM-DD'), 'value_on', to_char(e.value_on, 'YYYY-MM-DD'),
		                        'reversal', e.reversal, 'return_reason', e.return_reason,
		                        'problem', (`+inspect.LineProblemSQL+`))
		                        ORDER BY f.id, st.seq, e.position, e.tx_index)
		                 FROM bank_statement_entries e JOIN bank_statements st ON st.id = e.statement_id
		                 JOIN bank_statement_files f ON f.id = st.file_id
		                 JOIN settlements s ON s.settlement_id = e.settlement_id
		                 WHERE e.settlement_id = c.settlement_id), '[]'::json)
		FROM c
		WHERE c.class IN ('missing_in_ledger', 'missing_at_bank', 'amount_mismatch', 'status_mismatch',
		                  'duplicate_at_bank', 'returned', 'unresolved')
		ORDER BY `+order.String()+`, c.settlement_id`, lastImport)
	if err != nil {
		return fmt.Errorf("error listing breaks: %w", err)
	}
	var (
		b                 Break
		class             string
		hasMv, hasRev     bool
		mvAmount, rvAmt   *int64
		mvCur, rvCur      *string
		lines             []byte
		n                 int64
		confirmedUnlisted = func(b *Break) bool { return b.Class == ClassUnresolved && b.State == "confirmed" }
	)
	_, err = pgx.ForEachRow(rows, []any{&class, &b.SettlementID, &b.State, &b.AmountCents, &b.Currency,
		&b.NeedsInvestigation, &b.InvestigationReason, &hasMv, &mvAmount, &mvCur, &hasRev, &rvAmt, &rvCur,
		&b.Since, &lines}, func() error {
		b.Class = Class(class)
		b.Movement, b.Reversal = nil, nil
		if hasMv && mvAmount != nil && mvCur != nil {
			b.Movement = &BreakMovement{AmountCents: *mvAmount, Currency: *mvCur}
		}
		if hasRev && rvAmt != nil && rvCur != nil {
			b.Reversal = &BreakMovement{AmountCents: *rvAmt, Currency: *rvCur}
		}
		b.StatementEntries = nil
		if err := json.Unmarshal(lines, &b.StatementEntries); err != nil {
			return fmt.Errorf("error decoding the statement lines of %s: %w", b.SettlementID, err)
		}
		if b.StatementEntries == nil {
			b.StatementEntries = []inspect.StatementLine{}
		}
		b.Reason = b.explainStatements(confirmedUnlisted(&b), lastImport)
		n++
		if n%1000 == 0 && r.Progress != nil {
			r.Progress(BankProgress{Phase: "report", Done: n})
		}
		return sink.Break(b)
	})
	if err != nil {
		return fmt.Errorf("error listing breaks: %w", err)
	}
	if r.Progress != nil {
		r.Progress(BankProgress{Phase: "report", Done: n})
	}
	return nil
}

// statementSide describes a settlement's statement lines in a few words.
func (b Break) statementSide() string {
	var paid, back []string
	for _, l := range b.StatementEntries {
		amount := "?"
		if l.AmountMinor != nil {
			amount = fmt.Sprint(*l.AmountMinor)
		}
		where := amount + " " + l.Currency
		if l.BookedOn != nil {
			where += " on " + *l.BookedOn
		}
		if l.Return() {
			how := "returned"
			if l.Reversal {
				how = "reversed"
			}
			if l.ReturnReason != nil {
				how += " (" + *l.ReturnReason + ")"
			}
			back = append(back, how+" "+where)
		} else if l.Problem != "" {
			paid = append(paid, "a line of "+where+" that books nothing ("+l.Problem+")")
		} else {
			paid = append(paid, "paid "+where)
		}
	}
	if len(paid)+len(back) == 0 {
		return "no statement line"
	}
	return strings.Join(append(paid, back...), ", ")
}

// explainStatements says in words why b is listed by the report against
// statements.
func (b Break) explainStatements(confirmedUnlisted bool, lastImport time.Time) string {
	side := b.statementSide()
	switch b.Class {
	case ClassMissingInLedger:
		return "the statements show it paid (" + side + ") but the ledger has no movement"
	case ClassMissingAtBank:
		return "the ledger has a movement but no imported statement shows the payment"
	case ClassAmountMismatch:
		mv := "none"
		if b.Movement != nil {
			mv = fmt.Sprintf("%d %s", b.Movement.AmountCents, b.Movement.Currency)
		}
		return fmt.Sprintf("settlement %d %s, movement %s, statements: %s", b.AmountCents, b.Currency, mv, side)
	case ClassStatusMismatch:
		switch {
		case b.Movement != nil && b.State != "confirmed" && b.State != "returned":
			return "a ledger movement exists but the settlement is " + b.State
		case b.Reversal != nil && b.State != "returned":
			return "a reversal movement exists but the settlement is " + b.State
		case b.State == "returned" && (b.Movement == nil || b.Reversal == nil):
			return "returned without both a payout and a reversal movement"
		case b.State == "confirmed":
			return "we say confirmed without a movement, the statements: " + side
		}
		return "we say " + b.State + ", the statements: " + side
	case ClassDuplicateAtBank:
		return "the statements show it paid more than once: " + side
	case ClassReturned:
		return "the statements show the payout came back (" + side + ") and the ledger has not reversed it"
	case ClassUnresolved:
		if confirmedUnlisted {
			return "confirmed after the last statement import (" + lastImport.UTC().Format(time.RFC3339) + "): on no statement yet"
		}
		s := b.State + ", statements: " + side
		if b.NeedsInvestigation {
			s += "; needs investigation: " + b.InvestigationReason
		}
		return s
	}
	return string(b.Class)
}
