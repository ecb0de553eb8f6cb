package inspect

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/ledger"
)

// LedgerMismatch is one way the ledger breaks its rules (DESIGN.md section
// 20), found by LedgerMismatches.
type LedgerMismatch struct {
	// Kind is "currency" (a currency's balances do not sum to zero),
	// "settlement" (a settlement's postings or hold do not match its state)
	// or "balance" (an account's kept balance is not the sum of its
	// postings and open holds).
	Kind         string `json:"kind"`
	SettlementID string `json:"settlement_id,omitempty"`
	AccountID    string `json:"account_id,omitempty"`
	Currency     string `json:"currency,omitempty"`
	Detail       string `json:"detail"`
}

func (m LedgerMismatch) String() string {
	switch {
	case m.SettlementID != "":
		return m.SettlementID + ": ledger: " + m.Detail
	case m.AccountID != "":
		return "account " + m.AccountID + " " + m.Currency + ": " + m.Detail
	default:
		return "ledger " + m.Currency + ": " + m.Detail
	}
}

// LedgerReport is the ledger part of `settle reconcile` (its JSON is the
// "ledger" object of DESIGN.md section 20).
type LedgerReport struct {
	// Balanced is true when every currency's balances sum to zero.
	Balanced   bool             `json:"balanced"`
	Mismatches []LedgerMismatch `json:"mismatches"`
}

// LedgerMismatches checks the ledger (part of CheckInvariants, and of
// `settle reconcile`):
//
//   - in every currency the balances sum to zero (the balances kept for
//     the customer accounts in ledger_balances, the others' from their
//     postings);
//   - a settlement's postings and hold match its state: pending, sent and
//     uncertain hold its amount and have no posting; confirmed has its
//     payout (the account to its bank's clearing account) and its hold
//     released; returned has the payout and its reversal, the hold
//     released; failed has no posting and its hold voided — so no hold
//     outlives its settlement's terminal state; each carries the
//     settlement's account, amount and currency;
//   - a customer account's kept balance equals the sum of its postings,
//     and its held amount the sum of its open holds.
func LedgerMismatches(ctx context.Context, db Querier) ([]LedgerMismatch, error) {
	return Collect(ctx, db, ledgerMismatchesSQL, func(row pgx.CollectableRow) (LedgerMismatch, error) {
		var m LedgerMismatch
		err := row.Scan(&m.Kind, &m.SettlementID, &m.AccountID, &m.Currency, &m.Detail)
		return m, err
	})
}

// ledgerReport runs LedgerMismatches for the summary.
func ledgerReport(ctx context.Context, db Querier) (LedgerReport, error) {
	ms, err := LedgerMismatches(ctx, db)
	if err != nil {
		return LedgerReport{}, err
	}
	r := LedgerReport{Balanced: true, Mismatches: ms}
	if r.Mismatches == nil {
		r.Mismatches = []LedgerMismatch{}
	}
	for _, m := range ms {
		if m.Kind == "currency" {
			r.Balanced = false
		}
	}
	return r, nil
}

var ledgerMismatchesSQL = fmt.Sprintf(`
	WITH sums AS (
		SELECT account_id, currency, sum(delta)::bigint AS posted FROM (
			SELECT credit_account AS account_id, currency, amount_minor AS delta FROM ledger_postings
			UNION ALL
			SELECT debit_account, currency, -amount_minor FROM ledger_postings
		) d GROUP BY account_id, currency
	), held AS (
		SELECT account_id, currency, sum(amount_minor)::bigint AS held
		FROM ledger_holds WHERE state = 'held' GROUP BY account_id, currency
	), kept AS (
		SELECT account_id, currency, sum(posted_minor)::bigint AS posted, sum(held_minor)::bigint AS held
		FROM ledger_balances GROUP BY account_id, currency
	), booked AS (
		SELECT s.settlement_id,
		       string_agg(p.kind, '+' ORDER BY p.kind) AS kinds,
		       bool_and(p.amount_minor = s.amount_cents AND p.currency = s.currency AND CASE p.kind
		           WHEN 'payout' THEN p.debit_account = s.account_id AND p.credit_account = %[1]s
		           ELSE p.credit_account = s.account_id AND p.debit_account = %[1]s END) AS ok
		FROM settlements s JOIN ledger_postings p USING (settlement_id)
		GROUP BY s.settlement_id
	)
	SELECT 'currency', '', '', currency, 'balances sum to ' || sum(b) || ', not 0'
	FROM (
		SELECT a.currency, CASE WHEN a.kind = 'customer' THEN coalesce(k.posted, 0) ELSE coalesce(s.posted, 0) END AS b
		FROM ledger_accounts a LEFT JOIN sums s USING (account_id, currency) LEFT JOIN kept k USING (account_id, currency)
	) x GROUP BY currency HAVING sum(b) <> 0
	UNION ALL
	SELECT 'settlement', s.settlement_id, s.account_id, s.currency,
	       s.state || ' with posting(s) ' || coalesce(b.kinds, 'none') ||
	       CASE WHEN NOT coalesce(b.ok, true) THEN ' (not of its account, amount and currency)' ELSE '' END ||
	       ' and hold ' || coalesce(h.state || ' ' || h.amount_minor || ' ' || h.currency || ' on ' || h.account_id, 'none') ||
	       ', want posting(s) ' || CASE s.state WHEN 'confirmed' THEN 'payout' WHEN 'returned' THEN 'payout+reversal' ELSE 'none' END ||
	       ' and hold ' || CASE WHEN s.state IN ('pending', 'sent', 'uncertain') THEN 'held' WHEN s.state = 'failed' THEN 'voided' ELSE 'released' END
	FROM settlements s
	LEFT JOIN booked b USING (settlement_id)
	LEFT JOIN ledger_holds h USING (settlement_id)
	WHERE coalesce(b.kinds, '') <> CASE s.state WHEN 'confirmed' THEN 'payout' WHEN 'returned' THEN 'payout+reversal' ELSE '' END
	   OR NOT coalesce(b.ok, true)
	   OR h.state IS DISTINCT FROM CASE WHEN s.state IN ('pending', 'sent', 'uncertain') THEN 'held' WHEN s.state = 'failed' THEN 'voided' ELSE 'released' END
	   OR h.amount_minor <> s.amount_cents OR h.account_id <> s.account_id OR h.currency <> s.currency
	UNION ALL
	SELECT 'balance', '', a.account_id, a.currency,
	       'kept balance posted ' || coalesce(k.posted, 0) || ' held ' || coalesce(k.held, 0) ||
	       ', but its postings sum to ' || coalesce(s.posted, 0) || ' and its open holds to ' || coalesce(h.held, 0)
	FROM ledger_accounts a LEFT JOIN sums s USING (account_id, currency) LEFT JOIN held h USING (account_id, currency)
	LEFT JOIN kept k USING (account_id, currency)
	WHERE a.kind = 'customer' AND (coalesce(k.posted, 0) <> coalesce(s.posted, 0) OR coalesce(k.held, 0) <> coalesce(h.held, 0))
	UNION ALL
	SELECT 'balance', '', k.account_id, k.currency, 'kept balance of an account that is no customer account'
	FROM kept k
	WHERE NOT EXISTS (SELECT 1 FROM ledger_accounts a
	                  WHERE a.account_id = k.account_id AND a.currency = k.currency AND a.kind = 'customer')
	UNION ALL
	SELECT 'balance', '', h.account_id, h.currency, 'open holds of ' || h.held || ' on no customer account'
	FROM held h
	WHERE NOT EXISTS (SELECT 1 FROM ledger_accounts a
	                  WHERE a.account_id = h.account_id AND a.currency = h.currency AND a.kind = 'customer')
	ORDER BY 1, 2, 3, 4`,
	`'`+ledger.ClearingPrefix+`' || s.bank`)
