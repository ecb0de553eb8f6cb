package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/settlement"
)

// ExactCountLimit is how far Overview counts rows one by one. Past it a
// count is the planner's estimate from the table statistics (the operator's
// questions are about the small sets: what is open, flagged, returned; a
// million confirmed settlements need not be counted exactly on every page
// view, and `settle reconcile` counts them exactly).
const ExactCountLimit = 10_000

// bankWindow is how far back Overview looks at the bank's answers, and
// BankSample the most calls it looks at: the last calls, read backwards on
// the primary key, so the cost stays flat however busy the bank is.
const (
	bankWindow = 15 * time.Minute
	BankSample = 2_000
)

// Overview is the operator console's first page: where the settlements
// stand, what is stuck, and how the bank and the statements are doing. It is
// built to answer in milliseconds at millions of settlements: every part
// reads an index range or a bounded count.
type Overview struct {
	// AsOf is the clock reading ages are measured at.
	AsOf time.Time `json:"as_of"`
	// States holds one count per state, in settlement.States order.
	States []StateCount `json:"states"`
	// NeedsInvestigation counts the settlements flagged for a human.
	NeedsInvestigation Count `json:"needs_investigation"`
	// Conflicts counts the recorded receipt conflicts.
	Conflicts Count `json:"conflicts"`
	// Bank is the bank's recent answers.
	Bank BankHealth `json:"bank"`
	// Statements is the last statement imports; nil when this database has
	// no statement tables.
	Statements *StatementImports `json:"statements"`
}

// Count is a number of rows: exact up to ExactCountLimit, estimated past it.
type Count struct {
	N int64 `json:"n"`
	// Exact is false when N is an estimate. An estimate with no statistics
	// to go on is ExactCountLimit itself, with AtLeast set.
	Exact   bool `json:"exact"`
	AtLeast bool `json:"at_least,omitempty"`
}

// StateCount is the number of settlements in one state and, for an open
// state, its oldest settlement.
type StateCount struct {
	State settlement.State `json:"state"`
	Count
	// Oldest is the open settlement received first that is still in this
	// state; nil for terminal states and empty ones.
	Oldest *OldestOpen `json:"oldest,omitempty"`
}

// OldestOpen is the oldest settlement still open in a state. "Oldest" is by
// receipt, which an index answers at once; Since says how long it has been
// in the state.
type OldestOpen struct {
	SettlementID string    `json:"settlement_id"`
	CreatedAt    time.Time `json:"created_at"`
	Since        time.Time `json:"since"`
	// AgeSeconds is how long ago it was received; InStateSeconds how long
	// it has been in its state.
	AgeSeconds     float64 `json:"age_seconds"`
	InStateSeconds float64 `json:"in_state_seconds"`
}

// BankHealth is what the bank answered in the last Window: the calls of
// bank_attempts that started in it, at most the last BankSample of them.
type BankHealth struct {
	Window time.Duration `json:"window_ns"`
	// Sampled is true when the window held more than BankSample calls and
	// only the last BankSample were counted.
	Sampled bool `json:"sampled"`
	// Calls started in the window; Answered of them have an answer
	// recorded; Errors of those got no definitive answer (timeout, reset,
	// 5xx, 429) or a refusal of our credentials.
	Calls    int64 `json:"calls"`
	Answered int64 `json:"answered"`
	Errors   int64 `json:"errors"`
	// ErrorRate is Errors / Answered (0 with no answer).
	ErrorRate float64 `json:"error_rate"`
	// P95 is the 95th percentile of the answered calls' duration.
	P95 time.Duration `json:"p95_ns"`
	// LastError is the detail of the last error in the window, and when.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
}

// StatementImports is the last imported bank statements (DESIGN.md
// section 14) and their breaks.
type StatementImports struct {
	Recent []StatementImport `json:"recent"`
	// Unbalanced counts every statement whose opening balance plus entries
	// is not its closing balance; Unmatched every entry matched to no
	// settlement.
	Unbalanced Count `json:"unbalanced"`
	Unmatched  Count `json:"unmatched"`
}

// StatementImport is one imported statement.
type StatementImport struct {
	ID         string    `json:"id"`
	Format     string    `json:"format"`
	Account    string    `json:"account"`
	Currency   string    `json:"currency"`
	ImportedAt time.Time `json:"imported_at"`
	// Balanced is nil when the file carries no balances.
	Balanced *bool `json:"balanced"`
	// Entries, Unmatched (matched to no settlement) and Returns (returns
	// and reversals) count its lines.
	Entries   int64 `json:"entries"`
	Unmatched int64 `json:"unmatched"`
	Returns   int64 `json:"returns"`
}

// recentStatements is how many imports the overview shows.
const recentStatements = 5

// Overview reads the overview in one snapshot.
func (i *Inspector) Overview(ctx context.Context) (Overview, error) {
	ov := Overview{AsOf: i.now()}
	err := i.readTx(ctx, func(tx pgx.Tx) error {
		if err := ov.readStates(ctx, tx); err != nil {
			return err
		}
		var err error
		if ov.NeedsInvestigation, err = boundedCount(ctx, tx, "settlements WHERE needs_investigation", ""); err != nil {
			return err
		}
		if ov.Conflicts, err = boundedCount(ctx, tx, "receipt_conflicts", "receipt_conflicts"); err != nil {
			return err
		}
		if ov.Bank, err = bankHealth(ctx, tx, ov.AsOf); err != nil {
			return err
		}
		ov.Statements, err = statementImports(ctx, tx)
		return err
	})
	if err != nil {
		return Overview{}, fmt.Errorf("error reading the overview: %w", err)
	}
	return ov, nil
}

// readStates counts each state, up to ExactCountLimit, estimates the
// larger ones, and finds the oldest settlement of each open state.
func (ov *Overview) readStates(ctx context.Context, tx pgx.Tx) error {
	states := make([]string, len(settlement.States))
	for k, s := range settlement.States {
		states[k] = string(s)
	}
	rows, err := tx.Query(ctx, `
		SELECT st, (SELECT count(*) FROM (SELECT 1 FROM settlements s WHERE s.state = st LIMIT $2) x)
		FROM unnest($1::text[]) st`, states, ExactCountLimit+1)
	if err != nil {
		return fmt.Errorf("error counting settlements: %w", err)
	}
	counts := map[string]int64{}
	var st string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&st, &n}, func() error { counts[st] = n; return nil }); err != nil {
		return fmt.Errorf("error counting settlements: %w", err)
	}
	var est map[string]float64
	for _, s := range settlement.States {
		sc := StateCount{State: s, Count: Count{N: counts[string(s)], Exact: true}}
		if sc.N > ExactCountLimit {
			if est == nil {
				if est, err = stateEstimates(ctx, tx); err != nil {
					return err
				}
			}
			sc.Count = estimate(est[string(s)])
		}
		if !s.Terminal() && sc.N > 0 {
			o := &OldestOpen{}
			err := tx.QueryRow(ctx, `
				SELECT s.settlement_id, s.created_at, coalesce(`+enteredStateSQL+`, s.created_at)
				FROM settlements s WHERE s.state = $1 ORDER BY s.created_at, s.settlement_id LIMIT 1`, string(s)).
				Scan(&o.SettlementID, &o.CreatedAt, &o.Since)
			switch {
			case err == nil:
				o.AgeSeconds = max(ov.AsOf.Sub(o.CreatedAt).Seconds(), 0)
				o.InStateSeconds = max(ov.AsOf.Sub(o.Since).Seconds(), 0)
				sc.Oldest = o
			case !errors.Is(err, pgx.ErrNoRows):
				return fmt.Errorf("error finding the oldest %s settlement: %w", s, err)
			}
		}
		ov.States = append(ov.States, sc)
	}
	return nil
}

// estimate turns a planner estimate into a Count: at least
// ExactCountLimit, since it is used only past it.
func estimate(n float64) Count {
	if n <= ExactCountLimit {
		return Count{N: ExactCountLimit + 1, AtLeast: true}
	}
	return Count{N: int64(n)}
}

// stateEstimates returns the planner's estimate of the settlements in each
// state: the table's row estimate times each state's frequency in its
// statistics. States absent from the statistics are absent from the map.
func stateEstimates(ctx context.Context, tx pgx.Tx) (map[string]float64, error) {
	var (
		total float64
		vals  []string
		freqs []float64
	)
	err := tx.QueryRow(ctx, `
		SELECT greatest(c.reltuples, 0)::float8,
		       coalesce(s.most_common_vals::text::text[], '{}'), coalesce(s.most_common_freqs::float8[], '{}')
		FROM pg_class c
		LEFT JOIN pg_stats s ON s.schemaname = c.relnamespace::regnamespace::name
		     AND s.tablename = c.relname AND s.attname = 'state'
		WHERE c.oid = 'settlements'::regclass`).Scan(&total, &vals, &freqs)
	if err != nil {
		return nil, fmt.Errorf("error estimating settlement counts: %w", err)
	}
	out := map[string]float64{}
	for k, v := range vals {
		if k < len(freqs) {
			out[v] = total * freqs[k]
		}
	}
	return out, nil
}

// boundedCount counts the rows of from (a fixed table expression of this
// file, never input) up to ExactCountLimit. Past it, when from is a whole
// table named by whole, it returns the table's row estimate; otherwise
// "more than ExactCountLimit".
func boundedCount(ctx context.Context, tx pgx.Tx, from, whole string) (Count, error) {
	var n int64
	q := `SELECT count(*) FROM (SELECT 1 FROM ` + from + ` LIMIT $1) x`
	if err := tx.QueryRow(ctx, q, ExactCountLimit+1).Scan(&n); err != nil { //nolint:gosec // from is a constant of this file
		return Count{}, fmt.Errorf("error counting %s: %w", from, err)
	}
	if n <= ExactCountLimit {
		return Count{N: n, Exact: true}, nil
	}
	if whole == "" {
		return estimate(0), nil
	}
	var total float64
	if err := tx.QueryRow(ctx, `SELECT greatest(reltuples, 0)::float8 FROM pg_class WHERE oid = to_regclass($1)`, whole).Scan(&total); err != nil {
		return Count{}, fmt.Errorf("error estimating %s: %w", whole, err)
	}
	return estimate(total), nil
}

// bankHealth reads the calls of the last bankWindow, at most the last
// BankSample of them.
func bankHealth(ctx context.Context, tx pgx.Tx, now time.Time) (BankHealth, error) {
	h := BankHealth{Window: bankWindow}
	since := now.Add(-bankWindow)
	var (
		p95    *float64
		read   int64
		oldest *time.Time
	)
	err := tx.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE started_at >= $1),
		       count(*) FILTER (WHERE started_at >= $1 AND finished_at IS NOT NULL AND outcome <> 'not_sent'),
		       count(*) FILTER (WHERE started_at >= $1 AND outcome IN ('ambiguous', 'unauthorized')),
		       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))
		         FILTER (WHERE started_at >= $1 AND finished_at IS NOT NULL AND outcome <> 'not_sent'),
		       count(*), min(started_at)
		FROM (SELECT started_at, finished_at, outcome FROM bank_attempts ORDER BY id DESC LIMIT $2) a`,
		since, BankSample).Scan(&h.Calls, &h.Answered, &h.Errors, &p95, &read, &oldest)
	if err != nil {
		return BankHealth{}, fmt.Errorf("error reading the bank's recent answers: %w", err)
	}
	h.Sampled = read == BankSample && oldest != nil && !oldest.Before(since)
	if h.Answered > 0 {
		h.ErrorRate = float64(h.Errors) / float64(h.Answered)
	}
	if p95 != nil {
		h.P95 = time.Duration(*p95 * float64(time.Second)).Round(time.Millisecond)
	}
	if h.Errors > 0 {
		var at time.Time
		err := tx.QueryRow(ctx, `
			SELECT coalesce(detail, outcome || coalesce(', HTTP ' || http_status, '')), started_at
			FROM (SELECT * FROM bank_attempts ORDER BY id DESC LIMIT $2) a
			WHERE started_at >= $1 AND outcome IN ('ambiguous', 'unauthorized')
			ORDER BY id DESC LIMIT 1`, since, BankSample).Scan(&h.LastError, &at)
		if err != nil {
			return BankHealth{}, fmt.Errorf("error reading the bank's last error: %w", err)
		}
		h.LastErrorAt = &at
	}
	return h, nil
}

// statementImports reads the last imports, or returns nil when the
// statement tables (DESIGN.md section 4) are not in this database.
func statementImports(ctx context.Context, tx pgx.Tx) (*StatementImports, error) {
	var present bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('bank_statements') IS NOT NULL
		AND to_regclass('bank_statement_entries') IS NOT NULL`).Scan(&present); err != nil {
		return nil, fmt.Errorf("error looking for the statement tables: %w", err)
	}
	if !present {
		return nil, nil
	}
	si := &StatementImports{Recent: []StatementImport{}}
	rows, err := tx.Query(ctx, `
		SELECT b.id::text, b.format, coalesce(b.account, ''), coalesce(b.currency, ''), b.imported_at, b.balanced,
		       (SELECT count(*) FROM bank_statement_entries e WHERE e.statement_id = b.id),
		       (SELECT count(*) FROM bank_statement_entries e WHERE e.statement_id = b.id AND e.settlement_id IS NULL),
		       (SELECT count(*) FROM bank_statement_entries e WHERE e.statement_id = b.id AND (e.reversal OR e.return_reason IS NOT NULL))
		FROM bank_statements b ORDER BY b.imported_at DESC, b.id DESC LIMIT $1`, recentStatements)
	if err != nil {
		return nil, fmt.Errorf("error reading the statement imports: %w", err)
	}
	var s StatementImport
	_, err = pgx.ForEachRow(rows, []any{&s.ID, &s.Format, &s.Account, &s.Currency, &s.ImportedAt, &s.Balanced,
		&s.Entries, &s.Unmatched, &s.Returns}, func() error {
		si.Recent = append(si.Recent, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error reading the statement imports: %w", err)
	}
	if si.Unbalanced, err = boundedCount(ctx, tx, "bank_statements WHERE balanced = false", ""); err != nil {
		return nil, err
	}
	if si.Unmatched, err = boundedCount(ctx, tx, "bank_statement_entries WHERE settlement_id IS NULL", ""); err != nil {
		return nil, err
	}
	return si, nil
}
