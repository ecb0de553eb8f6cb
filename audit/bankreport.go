package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/inspect"
)

// Class is what the ledger-vs-bank report found for one settlement id (the
// business id: settlements.settlement_id on our side, the payment's
// reference at the bank).
type Class string

// The classes of the report. The first five are discrepancies; unresolved
// settlements are listed but are not discrepancies; the last three are
// counted only.
const (
	// ClassMissingInLedger: the bank settled a payment for the id and the
	// ledger has no movement for it (or no settlement at all).
	ClassMissingInLedger Class = "missing_in_ledger"
	// ClassMissingAtBank: the ledger has a movement and the bank has no
	// settled payment for the id.
	ClassMissingAtBank Class = "missing_at_bank"
	// ClassAmountMismatch: both sides settled, with another amount or
	// currency (settlement, movement and bank payment must all agree).
	ClassAmountMismatch Class = "amount_mismatch"
	// ClassStatusMismatch: the outcome differs: we say failed and the bank
	// settled (or still holds an open payment), we say confirmed without a
	// movement and the bank did not settle, or a movement exists for a
	// settlement that is not confirmed.
	ClassStatusMismatch Class = "status_mismatch"
	// ClassDuplicateAtBank: the bank holds two or more payments for one id,
	// whatever our state (money may have moved twice).
	ClassDuplicateAtBank Class = "duplicate_at_bank"
	// ClassUnresolved: the settlement is not terminal yet (pending, sent,
	// uncertain): not a discrepancy.
	ClassUnresolved Class = "unresolved"
	// ClassMatched: confirmed, one movement, one settled bank payment, all
	// with the same amount and currency.
	ClassMatched Class = "matched"
	// ClassFailedAgreed: failed here; the bank failed, returned or never
	// created the payment. Consistent, counted only.
	ClassFailedAgreed Class = "failed_agreed"
	// ClassBankFailedUnknown: the bank holds a failed or returned payment
	// for an id we have no settlement for. Nothing moved; counted only.
	ClassBankFailedUnknown Class = "bank_failed_unknown"

	// The classes of the report against imported statements
	// (StatementReporter) only.

	// ClassReturned: the statements bring a confirmed settlement's payout
	// back (a return or a reversal) and the ledger has not reversed it.
	ClassReturned Class = "returned"
	// ClassReturnedAgreed: returned here, with its reversal, and the bank
	// shows the return (against the bank's statement API: its one payment
	// no longer settled; against imported statements: the return, or
	// nothing). Counted only.
	ClassReturnedAgreed Class = "returned_agreed"
	// ClassUnmatchedEntries counts statement lines no settlement explains
	// (each booking once, however many files show it).
	ClassUnmatchedEntries Class = "unmatched_entries"
	// ClassBalanceBreaks counts statements whose opening balance plus
	// their entries is not their closing balance.
	ClassBalanceBreaks Class = "balance_breaks"
)

// BreakClasses are the classes the report lists one by one, in the order it
// lists them.
var BreakClasses = []Class{ClassMissingInLedger, ClassMissingAtBank, ClassAmountMismatch,
	ClassStatusMismatch, ClassDuplicateAtBank, ClassUnresolved}

// StatementBreakClasses are the classes the report against imported
// statements lists one by one, in the order it lists them; its lists of
// unmatched entries and balance breaks follow.
var StatementBreakClasses = []Class{ClassMissingInLedger, ClassMissingAtBank, ClassAmountMismatch,
	ClassStatusMismatch, ClassDuplicateAtBank, ClassReturned, ClassUnresolved}

// Discrepancy reports whether c is a break between the ledger and the bank
// (unresolved is not one).
func (c Class) Discrepancy() bool {
	switch c {
	case ClassMissingInLedger, ClassMissingAtBank, ClassAmountMismatch, ClassStatusMismatch, ClassDuplicateAtBank,
		ClassReturned, ClassUnmatchedEntries, ClassBalanceBreaks:
		return true
	}
	return false
}

// Sources of a report: the bank's API (BankReporter) or the statements
// imported from the bank's files (StatementReporter).
const (
	SourceBank       = "bank"
	SourceStatements = "statements"
)

// BankCounts are the totals of a report, known before the first break is
// streamed.
type BankCounts struct {
	// Source is SourceBank or SourceStatements.
	Source string `json:"source"`
	// ByClass counts every class of the report's source, 0 included.
	ByClass map[Class]int64 `json:"by_class"`
	// Settlements is how many settlements the ledger holds.
	Settlements int64 `json:"settlements"`
	// BankPayments is how many payments the bank's statement listed.
	BankPayments int64 `json:"bank_payments"`
	// Rechecked is how many payments were read again by key because the
	// statement, read before the ledger's snapshot, could be older than it.
	Rechecked int64 `json:"rechecked"`
	// AsOf is when the ledger's snapshot was taken.
	AsOf time.Time `json:"as_of"`
	// With SourceStatements: how many files, statements and lines were
	// imported, and when the last file was.
	StatementFiles int64     `json:"statement_files,omitempty"`
	Statements     int64     `json:"statements,omitempty"`
	StatementLines int64     `json:"statement_lines,omitempty"`
	LastImportAt   time.Time `json:"last_import_at,omitzero"`
}

// Discrepancies is the number of breaks, unresolved settlements excluded.
func (c BankCounts) Discrepancies() int64 {
	var n int64
	for cl, k := range c.ByClass {
		if cl.Discrepancy() {
			n += k
		}
	}
	return n
}

// Break is one settlement id the report lists: a discrepancy or an
// unresolved settlement, with both sides' facts.
type Break struct {
	Class        Class  `json:"-"`
	SettlementID string `json:"settlement_id"`
	// State is our state; empty when we have no settlement with this id.
	State string `json:"state,omitempty"`
	// AmountCents and Currency are the settlement's (0 and "" when none).
	AmountCents         int64  `json:"amount_cents,omitempty"`
	Currency            string `json:"currency,omitempty"`
	NeedsInvestigation  bool   `json:"needs_investigation,omitempty"`
	InvestigationReason string `json:"investigation_reason,omitempty"`
	// Since is when an unresolved settlement entered its state.
	Since *time.Time `json:"since,omitempty"`
	// Movement is the ledger movement (the payout); nil when there is none.
	Movement *BreakMovement `json:"movement"`
	// Reversal is the reversing movement of a returned settlement (the
	// report against statements only).
	Reversal *BreakMovement `json:"reversal_movement,omitempty"`
	// BankPayments are the payments the bank holds for the id, in the
	// bank's order (empty when none). Nil, and absent from the JSON, in
	// the report against statements.
	BankPayments []BankPayment `json:"bank_payments,omitzero"`
	// StatementEntries are the imported statement lines matched to the id
	// (the report against statements only: empty when none).
	StatementEntries []inspect.StatementLine `json:"statement_entries,omitzero"`
	// Reason says in words what is wrong.
	Reason string `json:"reason"`
}

// BreakMovement is the ledger side of a Break.
type BreakMovement struct {
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// BankPayment is the bank side of a Break: one payment of the statement.
type BankPayment struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	Status         string `json:"status"`
	AmountCents    int64  `json:"amount_cents"`
	Currency       string `json:"currency"`
}

// BankSink receives a report as it streams: Counts once, first, then every
// Break grouped by class in the order of BreakClasses and by settlement id
// within a class.
type BankSink interface {
	Counts(BankCounts) error
	Break(Break) error
}

// StatementSink receives the report against imported statements: what a
// BankSink receives (the breaks in the order of StatementBreakClasses),
// then every unmatched entry, then every statement that does not balance.
type StatementSink interface {
	BankSink
	UnmatchedEntry(inspect.StatementLine) error
	BalanceBreak(inspect.BalanceBreak) error
}

// BankReport is a whole report held in memory: a BankSink and a
// StatementSink for tests and for callers that know the report is small.
type BankReport struct {
	BankCounts
	Breaks        map[Class][]Break
	Unmatched     []inspect.StatementLine
	BalanceBreaks []inspect.BalanceBreak
}

// Counts implements BankSink.
func (r *BankReport) Counts(c BankCounts) error {
	r.BankCounts = c
	r.Breaks = map[Class][]Break{}
	for _, cl := range slices.Concat(BreakClasses, StatementBreakClasses) {
		r.Breaks[cl] = []Break{}
	}
	r.Unmatched, r.BalanceBreaks = []inspect.StatementLine{}, []inspect.BalanceBreak{}
	return nil
}

// UnmatchedEntry implements StatementSink.
func (r *BankReport) UnmatchedEntry(l inspect.StatementLine) error {
	r.Unmatched = append(r.Unmatched, l)
	return nil
}

// BalanceBreak implements StatementSink.
func (r *BankReport) BalanceBreak(b inspect.BalanceBreak) error {
	r.BalanceBreaks = append(r.BalanceBreaks, b)
	return nil
}

// Break implements BankSink.
func (r *BankReport) Break(b Break) error {
	r.Breaks[b.Class] = append(r.Breaks[b.Class], b)
	return nil
}

// BankProgress reports how far a report got, for a progress indicator.
type BankProgress struct {
	// Phase is "statement" (reading the bank's statement), "recheck"
	// (re-reading payments by key), or "report" (streaming the breaks).
	Phase string
	// Done counts the payments read, rechecked, or the breaks streamed.
	Done int64
}

// Defaults of BankReporter.
const (
	DefaultStatementPageSize = 1000
	defaultRecheckBatch      = 200
)

// BankReporter reconciles the ledger with the bank's statement, matched on
// the business id (settlement_id here, the payment's reference there).
//
// # Memory stays flat
//
// The bank lists payments in creation order, not by reference, so the two
// sides cannot be merged as two sorted streams without sorting one of them
// somewhere. PostgreSQL is the place that sorts and hashes a million rows
// without holding them in our heap: the report copies the statement, one
// page at a time (COPY, PageSize rows), into a session-private temporary
// table, indexes it by reference, and classifies every id with one FULL JOIN
// of settlements, ledger_movements and the staged statement. The counts come
// from one aggregate over that join; the breaks are streamed from a second
// query as the server sends them. The process holds one statement page, one
// recheck batch and one result row at a time, whatever the count (see
// BenchmarkBankReport).
//
// # Consistent while the worker runs
//
// The statement is read first; the ledger is then read in one REPEATABLE
// READ snapshot taken after the last page arrived. A payment is created at
// the bank only after its settlement committed, and a settlement is
// confirmed or failed only after the bank said so, so every id the
// statement lists is known to the snapshot, and the statement can only be
// behind the ledger: a settlement confirmed after its page was read shows
// there as processing, or not at all. Those few (terminal here, no final
// payment there) are asked again by key (StatusByKey) before classifying,
// so a live system does not report breaks that are only the report's own
// lag.
//
// The snapshot's transaction is READ ONLY (PostgreSQL still lets it write
// rows of temporary tables, which is all the recheck needs; the tables are
// created before it) and takes only the ACCESS SHARE locks of a SELECT: it
// never blocks the worker.
type BankReporter struct {
	// DB is the database (required). The report holds one connection of it
	// for its whole run.
	DB *pgxpool.Pool
	// Bank is the bank (required).
	Bank bankclient.Bank
	// BankName, when set, reconciles only the settlements bound to that
	// bank (several banks on one database): a payment at Bank of another
	// bank's settlement is missing_in_ledger here.
	BankName string
	// PageSize is the statement page size asked of the bank and the COPY
	// batch size. Default DefaultStatementPageSize.
	PageSize int
	// Progress, when set, is called as the report advances.
	Progress func(BankProgress)
	// Now is the clock of BankCounts.AsOf. Default time.Now.
	Now func() time.Time
}

func (r *BankReporter) progress(phase string, done int64) {
	if r.Progress != nil {
		r.Progress(BankProgress{Phase: phase, Done: done})
	}
}

// Temporary tables of a report, private to its connection.
const (
	stmtTable    = "settle_bank_statement"
	recheckTable = "settle_bank_recheck"
)

var stmtColumns = []string{"seq", "id", "idempotency_key", "reference", "status", "amount_cents", "currency"}

// Run produces the report into sink and returns its counts. It fails, with
// nothing passed to sink, when the bank's statement cannot be read whole.
func (r *BankReporter) Run(ctx context.Context, sink BankSink) (BankCounts, error) {
	conn, err := r.DB.Acquire(ctx)
	if err != nil {
		return BankCounts{}, fmt.Errorf("error connecting to the database: %w", err)
	}
	defer func() {
		// The temporary tables live as long as the session: drop them, or
		// drop the session, before the connection goes back to the pool.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(cctx, "DROP TABLE IF EXISTS "+stmtTable+", "+recheckTable); err != nil {
			_ = conn.Conn().Close(cctx)
		}
		conn.Release()
	}()
	for _, sql := range []string{
		"DROP TABLE IF EXISTS " + stmtTable + ", " + recheckTable,
		"CREATE TEMP TABLE " + stmtTable + ` (seq bigint NOT NULL, id text NOT NULL, idempotency_key text NOT NULL,
			reference text NOT NULL, status text NOT NULL, amount_cents bigint NOT NULL, currency text NOT NULL)`,
		"CREATE TEMP TABLE " + recheckTable + " (LIKE " + stmtTable + ")",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return BankCounts{}, fmt.Errorf("error preparing the report: %w", err)
		}
	}

	counts := BankCounts{Source: SourceBank, ByClass: map[Class]int64{}}
	if counts.BankPayments, err = r.loadStatement(ctx, conn.Conn()); err != nil {
		return BankCounts{}, err
	}
	for _, sql := range []string{
		"CREATE INDEX ON " + stmtTable + " (reference)",
		"ANALYZE " + stmtTable,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return BankCounts{}, fmt.Errorf("error indexing the statement: %w", err)
		}
	}

	// The ledger's snapshot is taken now, after the statement was read: for
	// every settlement, the statement is at most as new as the ledger.
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, sql := range []string{
			"SET LOCAL statement_timeout = '15min'",
			"SET LOCAL idle_in_transaction_session_timeout = '15min'",
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("error preparing the report: %w", err)
			}
		}
		if err := setReportBank(ctx, tx, r.BankName); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT count(*), now() FROM "+reportSettlements+" s").Scan(&counts.Settlements, &counts.AsOf); err != nil {
			return fmt.Errorf("error counting settlements: %w", err)
		}
		if r.Now != nil {
			counts.AsOf = r.Now()
		}
		var err error
		if counts.Rechecked, err = r.recheck(ctx, tx); err != nil {
			return err
		}
		if err := classCounts(ctx, tx, &counts); err != nil {
			return err
		}
		if err := sink.Counts(counts); err != nil {
			return err
		}
		return r.streamBreaks(ctx, tx, sink)
	})
	if err != nil {
		return BankCounts{}, err
	}
	return counts, nil
}

// loadStatement copies the bank's whole statement into the temporary table,
// one page at a time.
func (r *BankReporter) loadStatement(ctx context.Context, conn *pgx.Conn) (int64, error) {
	size := r.PageSize
	if size <= 0 {
		size = DefaultStatementPageSize
	}
	batch := make([][]any, 0, size)
	var n int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{stmtTable}, stmtColumns, pgx.CopyFromRows(batch)); err != nil {
			return fmt.Errorf("error staging the bank statement: %w", err)
		}
		batch = batch[:0]
		r.progress("statement", n)
		return nil
	}
	for p, err := range bankclient.Payments(ctx, r.Bank, size) {
		if err != nil {
			return 0, fmt.Errorf("error reading the bank statement: %w", err)
		}
		n++
		batch = append(batch, paymentRow(n, p))
		if len(batch) == size {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return n, nil
}

func paymentRow(seq int64, p bankclient.Payment) []any {
	return []any{seq, p.ID, p.IdempotencyKey, p.Reference, string(p.Status), p.AmountCents, p.Currency}
}

// recheckCandidatesSQL selects the terminal settlements whose verdict could
// be wrong only because the statement is older than the ledger: confirmed
// with no settled payment in the statement (the payment may have been
// created or settled after the statement was read), and failed while the
// statement still shows an open payment.
const recheckCandidatesSQL = `
	DECLARE settle_recheck NO SCROLL CURSOR FOR
	WITH b AS (
		SELECT reference,
		       count(*) FILTER (WHERE status = 'settled') AS n_settled,
		       count(*) FILTER (WHERE status IN ('accepted', 'processing')) AS n_open
		FROM ` + stmtTable + ` GROUP BY reference
	)
	SELECT s.settlement_id, s.bank_key, coalesce(s.bank_payment_id, '')
	FROM ` + reportSettlements + ` s LEFT JOIN b ON b.reference = coalesce(s.bank_reference, s.settlement_id)
	WHERE (s.state = 'confirmed' AND coalesce(b.n_settled, 0) = 0)
	   OR (s.state = 'failed' AND coalesce(b.n_open, 0) > 0)`

// recheck asks the bank about every candidate, by key or, at a bank that
// cannot be asked by key (Stripe), by its own payment id once an answer
// gave it, and refreshes the staged statement with its answers. A 404,
// or a bank that can be asked neither way, leaves the statement as it is.
func (r *BankReporter) recheck(ctx context.Context, tx pgx.Tx) (int64, error) {
	if _, err := tx.Exec(ctx, recheckCandidatesSQL); err != nil {
		return 0, fmt.Errorf("error finding payments to recheck: %w", err)
	}
	var n int64
	for {
		rows, err := tx.Query(ctx, fmt.Sprintf("FETCH %d FROM settle_recheck", defaultRecheckBatch))
		if err != nil {
			return 0, fmt.Errorf("error finding payments to recheck: %w", err)
		}
		type cand struct{ id, key, paymentID string }
		cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cand, error) {
			var c cand
			return c, row.Scan(&c.id, &c.key, &c.paymentID)
		})
		if err != nil {
			return 0, fmt.Errorf("error finding payments to recheck: %w", err)
		}
		if len(cands) == 0 {
			break
		}
		fresh := make([][]any, 0, len(cands))
		for _, c := range cands {
			p, err := r.Bank.StatusByKey(ctx, c.key)
			if errors.Is(err, bankclient.ErrUnsupported) {
				byID, ok := r.Bank.(bankclient.IDLookup)
				if !ok || c.paymentID == "" {
					continue
				}
				p, err = byID.StatusByID(ctx, c.paymentID)
			}
			switch {
			case bankclient.IsNotFound(err):
				continue
			case err != nil:
				return 0, fmt.Errorf("error rechecking settlement %s at the bank: %w", c.id, err)
			}
			fresh = append(fresh, paymentRow(0, p))
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{recheckTable}, stmtColumns, pgx.CopyFromRows(fresh)); err != nil {
			return 0, fmt.Errorf("error staging rechecked payments: %w", err)
		}
		n += int64(len(cands))
		r.progress("recheck", n)
	}
	for _, sql := range []string{
		"CLOSE settle_recheck",
		// A rechecked payment keeps its place in the bank's order.
		"UPDATE " + recheckTable + " r SET seq = s.seq FROM " + stmtTable + " s WHERE s.id = r.id",
		"DELETE FROM " + stmtTable + " s USING " + recheckTable + " r WHERE s.id = r.id",
		"INSERT INTO " + stmtTable + " SELECT * FROM " + recheckTable,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return 0, fmt.Errorf("error merging rechecked payments: %w", err)
		}
	}
	return n, nil
}

// classifySQL joins the ledger and the staged statement on the business id
// (a FULL JOIN: ids known to one side only are found too) and classifies
// every id. The first matching rule wins; duplicates come first because
// they are a fact at the bank whatever our state.
const classifySQL = `
	WITH b AS (
		SELECT reference, count(*) AS n,
		       count(*) FILTER (WHERE status = 'settled') AS n_settled,
		       min(status) AS status, min(amount_cents) AS amount_cents, min(currency) AS currency
		FROM ` + stmtTable + ` GROUP BY reference
	), j AS (
		SELECT coalesce(s.settlement_id, b.reference) AS settlement_id,
		       coalesce(s.bank_reference, s.settlement_id, b.reference) AS ref,
		       s.state, s.amount_cents, s.currency, s.needs_investigation, s.investigation_reason,
		       m.settlement_id IS NOT NULL AS has_mv, m.amount_cents AS mv_amount, m.currency AS mv_currency,
		       rv.settlement_id IS NOT NULL AS has_rv,
		       coalesce(b.n, 0) AS n, coalesce(b.n_settled, 0) AS n_settled,
		       b.status AS bank_status, b.amount_cents AS bank_amount, b.currency AS bank_currency
		FROM (` + reportSettlements + ` s LEFT JOIN ledger_movements m ON m.settlement_id = s.settlement_id AND m.kind = 'payout'
		      LEFT JOIN ledger_movements rv ON rv.settlement_id = s.settlement_id AND rv.kind = 'reversal')
		FULL JOIN b ON b.reference = coalesce(s.bank_reference, s.settlement_id)
	), c AS (
		SELECT j.*, CASE
			WHEN n >= 2 THEN 'duplicate_at_bank'
			WHEN state IS NULL THEN
				CASE WHEN bank_status IN ('failed', 'returned') THEN 'bank_failed_unknown' ELSE 'missing_in_ledger' END
			WHEN state = 'returned' THEN
				-- Paid, then back: the payout and its reversal here, the
				-- bank's one payment no longer settled (returned, or failed
				-- after it was paid at a bank that says so).
				CASE WHEN has_mv AND has_rv AND n = 1 AND n_settled = 0 THEN 'returned_agreed' ELSE 'status_mismatch' END
			WHEN has_mv AND state <> 'confirmed' THEN 'status_mismatch'
			WHEN state NOT IN ('confirmed', 'failed') THEN 'unresolved'
			WHEN state = 'confirmed' AND NOT has_mv THEN
				CASE WHEN n_settled > 0 THEN 'missing_in_ledger' ELSE 'status_mismatch' END
			WHEN state = 'confirmed' AND n_settled = 0 THEN 'missing_at_bank'
			WHEN state = 'confirmed' AND (bank_amount <> amount_cents OR bank_currency <> currency
			                              OR mv_amount <> amount_cents OR mv_currency <> currency) THEN 'amount_mismatch'
			WHEN state = 'confirmed' THEN 'matched'
			WHEN n = 0 OR bank_status IN ('failed', 'returned') THEN 'failed_agreed'
			ELSE 'status_mismatch'
		END AS class
		FROM j
	)`

func classCounts(ctx context.Context, tx pgx.Tx, counts *BankCounts) error {
	for _, cl := range []Class{ClassMatched, ClassFailedAgreed, ClassReturnedAgreed, ClassBankFailedUnknown} {
		counts.ByClass[cl] = 0
	}
	for _, cl := range BreakClasses {
		counts.ByClass[cl] = 0
	}
	return countClasses(ctx, tx, classifySQL, counts)
}

// countClasses adds to counts.ByClass the rows of classification sql
// (a WITH ending in the relation c, with a class column) per class.
func countClasses(ctx context.Context, tx pgx.Tx, sql string, counts *BankCounts, args ...any) error {
	rows, err := tx.Query(ctx, sql+" SELECT class, count(*) FROM c GROUP BY class", args...)
	if err != nil {
		return fmt.Errorf("error classifying: %w", err)
	}
	var cl string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&cl, &n}, func() error {
		counts.ByClass[Class(cl)] = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("error classifying: %w", err)
	}
	return nil
}

// streamBreaks streams the listed classes in report order. Rows arrive from
// the server as the client reads them: memory holds one row at a time.
func (r *BankReporter) streamBreaks(ctx context.Context, tx pgx.Tx, sink BankSink) error {
	rows, err := tx.Query(ctx, classifySQL+`
		SELECT c.class, c.settlement_id, coalesce(c.state, ''), coalesce(c.amount_cents, 0), coalesce(c.currency, ''),
		       coalesce(c.needs_investigation, false), coalesce(c.investigation_reason, ''),
		       c.has_mv, c.mv_amount, c.mv_currency,
		       CASE WHEN c.class = 'unresolved' THEN
		            (SELECT t.at FROM settlement_transitions t
		              WHERE t.settlement_id = c.settlement_id AND t.to_state = c.state
		              ORDER BY t.id DESC LIMIT 1) END,
		       coalesce((SELECT json_agg(json_build_object('id', p.id, 'idempotency_key', p.idempotency_key,
		                        'status', p.status, 'amount_cents', p.amount_cents, 'currency', p.currency) ORDER BY p.seq)
		                 FROM `+stmtTable+` p WHERE p.reference = c.ref), '[]'::json)
		FROM c
		WHERE c.class IN ('missing_in_ledger', 'missing_at_bank', 'amount_mismatch', 'status_mismatch',
		                  'duplicate_at_bank', 'unresolved')
		ORDER BY CASE c.class WHEN 'missing_in_ledger' THEN 1 WHEN 'missing_at_bank' THEN 2
		         WHEN 'amount_mismatch' THEN 3 WHEN 'status_mismatch' THEN 4
		         WHEN 'duplicate_at_bank' THEN 5 ELSE 6 END, c.settlement_id`)
	if err != nil {
		return fmt.Errorf("error listing breaks: %w", err)
	}
	var (
		b        Break
		class    string
		hasMv    bool
		mvAmount *int64
		mvCur    *string
		payments []byte
		n        int64
	)
	_, err = pgx.ForEachRow(rows, []any{&class, &b.SettlementID, &b.State, &b.AmountCents, &b.Currency,
		&b.NeedsInvestigation, &b.InvestigationReason, &hasMv, &mvAmount, &mvCur, &b.Since, &payments}, func() error {
		b.Class = Class(class)
		b.Movement = nil
		if hasMv && mvAmount != nil && mvCur != nil {
			b.Movement = &BreakMovement{AmountCents: *mvAmount, Currency: *mvCur}
		}
		b.BankPayments = nil
		if err := json.Unmarshal(payments, &b.BankPayments); err != nil {
			return fmt.Errorf("error decoding the bank payments of %s: %w", b.SettlementID, err)
		}
		if b.BankPayments == nil {
			b.BankPayments = []BankPayment{}
		}
		b.Reason = b.explain()
		n++
		if n%1000 == 0 {
			r.progress("report", n)
		}
		return sink.Break(b)
	})
	if err != nil {
		return fmt.Errorf("error listing breaks: %w", err)
	}
	r.progress("report", n)
	return nil
}

// bankSide describes the bank's payments in a few words.
func (b Break) bankSide() string {
	switch len(b.BankPayments) {
	case 0:
		return "no payment"
	case 1:
		p := b.BankPayments[0]
		return fmt.Sprintf("%s %d %s (%s)", p.Status, p.AmountCents, p.Currency, p.ID)
	}
	settled := 0
	for _, p := range b.BankPayments {
		if p.Status == string(bankclient.StatusSettled) {
			settled++
		}
	}
	return fmt.Sprintf("%d payments, %d settled", len(b.BankPayments), settled)
}

// explain says in words why b is listed.
func (b Break) explain() string {
	switch b.Class {
	case ClassMissingInLedger:
		if b.State == "" {
			return "the bank paid (" + b.bankSide() + ") an id we have no settlement for"
		}
		return "the bank settled it (" + b.bankSide() + ") but the ledger has no movement"
	case ClassMissingAtBank:
		return "the ledger has a movement but the bank has no settled payment (bank: " + b.bankSide() + ")"
	case ClassAmountMismatch:
		mv := "none"
		if b.Movement != nil {
			mv = fmt.Sprintf("%d %s", b.Movement.AmountCents, b.Movement.Currency)
		}
		return fmt.Sprintf("settlement %d %s, movement %s, bank %s", b.AmountCents, b.Currency, mv, b.bankSide())
	case ClassStatusMismatch:
		switch {
		case b.Movement != nil && b.State != "confirmed":
			return "a ledger movement exists but the settlement is " + b.State
		case b.State == "confirmed":
			return "we say confirmed without a movement, the bank says " + b.bankSide()
		}
		return "we say " + b.State + ", the bank says " + b.bankSide()
	case ClassDuplicateAtBank:
		return "the bank holds " + b.bankSide() + " for one settlement"
	case ClassUnresolved:
		s := b.State + ", bank: " + b.bankSide()
		if b.NeedsInvestigation {
			s += "; needs investigation: " + b.InvestigationReason
		}
		return s
	}
	return string(b.Class)
}

var (
	_ BankSink      = (*BankReport)(nil)
	_ StatementSink = (*BankReport)(nil)
)
