package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/settlement"
)

// Inspector answers the operator's questions from the database alone: the
// summary (this file), the settlements in one state, the whole story of one
// settlement and the recorded conflicts (inspect.go). Every read runs in a
// READ ONLY transaction that takes no lock beyond the ACCESS SHARE of a plain
// SELECT, so it never blocks the worker.
type Inspector struct {
	// DB is the database (required).
	DB *pgxpool.Pool
	// Now is the clock ages are measured against. Default time.Now.
	Now func() time.Time
}

func (i *Inspector) now() time.Time {
	if i.Now != nil {
		return i.Now()
	}
	return time.Now()
}

// readTx runs fn in a REPEATABLE READ, READ ONLY transaction: one consistent
// snapshot, no writes, no row locks.
func (i *Inspector) readTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return ReadTx(ctx, i.DB, fn)
}

// ReadTx runs fn in a REPEATABLE READ, READ ONLY transaction of db (see
// Inspector.readTx).
func ReadTx(ctx context.Context, db *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// Summary is the answer of `settle reconcile`: how many settlements are in
// each state, what is stuck and since when, and the bookkeeping counters.
// Its JSON is the contract of DESIGN.md section 8 plus extra fields.
type Summary struct {
	// ByState counts the settlements in each of the five states; every state
	// is present, 0 included.
	ByState map[settlement.State]int64 `json:"by_state"`
	// Receipts counts the stored receipts (retention removes old ones).
	Receipts int64 `json:"receipts"`
	// Replays is the sum of replay_count over the receipts: redeliveries
	// answered with the stored outcome.
	Replays int64 `json:"replays"`
	// Conflicts counts the recorded receipt conflicts.
	Conflicts int64 `json:"conflicts"`
	// Movements counts the ledger movements.
	Movements int64 `json:"movements"`
	// OldestUncertainAgeSeconds is how long the oldest uncertain settlement
	// has been uncertain (since it last entered the state); 0 when none is.
	OldestUncertainAgeSeconds float64 `json:"oldest_uncertain_age_seconds"`
	// OldestUncertainID is that settlement ("" when none).
	OldestUncertainID string `json:"oldest_uncertain_id,omitempty"`
	// OldestOpenAgeSeconds is, for each non-terminal state holding at least
	// one settlement, how long the oldest has been in it.
	OldestOpenAgeSeconds map[settlement.State]float64 `json:"oldest_open_age_seconds"`
	// NeedsInvestigation counts the settlements the engine will not resolve
	// on its own (DESIGN.md rule 9 and the mismatch flags).
	NeedsInvestigation int64 `json:"needs_investigation"`
	// AsOf is the clock reading the ages were measured at.
	AsOf time.Time `json:"as_of"`
	// Ledger is the ledger's check (DESIGN.md section 20).
	Ledger LedgerReport `json:"ledger"`
}

// Findings reports whether the summary shows something a human must look
// at: a settlement flagged needs_investigation, or a ledger that breaks its
// rules (LedgerMismatches). Conflicts do not count: they
// were rejected and recorded, which is the engine doing its job, and they
// stay in the table for ever; `settle reconcile conflicts` lists them.
func (s Summary) Findings() bool {
	return s.NeedsInvestigation > 0 || !s.Ledger.Balanced || len(s.Ledger.Mismatches) > 0
}

// enteredStateSQL is the time a settlement last entered its current state,
// from its history (updated_at also moves on every status check).
const enteredStateSQL = `(SELECT t.at FROM settlement_transitions t
	WHERE t.settlement_id = s.settlement_id AND t.to_state = s.state
	ORDER BY t.id DESC LIMIT 1)`

// Summary reads the summary in one snapshot.
func (i *Inspector) Summary(ctx context.Context) (Summary, error) {
	sum := Summary{
		ByState:              make(map[settlement.State]int64, len(settlement.States)),
		OldestOpenAgeSeconds: map[settlement.State]float64{},
		AsOf:                 i.now(),
	}
	for _, st := range settlement.States {
		sum.ByState[st] = 0
	}
	err := i.readTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT state, count(*), count(*) FILTER (WHERE needs_investigation)
			FROM settlements GROUP BY state`)
		if err != nil {
			return fmt.Errorf("error counting settlements: %w", err)
		}
		var st string
		var n, flagged int64
		_, err = pgx.ForEachRow(rows, []any{&st, &n, &flagged}, func() error {
			sum.ByState[settlement.State(st)] = n
			sum.NeedsInvestigation += flagged
			return nil
		})
		if err != nil {
			return fmt.Errorf("error counting settlements: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM settlement_receipts),
				(SELECT coalesce(sum(replay_count), 0)::bigint FROM settlement_receipts),
				(SELECT count(*) FROM receipt_conflicts),
				(SELECT count(*) FROM ledger_movements)`).
			Scan(&sum.Receipts, &sum.Replays, &sum.Conflicts, &sum.Movements); err != nil {
			return fmt.Errorf("error reading counters: %w", err)
		}
		// The oldest settlement of each open state, by the time it entered
		// the state. Open states are small in a healthy system; the state
		// index finds them.
		rows, err = tx.Query(ctx, `
			SELECT DISTINCT ON (state) state, settlement_id, since FROM (
				SELECT s.state, s.settlement_id, coalesce(`+enteredStateSQL+`, s.created_at) AS since
				FROM settlements s WHERE s.state IN ('pending', 'sent', 'uncertain')
			) o ORDER BY state, since, settlement_id`)
		if err != nil {
			return fmt.Errorf("error finding the oldest open settlements: %w", err)
		}
		var id string
		var since time.Time
		_, err = pgx.ForEachRow(rows, []any{&st, &id, &since}, func() error {
			age := max(sum.AsOf.Sub(since).Seconds(), 0)
			sum.OldestOpenAgeSeconds[settlement.State(st)] = age
			if settlement.State(st) == settlement.Uncertain {
				sum.OldestUncertainAgeSeconds, sum.OldestUncertainID = age, id
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("error finding the oldest open settlements: %w", err)
		}
		sum.Ledger, err = ledgerReport(ctx, tx)
		return err
	})
	if err != nil {
		return Summary{}, err
	}
	return sum, nil
}
