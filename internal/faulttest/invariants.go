package faulttest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/bankclient"
)

// maxViolations caps the violations one check reports.
const maxViolations = 50

// CheckInvariants checks the exactly-once invariants and returns every
// violation found (empty when all hold):
//   - every acknowledged settlement exists, with the acknowledged amount;
//   - a confirmed settlement has exactly one ledger movement, of its amount,
//     currency and account; any other settlement has none;
//   - the bank paid no settlement twice (max_payments_per_reference <= 1);
//   - every payment the bank settled belongs to a confirmed settlement of
//     the same amount, and every payment it failed to a failed one.
//
// bank may be nil (no bank checks); acked may be nil.
func CheckInvariants(ctx context.Context, pool *pgxpool.Pool, bank *Bank, acked map[string]int64) ([]string, error) {
	var v []string
	add := func(format string, args ...any) {
		if len(v) < maxViolations {
			v = append(v, fmt.Sprintf(format, args...))
		}
	}
	type row struct {
		state  string
		amount int64
	}
	stored := make(map[string]row)
	rows, err := pool.Query(ctx, `
		SELECT s.settlement_id, s.state, s.amount_cents, coalesce(m.n, 0), coalesce(m.amount, 0),
		       coalesce(m.currency = s.currency AND m.account_id = s.account_id, true)
		FROM settlements s
		LEFT JOIN (SELECT settlement_id, count(*) n, sum(amount_cents) amount, min(currency) currency, min(account_id) account_id
		           FROM ledger_movements GROUP BY settlement_id) m USING (settlement_id)`)
	if err != nil {
		return nil, fmt.Errorf("error reading settlements: %w", err)
	}
	for rows.Next() {
		var (
			id, state   string
			amount, n   int64
			moved       int64
			sameCurrAcc bool
		)
		if err := rows.Scan(&id, &state, &amount, &n, &moved, &sameCurrAcc); err != nil {
			rows.Close()
			return nil, err
		}
		stored[id] = row{state, amount}
		switch {
		case state == "confirmed" && (n != 1 || moved != amount || !sameCurrAcc):
			add("confirmed settlement %s has %d movements for %d (amount %d)", id, n, moved, amount)
		case state != "confirmed" && n != 0:
			add("%s settlement %s has %d movements", state, id, n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading settlements: %w", err)
	}
	var orphans int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger_movements m
		WHERE NOT EXISTS (SELECT 1 FROM settlements s WHERE s.settlement_id = m.settlement_id)`).Scan(&orphans); err != nil {
		return nil, err
	}
	if orphans > 0 {
		add("%d ledger movements without a settlement", orphans)
	}
	for id, amount := range acked {
		r, ok := stored[id]
		switch {
		case !ok:
			add("settlement %s was acknowledged but is not stored", id)
		case r.amount != amount:
			add("settlement %s was acknowledged with amount %d but holds %d", id, amount, r.amount)
		}
	}
	if bank == nil {
		return v, nil
	}
	if st := bank.Stats(); st.MaxPaymentsPerReference > 1 {
		add("the bank paid a settlement twice: %+v", st)
	}
	client, err := bankclient.New(bank.URL, bankclient.Options{})
	if err != nil {
		return nil, err
	}
	for p, err := range bankclient.Payments(ctx, client, 1000) {
		if err != nil {
			return nil, fmt.Errorf("error reading the bank's statement: %w", err)
		}
		r, ok := stored[p.Reference]
		switch {
		case !ok:
			add("bank payment %s for unknown settlement %q", p.ID, p.Reference)
		case p.AmountCents != r.amount:
			add("bank payment %s for %s: amount %d, settlement %d", p.ID, p.Reference, p.AmountCents, r.amount)
		case p.Status == bankclient.StatusSettled && r.state != "confirmed":
			add("bank settled %s but the settlement is %s", p.Reference, r.state)
		case (p.Status == bankclient.StatusFailed || p.Status == bankclient.StatusReturned) && r.state != "failed":
			add("bank %s %s but the settlement is %s", p.Status, p.Reference, r.state)
		}
	}
	return v, nil
}

// StateCounts returns the number of settlements in each state.
func StateCounts(ctx context.Context, pool *pgxpool.Pool) (map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT state, count(*) FROM settlements GROUP BY state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]int)
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// WaitTerminal polls until want settlements exist and every one is
// confirmed or failed, or ctx ends; the error then says how far it got and
// lists a few settlements still open.
func WaitTerminal(ctx context.Context, pool *pgxpool.Pool, want int) error {
	for {
		var terminal, total int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state IN ('confirmed', 'failed')), count(*) FROM settlements`).Scan(&terminal, &total)
		if err == nil && terminal == want && total == want {
			return nil
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("%d of %d settlements terminal (want %d): %v", terminal, total, want, err)
			qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rows, qerr := pool.Query(qctx, `SELECT settlement_id, state, coalesce(investigation_reason, ''), next_check_at
				FROM settlements WHERE state NOT IN ('confirmed', 'failed') ORDER BY settlement_id LIMIT 10`)
			if qerr == nil {
				for rows.Next() {
					var id, st, reason string
					var next *time.Time
					_ = rows.Scan(&id, &st, &reason, &next)
					msg += fmt.Sprintf("\n  open: %s %s %q next_check_at=%v", id, st, reason, next)
				}
				rows.Close()
			}
			return fmt.Errorf("%s: %w", msg, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
