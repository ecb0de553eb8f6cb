package importer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/statement"
)

// ErrSchemaNotCurrent: the database lacks the statement tables (migration
// 0005): run settle migrate.
var ErrSchemaNotCurrent = errors.New("the database schema is not current (run settle migrate)")

// ErrNoStatementAccount: an importer was given no account its statements
// may be for (StatementImporter.Accounts, `--statement-account`).
var ErrNoStatementAccount = errors.New("no statement account declared: a statement cannot be checked against the accounts settle pays from")

// ErrUndeclaredAccount: a statement of the file is for an account that is
// not one of StatementImporter.Accounts, or names none. Errors matching it
// are *AccountError.
var ErrUndeclaredAccount = errors.New("not a declared statement account")

// AccountError is a file refused because one of its statements is for an
// account the operator did not declare: nothing of the file is stored.
type AccountError struct {
	File string
	// Statement is the statement's place in the file, from 1.
	Statement int
	// Account is the account as the statement names it ("" for none).
	Account string
	// Declared are the accounts the importer accepts.
	Declared []string
}

// Error reads "file: statement N: account "X" is not a declared statement
// account (declared: …): nothing of the file is stored".
func (e *AccountError) Error() string {
	what := fmt.Sprintf("account %q is %s", e.Account, ErrUndeclaredAccount)
	if e.Account == "" {
		what = "names no account, so it cannot be one of the declared statement accounts"
	}
	return fmt.Sprintf("%s: statement %d: %s (declared: %s): nothing of the file is stored",
		e.File, e.Statement, what, strings.Join(e.Declared, ", "))
}

// Is makes errors.Is(err, ErrUndeclaredAccount) hold.
func (e *AccountError) Is(target error) bool { return target == ErrUndeclaredAccount } //nolint:errorlint // our own sentinel

// Defaults of StatementImporter.
const (
	DefaultMaxListed  = 1000
	importCopyBatch   = 1000
	importStageTable  = "settle_import_lines"
	importStmtTable   = "settle_import_statements"
	importSessionWait = "15min"
)

// StatementImporter stores bank statement files (DESIGN section 14) in
// bank_statement_files, bank_statements and bank_statement_entries, each
// file exactly once, and matches their lines to settlements.
//
// # Exactly once
//
// A file is keyed by the sha256 of its bytes. Its import is one
// transaction that first inserts the file's row ON CONFLICT (digest) DO
// NOTHING: a second import of the same bytes, later or at the same time,
// finds the row (waiting for the first transaction to commit or roll back
// if it has to) and stores nothing. The statements and their lines are
// written in the same transaction, so a crash or a refusal in the middle
// leaves nothing of the file.
//
// # Matching
//
// A line matches a settlement when its end-to-end reference is the
// reference settle sent the bank for it (referenceMatchSQL, the one place
// that says what that is), through batches: each transaction detail of a
// batch entry is matched on its own. A line with no such reference may get
// a suggestion (a settlement with its amount, currency and a close date;
// one whose beneficiary is the line's counterparty first), which is shown
// and never counted as a match. Returns and reversals of matched payouts
// are listed and, with Returns set, handed to the return flow (DESIGN
// section 15) once the import committed.
//
// # Accounts
//
// Every statement of the file must be for one of Accounts, the accounts
// the operator declared (compared without spaces and case, as IBANs are
// written both ways); a statement for another account, or naming none,
// refuses the whole file with an *AccountError and nothing is stored. With
// no account declared nothing is imported (ErrNoStatementAccount): a file
// of somebody else's account must never book anything.
//
// # What books what
//
// A matched debit that is neither a reversal nor marked as a return pays
// its settlement (DecidePaid); a matched credit is a return only when it
// carries return information (camt RtrInf or RvslInd, the MT940 /RTRN/ or
// RD, the BAI2 return item types) (DecideReturn). Amount and currency
// must both be the settlement's; a line whose amount is unknown or zero,
// or in another currency or for another amount, is flagged on its
// settlement, never booked. A statement never fails a settlement. Lines
// not booked are listed with why (ImportResult.NotBookedEntries), and one
// that cannot be booked never keeps the others from being booked.
//
// # Memory stays flat
//
// The file is read once, by statement.Decoder, a stream, and hashed as it
// is read (the digest is that of the bytes parsed); lines are copied to a
// temporary table in batches and matched by one INSERT … SELECT, so the
// process holds one batch at a time.
type StatementImporter struct {
	// DB is the database (required).
	DB *pgxpool.Pool
	// Accounts are the accounts the statements may be for (required; see
	// Accounts above).
	Accounts []string
	// MaxListed bounds each list of an ImportResult. Default
	// DefaultMaxListed; `settle reconcile bank --statements` lists all.
	MaxListed int
	// Progress, when set, is called with the number of entries read so
	// far, every few thousand entries.
	Progress func(entries int64)
	// Log receives one event per file. Default: discard.
	Log *slog.Logger
	// Returns, when set, books what the file reports once the import
	// committed: the payments of settlements whose outcome settle did not
	// know (its matched debit lines) through reconcile.Resolver.ApplyPaid, then the
	// returns (its matched lines bringing a payout back) through
	// reconcile.Resolver.ApplyReturn: the return flow of DESIGN.md section 15. A file
	// imported again books them again, which changes nothing already
	// booked, so a crash between the import and its returns is repaired by
	// importing the file once more.
	Returns *reconcile.Resolver
	// CreditPrefix, when set, makes a statement credit name a ledger
	// account: a credit matched to no settlement, carrying no return
	// information, whose reference is CreditPrefix followed by an account
	// id brings its amount into that account (settle ledger balance),
	// once, when the import committed (see credit). Empty: statements
	// credit nothing.
	CreditPrefix string
}

// ImportResult is what importing one file did or, when the same bytes had
// been imported before, what that earlier import did.
type ImportResult struct {
	File   string           `json:"file"`
	Digest string           `json:"digest"`
	Format statement.Format `json:"format"`
	// Imported is false when the same bytes were imported before: nothing
	// changed, and the figures are those of the earlier import, done at
	// ImportedAt under the name ImportedAs.
	Imported   bool      `json:"imported"`
	ImportedAs string    `json:"imported_as"`
	ImportedAt time.Time `json:"imported_at"`
	Statements int       `json:"statements"`
	Entries    int64     `json:"entries"`
	// Lines counts transaction details (an entry without details is one
	// line); Matched those matched to a settlement by their reference,
	// Suggested those with a suggestion only, Credited those that brought
	// money into a ledger account (Credits), Unmatched every other line
	// without a match (the suggested ones included).
	Lines     int64 `json:"lines"`
	Matched   int64 `json:"matched"`
	Suggested int64 `json:"suggested"`
	Credited  int64 `json:"credited"`
	Unmatched int64 `json:"unmatched"`
	// Returns counts the matched credits that bring a payout back (they
	// carry return information: returns and reversals); Unbalanced the
	// statements that do not balance.
	Returns    int64 `json:"returns"`
	Unbalanced int   `json:"unbalanced"`
	// NotBooked counts the matched lines that book nothing on their
	// settlement because of what they say (no amount, a zero amount,
	// another currency or amount than the settlement's, a credit without
	// return information, a debit marked as a return); each has its
	// Problem. Those that would have moved their settlement flag it
	// statement_amount_mismatch (or partial_return) instead.
	NotBooked int64 `json:"not_booked"`
	// The lines and statements behind the counts, at most MaxListed each,
	// in file order.
	UnmatchedEntries []inspect.StatementLine `json:"unmatched_entries"`
	Returned         []inspect.StatementLine `json:"returned"`
	BalanceBreaks    []inspect.BalanceBreak  `json:"balance_breaks"`
	NotBookedEntries []inspect.StatementLine `json:"not_booked_entries"`
	// Credits are the lines that brought money into a ledger account
	// (CreditPrefix), each once however often the file is imported, and
	// those that name one and could not.
	Credits []LedgerCredit `json:"credits,omitempty"`
}

// Findings reports whether the file holds something an operator must look
// at: lines no settlement explains, returns, statements that do not
// balance, lines not booked.
func (r ImportResult) Findings() bool {
	return r.Unmatched > 0 || r.Returns > 0 || r.Unbalanced > 0 || r.NotBooked > 0
}

// Digest returns the file digest of r's bytes as stored:
// "sha256:" and the hex of their SHA-256, and how many bytes were read.
func Digest(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

// ImportFile imports the file at path (see Import).
func (im *StatementImporter) ImportFile(ctx context.Context, path string) (ImportResult, error) {
	f, err := openFile(path)
	if err != nil {
		return ImportResult{}, err
	}
	defer f.Close()
	return im.Import(ctx, path, f)
}

// openFile opens the file the operator named.
func openFile(path string) (*os.File, error) {
	return os.Open(path) //nolint:gosec // the operator names the file to import
}

// Import stores the statement file r (name names it in the result and in
// errors) in one transaction, unless the same bytes were imported before.
// r is read once, from where it stands to its end, and hashed as it is
// parsed. A file that is not a statement, or is malformed, is refused with
// the parser's *statement.Error, and one with a statement for an account
// not declared with an *AccountError; nothing is stored.
func (im *StatementImporter) Import(ctx context.Context, name string, r io.Reader) (ImportResult, error) {
	if len(im.Accounts) == 0 {
		return ImportResult{}, fmt.Errorf("error importing %s: %w", name, ErrNoStatementAccount)
	}
	src := &hashingReader{r: r, h: sha256.New()}
	// The format is detected, and a file that is no statement refused,
	// before the database is touched.
	dec, err := statement.NewDecoder(name, src)
	if err != nil {
		return ImportResult{}, err
	}
	var (
		res    ImportResult
		digest string
		fileID int64
	)
	err = pgx.BeginFunc(ctx, im.DB, func(tx pgx.Tx) error {
		for _, sql := range []string{
			// A second import of the same file waits for the first to end.
			"SET LOCAL lock_timeout = '" + importSessionWait + "'",
			"SET LOCAL statement_timeout = '" + importSessionWait + "'",
			"SET LOCAL idle_in_transaction_session_timeout = '" + importSessionWait + "'",
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("error preparing the import: %w", err)
			}
		}
		h, err := im.stage(ctx, tx, name, dec)
		if err != nil {
			return err
		}
		// What the parser left unread (nothing, for a well-formed file)
		// is part of the file's bytes all the same.
		if _, err := io.Copy(io.Discard, src); err != nil {
			return fmt.Errorf("error reading %s: %w", name, err)
		}
		digest = src.digest()
		err = tx.QueryRow(ctx, `INSERT INTO bank_statement_files (digest, file_name, format, size_bytes)
			VALUES ($1, $2, $3, $4) ON CONFLICT (digest) DO NOTHING RETURNING id`,
			digest, clean(name), string(dec.Format()), src.n).Scan(&fileID)
		if errors.Is(err, pgx.ErrNoRows) {
			// Imported before (or just now by another process): report
			// that import, change nothing.
			if err := tx.QueryRow(ctx, "SELECT id FROM bank_statement_files WHERE digest = $1", digest).Scan(&fileID); err != nil {
				return fmt.Errorf("error reading the earlier import of %s: %w", name, err)
			}
			res, err = im.result(ctx, tx, fileID)
			res.File = name
			return err
		}
		if err != nil {
			return fmt.Errorf("error recording %s: %w", name, err)
		}
		if err := im.store(ctx, tx, fileID, digest, dec.Format(), h); err != nil {
			return err
		}
		if res, err = im.result(ctx, tx, fileID); err != nil {
			return err
		}
		res.File, res.Imported = name, true
		crash.Point(crash.StatementBeforeCommit)
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable {
		return ImportResult{}, fmt.Errorf("%w: %w", ErrSchemaNotCurrent, err)
	}
	if err != nil {
		return ImportResult{}, err
	}
	if res.Imported {
		crash.Point(crash.StatementAfterCommit)
	}
	if im.Returns != nil {
		if err := im.book(ctx, digest); err != nil {
			return res, err
		}
	}
	credits, err := im.credit(ctx, digest)
	if len(credits) > 0 {
		// The lines credited are no longer unmatched: count again.
		fresh, rerr := im.result(ctx, im.DB, fileID)
		if rerr != nil && err == nil {
			err = rerr
		}
		if rerr == nil {
			fresh.File, fresh.Imported = res.File, res.Imported
			res = fresh
		}
	}
	res.Credits = credits
	if err != nil {
		return res, err
	}
	im.log().Info("statement import", "file", name, "digest", digest, "format", res.Format, "imported", res.Imported,
		"statements", res.Statements, "entries", res.Entries, "matched", res.Matched, "unmatched", res.Unmatched,
		"returns", res.Returns, "not_booked", res.NotBooked, "unbalanced", res.Unbalanced)
	return res, nil
}

// hashingReader hashes and counts what is read through it.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (r *hashingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	r.n += int64(n)
	return n, err
}

// digest is the file digest of what was read: "sha256:" and its hex.
func (r *hashingReader) digest() string { return "sha256:" + hex.EncodeToString(r.h.Sum(nil)) }

// accountKey is an account as compared with the declared ones: without
// spaces, in upper case (an IBAN is written in groups of four or not, in
// either case).
func accountKey(s string) string {
	return strings.ToUpper(strings.Join(strings.Fields(s), ""))
}

// checkAccount refuses statement seq of file name unless its account is
// one of the declared ones.
func (im *StatementImporter) checkAccount(name string, seq int, account string) error {
	if k := accountKey(account); k != "" {
		for _, a := range im.Accounts {
			if accountKey(a) == k {
				return nil
			}
		}
	}
	return &AccountError{File: name, Statement: seq, Account: account, Declared: im.Accounts}
}

// bookLine is a line of the file matched to a settlement, to book.
type bookLine struct {
	id        string
	direction string
	facts     reconcile.LineFacts
}

// book hands the matched lines of the file with digest to the resolver
// (bookLines).
func (im *StatementImporter) book(ctx context.Context, digest string) error {
	return bookLines(ctx, im.DB, im.Returns, im.log(), "f.digest = $1", digest)
}

// bookLines hands the matched lines in scope (a condition on e, the line,
// and f, its file, with one parameter, arg) to res, payments first, then
// returns: every debit that may pay a settlement whose outcome settle does
// not know (sent, uncertain, or pending after an attempt) to
// reconcile.Resolver.ApplyPaid, the statement being the bank's word that it executed
// the payment; every credit to reconcile.Resolver.ApplyReturn, which books it only
// when it is a return of the settlement's amount and currency. A line that
// cannot be booked never stops the others: the errors are returned
// together at the end.
func bookLines(ctx context.Context, db *pgxpool.Pool, res *reconcile.Resolver, log *slog.Logger, scope string, arg any) error {
	rows, err := db.Query(ctx, `SELECT e.settlement_id, e.direction, e.amount_minor, e.currency, e.reversal,
		coalesce(e.return_reason, ''), coalesce(e.entry_ref, ''), st.seq, e.position, e.tx_index
		FROM bank_statement_entries e JOIN bank_statements st ON st.id = e.statement_id
		JOIN bank_statement_files f ON f.id = st.file_id
		JOIN settlements s ON s.settlement_id = e.settlement_id
		WHERE (`+scope+`)
		  AND (e.direction = 'credit'
		       OR (NOT e.reversal AND (s.state IN ('sent', 'uncertain') OR (s.state = 'pending' AND s.first_attempt_at IS NOT NULL))))
		ORDER BY e.direction = 'credit', f.id, st.seq, e.position, e.tx_index`, arg)
	if err != nil {
		return fmt.Errorf("error reading the matched lines of the statement: %w", err)
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (bookLine, error) {
		var (
			l             bookLine
			ref           string
			seq, pos, idx int
		)
		err := row.Scan(&l.id, &l.direction, &l.facts.AmountMinor, &l.facts.Currency, &l.facts.Reversal,
			&l.facts.ReturnReason, &ref, &seq, &pos, &idx)
		l.facts.Line = fmt.Sprintf("%d.%d", seq, pos)
		if idx > 1 {
			l.facts.Line += fmt.Sprintf(" (detail %d)", idx)
		}
		if ref != "" {
			l.facts.Line += " " + ref
		}
		return l, err
	})
	if err != nil {
		return fmt.Errorf("error reading the matched lines of the statement: %w", err)
	}
	var errs []error
	for _, l := range lines {
		var (
			out reconcile.Outcome
			err error
		)
		if l.direction == "credit" {
			out, err = res.ApplyReturn(ctx, l.id, "statement", l.facts)
		} else {
			out, err = res.ApplyPaid(ctx, l.id, "statement", l.facts)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("error booking line %s of settlement %s: %w", l.facts.Line, l.id, err))
			continue
		}
		if out.State != out.From || out.FlagReason != "" {
			log.Info("statement: line booked", "settlement_id", l.id, "line", l.facts.Line, "direction", l.direction,
				"from", out.From, "to", out.State, "needs_investigation", out.FlagReason)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("error booking %d of the %d matched lines of the statement (the others are booked): %w",
			len(errs), len(lines), errors.Join(errs...))
	}
	return nil
}

func (im *StatementImporter) log() *slog.Logger {
	if im.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return im.Log
}

// stage decodes the file into temporary tables (its statements, its
// lines), refusing a statement for an account not declared. Nothing is
// written to the statement tables yet: the file's digest is known only
// once it has been read.
func (im *StatementImporter) stage(ctx context.Context, tx pgx.Tx, name string, dec *statement.Decoder) (*importHandler, error) {
	for _, sql := range []string{`CREATE TEMP TABLE ` + importStageTable + ` (
		stmt_seq integer NOT NULL, position integer NOT NULL, tx_index integer NOT NULL, tx_count integer NOT NULL,
		entry_ref text, entry_amount_minor bigint NOT NULL, amount_minor bigint, currency text NOT NULL,
		direction text NOT NULL, booked_on date, value_on date, end_to_end_id text, reversal boolean NOT NULL,
		return_reason text, counterparty text, counterparty_account text) ON COMMIT DROP`,
		`CREATE TEMP TABLE ` + importStmtTable + ` (seq integer NOT NULL, account text, currency text,
		opening_minor bigint, closing_minor bigint, balanced boolean, entries integer NOT NULL) ON COMMIT DROP`,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("error preparing the import: %w", err)
		}
	}
	h := &importHandler{ctx: ctx, tx: tx, im: im, name: name}
	if err := dec.Decode(h); err != nil {
		return nil, err
	}
	if err := h.flush(); err != nil {
		return nil, err
	}
	return h, nil
}

// store moves the staged file into the statement tables under fileID: its
// statements, then its lines, matched, and the suggestions.
func (im *StatementImporter) store(ctx context.Context, tx pgx.Tx, fileID int64, digest string, format statement.Format, h *importHandler) error {
	if _, err := tx.Exec(ctx, `INSERT INTO bank_statements (file_id, seq, digest, format, account, currency,
		opening_minor, closing_minor, balanced, entries)
		SELECT $1, seq, $2 || '/' || seq, $3, account, currency, opening_minor, closing_minor, balanced, entries
		FROM `+importStmtTable+` ORDER BY seq`, fileID, digest, string(format)); err != nil {
		return fmt.Errorf("error storing the statements: %w", err)
	}
	if _, err := tx.Exec(ctx, insertLinesSQL, fileID); err != nil {
		return fmt.Errorf("error storing the entries: %w", err)
	}
	if _, err := tx.Exec(ctx, suggestSQL("st.file_id = $1"), fileID); err != nil {
		return fmt.Errorf("error looking for suggestions: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE bank_statement_files SET statements = $2, entries = $3 WHERE id = $1`,
		fileID, h.seq, h.entries); err != nil {
		return fmt.Errorf("error recording the import: %w", err)
	}
	return nil
}

// insertLinesSQL moves the staged lines into bank_statement_entries and
// matches each to a settlement in the same statement.
//
// The join ON coalesce(s.bank_reference, s.settlement_id) = l.end_to_end_id
// is the one place that says which settlement a statement line belongs to:
// the reference settle sent the bank (settlements.bank_reference, stored at
// intake; the settlement id for settlements received before it existed),
// indexed as that expression.
const insertLinesSQL = `
	INSERT INTO bank_statement_entries (statement_id, position, tx_index, tx_count, entry_ref, entry_amount_minor,
		amount_minor, currency, direction, booked_on, value_on, end_to_end_id, reversal, return_reason,
		counterparty, counterparty_account, settlement_id, match)
	SELECT st.id, l.position, l.tx_index, l.tx_count, l.entry_ref, l.entry_amount_minor,
	       l.amount_minor, l.currency, l.direction, l.booked_on, l.value_on, l.end_to_end_id, l.reversal, l.return_reason,
	       l.counterparty, l.counterparty_account, s.settlement_id, CASE WHEN s.settlement_id IS NULL THEN 'none' ELSE 'reference' END
	FROM ` + importStageTable + ` l
	JOIN bank_statements st ON st.file_id = $1 AND st.seq = l.stmt_seq
	LEFT JOIN settlements s ON coalesce(s.bank_reference, s.settlement_id) = l.end_to_end_id
	ORDER BY l.stmt_seq, l.position, l.tx_index`

// suggestSQL proposes, for each line in scope without a reference match
// (scope is a condition on e, the line, and st, its statement, with one
// parameter), the settlement it most likely is: a debit (not a reversal)
// for a settlement that may have been paid (sent, uncertain, confirmed,
// returned), booked within 10 days of the settlement's creation; a credit
// for a paid one (confirmed, returned), within 90 days (returns come
// weeks later); same amount and currency; a settlement that already has a
// line of that direction matched by reference is no candidate. A
// candidate whose beneficiary is the line's counterparty (the name the
// bank reports, compared without case, or its account, compared without
// spaces and case) comes first, then the closest date, then the smallest
// id.
func suggestSQL(scope string) string {
	return `
	WITH cand AS (
		SELECT DISTINCT ON (e.id) e.id, s.settlement_id, count(*) OVER (PARTITION BY e.id) AS n,
		       coalesce(lower(btrim(e.counterparty)) = lower(btrim(s.beneficiary)), false)
		       OR coalesce(upper(e.counterparty_account) = upper(replace(s.beneficiary, ' ', '')), false) AS same_party
		FROM bank_statement_entries e
		JOIN bank_statements st ON st.id = e.statement_id
		JOIN settlements s ON s.amount_cents = e.amount_minor AND s.currency = e.currency
		WHERE (` + scope + `) AND e.match = 'none'
		  AND ((e.direction = 'debit' AND NOT e.reversal AND s.state IN ('sent', 'uncertain', 'confirmed', 'returned')
		        AND (e.booked_on IS NULL OR e.booked_on BETWEEN (s.created_at AT TIME ZONE 'UTC')::date - 1
		                                                    AND (s.created_at AT TIME ZONE 'UTC')::date + 10))
		    OR (e.direction = 'credit' AND s.state IN ('confirmed', 'returned')
		        AND (e.booked_on IS NULL OR e.booked_on BETWEEN (s.created_at AT TIME ZONE 'UTC')::date - 1
		                                                    AND (s.created_at AT TIME ZONE 'UTC')::date + 90)))
		  AND NOT EXISTS (SELECT 1 FROM bank_statement_entries m
		                  WHERE m.settlement_id = s.settlement_id AND m.direction = e.direction)
		ORDER BY e.id, 4 DESC, abs(coalesce(e.booked_on - (s.created_at AT TIME ZONE 'UTC')::date, 0)), s.settlement_id
	)
	UPDATE bank_statement_entries e
	SET match = 'suggested', suggested_settlement_id = cand.settlement_id,
	    suggestion = CASE WHEN cand.n = 1 THEN 'the only settlement with this amount and currency around this date'
	                      ELSE 'one of ' || cand.n || ' settlements with this amount and currency around this date' END
	                 || CASE WHEN cand.same_party THEN ', and its beneficiary is the counterparty' ELSE '' END
	FROM cand WHERE e.id = cand.id`
}

// importHandler receives the decoded file and stages its lines.
type importHandler struct {
	ctx     context.Context
	tx      pgx.Tx
	im      *StatementImporter
	name    string
	checked bool // the current statement's account was checked
	seq     int  // statements ended so far
	pos     int  // entries of the current statement so far
	entries int64
	rows    [][]any
}

var stageColumns = []string{"stmt_seq", "position", "tx_index", "tx_count", "entry_ref", "entry_amount_minor",
	"amount_minor", "currency", "direction", "booked_on", "value_on", "end_to_end_id", "reversal", "return_reason",
	"counterparty", "counterparty_account"}

func (h *importHandler) Entry(st *statement.Statement, e statement.Entry) error {
	if !h.checked {
		// The account comes before the entries in every format: a file
		// of another account is refused at its first entry.
		if err := h.im.checkAccount(h.name, h.seq+1, st.Account); err != nil {
			return err
		}
		h.checked = true
	}
	h.pos++
	h.entries++
	booked, err := date(e.BookedOn)
	if err != nil {
		return err
	}
	value, err := date(e.ValueOn)
	if err != nil {
		return err
	}
	row := func(i, n int, amount *int64, t statement.Transaction) []any {
		return []any{h.seq + 1, h.pos, i, n, nullText(e.EntryRef), e.AmountMinor, amount, e.Currency,
			string(e.Direction), booked, value, nullText(t.Reference), e.Reversal, nullText(t.ReturnReason),
			nullText(t.Counterparty), nullText(t.CounterpartyAccount)}
	}
	if len(e.Transactions) == 0 {
		amount := e.AmountMinor
		h.rows = append(h.rows, row(1, 0, &amount, statement.Transaction{ReturnReason: e.ReturnReason}))
	}
	for i, t := range e.Transactions {
		h.rows = append(h.rows, row(i+1, len(e.Transactions), t.AmountMinor, t))
	}
	if len(h.rows) >= importCopyBatch {
		if err := h.flush(); err != nil {
			return err
		}
	}
	if h.im.Progress != nil && h.entries%4096 == 0 {
		h.im.Progress(h.entries)
	}
	return nil
}

func (h *importHandler) EndStatement(st *statement.Statement) error {
	h.seq++
	if err := h.im.checkAccount(h.name, h.seq, st.Account); err != nil {
		return err
	}
	_, err := h.tx.Exec(h.ctx, `INSERT INTO `+importStmtTable+` (seq, account, currency, opening_minor, closing_minor,
		balanced, entries) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		h.seq, nullText(st.Account), nullText(st.Currency), st.OpeningMinor, st.ClosingMinor, st.Balanced, h.pos)
	if err != nil {
		return fmt.Errorf("error storing statement %d: %w", h.seq, err)
	}
	h.pos, h.checked = 0, false
	return nil
}

func (h *importHandler) flush() error {
	if len(h.rows) == 0 {
		return nil
	}
	if _, err := h.tx.CopyFrom(h.ctx, pgx.Identifier{importStageTable}, stageColumns, pgx.CopyFromRows(h.rows)); err != nil {
		return fmt.Errorf("error storing the entries: %w", err)
	}
	h.rows = h.rows[:0]
	return nil
}

// date turns the parser's YYYY-MM-DD (already checked) into a SQL date.
func date(s string) (pgtype.Date, error) {
	if s == "" {
		return pgtype.Date{}, nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return pgtype.Date{}, fmt.Errorf("error reading date %q: %w", s, err)
	}
	return pgtype.Date{Time: t, Valid: true}, nil
}

// clean makes s storable as PostgreSQL text: no NUL bytes, valid UTF-8
// (a line-format file may carry bytes of another encoding; such a
// reference cannot be a settlement id, which is always valid UTF-8).
func clean(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// nullText is s cleaned, or SQL NULL when s is empty.
func nullText(s string) *string {
	if s == "" {
		return nil
	}
	c := clean(s)
	return &c
}

// result reads what the import of file id stored.
func (im *StatementImporter) result(ctx context.Context, q inspect.DB, id int64) (ImportResult, error) {
	limit := im.MaxListed
	if limit <= 0 {
		limit = DefaultMaxListed
	}
	res := ImportResult{UnmatchedEntries: []inspect.StatementLine{}, Returned: []inspect.StatementLine{}, BalanceBreaks: []inspect.BalanceBreak{},
		NotBookedEntries: []inspect.StatementLine{}}
	var format string
	err := q.QueryRow(ctx, `SELECT digest, file_name, format, imported_at, statements, entries,
		(SELECT count(*) FROM bank_statements st WHERE st.file_id = f.id AND st.balanced = false)
		FROM bank_statement_files f WHERE id = $1`, id).
		Scan(&res.Digest, &res.ImportedAs, &format, &res.ImportedAt, &res.Statements, &res.Entries, &res.Unbalanced)
	if err != nil {
		return res, fmt.Errorf("error reading the import: %w", err)
	}
	res.Format = statement.Format(format)
	err = q.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE e.match = 'reference'),
		count(*) FILTER (WHERE e.match = 'suggested'),
		count(*) FILTER (WHERE e.match <> 'reference' AND `+inspect.LineCreditedSQL+`),
		count(*) FILTER (WHERE e.match <> 'reference' AND NOT `+inspect.LineCreditedSQL+`),
		count(*) FILTER (WHERE e.match = 'reference' AND `+inspect.LineIsReturnSQL+`),
		count(*) FILTER (WHERE e.match = 'reference' AND (`+inspect.LineProblemSQL+`) IS NOT NULL)
		FROM bank_statement_entries e JOIN bank_statements st ON st.id = e.statement_id
		LEFT JOIN settlements s ON s.settlement_id = e.settlement_id WHERE st.file_id = $1`, id).
		Scan(&res.Lines, &res.Matched, &res.Suggested, &res.Credited, &res.Unmatched, &res.Returns, &res.NotBooked)
	if err != nil {
		return res, fmt.Errorf("error counting the import's lines: %w", err)
	}
	from := ` FROM bank_statement_entries e JOIN bank_statements st ON st.id = e.statement_id
		JOIN bank_statement_files f ON f.id = st.file_id WHERE st.file_id = $1 AND `
	order := ` ORDER BY st.seq, e.position, e.tx_index LIMIT $2`
	for _, list := range []struct {
		where string
		to    *[]inspect.StatementLine
		what  string
	}{
		{"e.settlement_id IS NULL AND NOT " + inspect.LineCreditedSQL, &res.UnmatchedEntries, "unmatched lines"},
		{"e.settlement_id IS NOT NULL AND " + inspect.LineIsReturnSQL, &res.Returned, "returns"},
		{"e.settlement_id IS NOT NULL AND EXISTS (SELECT 1 FROM settlements s WHERE s.settlement_id = e.settlement_id AND (" +
			inspect.LineProblemSQL + ") IS NOT NULL)", &res.NotBookedEntries, "lines not booked"},
	} {
		err = inspect.EachLine(ctx, q, inspect.LineSelect+from+list.where+order, []any{id, limit}, func(l inspect.StatementLine) error {
			*list.to = append(*list.to, l)
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("error listing %s: %w", list.what, err)
		}
	}
	err = inspect.EachBalanceBreak(ctx, q, inspect.BalanceBreakSelect+" AND st.file_id = $1 ORDER BY st.seq LIMIT $2", []any{id, limit},
		func(b inspect.BalanceBreak) error {
			res.BalanceBreaks = append(res.BalanceBreaks, b)
			return nil
		})
	return res, err
}
