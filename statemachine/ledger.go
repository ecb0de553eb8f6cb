package statemachine

import (
	"github.com/settle/settle/ledger"
	"github.com/settle/settle/settlement"
)

// The ledger effects of the state machine (DESIGN.md section 20): the
// statement that creates settlements takes their holds, and the statement
// of a transition writes its postings and closes its hold, so that no
// caller can move a settlement without its money moving with it, in the
// same transaction. The SQL below extends those statements' CTEs: it reads
// the CTE moved (settlement_id, account_id, amount_cents, currency, bank of
// the settlements the statement moved) and the time parameter named by at.
//
// Customer accounts keep their balance in shards (ledger_balances), upserted,
// so that a settlement whose account has no row yet (one written before its
// hold, by a test or by hand) still posts. The bank's clearing account is
// created on first use and keeps no balance of its own.

// clearingSQL is the clearing account of the bank of moved's row m.
const clearingSQL = `'` + ledger.ClearingPrefix + `' || m.bank`

// accountsSQL creates the accounts of moved's settlements that do not
// exist yet (customer and clearing) and changes the customer balances by
// the deltas of the CTE named deltas (account_id, currency, shard, posted,
// held) in ledger_balances (migration 0016), in the shard of the
// statement's connection (shardSQL), so that the payouts of one account do
// not all queue on one row; in (account, currency, shard) order, so that
// two statements lock rows in one order.
func accountsSQL(at string) string {
	return `
		ledger_clearing AS (
			INSERT INTO ledger_accounts (account_id, currency, kind, allow_negative, created_at, updated_at)
			SELECT DISTINCT ` + clearingSQL + `, m.currency, 'clearing', true, ` + at + `, ` + at + ` FROM moved m
			ON CONFLICT (account_id, currency) DO NOTHING
		), ledger_customer AS (
			INSERT INTO ledger_accounts (account_id, currency, kind, allow_negative, created_at, updated_at)
			SELECT DISTINCT account_id, currency, 'customer', false, ` + at + `, ` + at + ` FROM deltas
			ON CONFLICT (account_id, currency) DO NOTHING
		), ledger_balance AS (
			INSERT INTO ledger_balances AS b (account_id, currency, shard, posted_minor, held_minor)
			SELECT account_id, currency, shard, sum(posted), sum(held)
			FROM deltas GROUP BY account_id, currency, shard ORDER BY account_id, currency, shard
			ON CONFLICT (account_id, currency, shard) DO UPDATE
			SET posted_minor = b.posted_minor + EXCLUDED.posted_minor, held_minor = b.held_minor + EXCLUDED.held_minor
		)`
}

// shardSQL is the balance shard a statement changes: its connection's
// (ledger.ShardSQL), so that the transactions of different connections,
// a batch's whole included, change different rows of a busy account.
const shardSQL = ledger.ShardSQL

// holdSQL takes the holds of the settlements created by the statement
// (Created): $4 is the time.
var holdSQL = `,
		ledger_hold AS (
			INSERT INTO ledger_holds (settlement_id, account_id, currency, amount_minor, state, created_at)
			SELECT settlement_id, account_id, currency, amount_cents, 'held', $4 FROM moved
		), deltas AS (
			SELECT m.account_id, m.currency, ` + shardSQL + ` AS shard, 0::bigint AS posted, m.amount_cents AS held FROM moved m
		),` + accountsSQL("$4::timestamptz")

// transitionLedgerSQL is the ledger part of the statement of a transition
// to each state that has one (Transition): $5 is the time. Confirmed posts
// the payout (the account to the bank's clearing account) and releases the
// hold; failed voids the hold; returned posts the reversal. The other
// states move no money: an uncertain settlement keeps its hold.
var transitionLedgerSQL = map[settlement.State]string{
	settlement.Confirmed: closeHoldSQL("released") + postingSQL("payout", "m.account_id", clearingSQL) + `,
		deltas AS (
			SELECT m.account_id, m.currency, ` + shardSQL + ` AS shard, -m.amount_cents AS posted,
			       -coalesce((SELECT sum(h.amount_minor) FROM ledger_hold h), 0)::bigint AS held
			FROM moved m
		),` + accountsSQL("$5::timestamptz"),
	settlement.Failed: closeHoldSQL("voided") + `,
		deltas AS (
			SELECT m.account_id, m.currency, ` + shardSQL + ` AS shard, 0::bigint AS posted,
			       -coalesce((SELECT sum(h.amount_minor) FROM ledger_hold h), 0)::bigint AS held
			FROM moved m
		),` + accountsSQL("$5::timestamptz"),
	settlement.Returned: postingSQL("reversal", clearingSQL, "m.account_id") + `,
		deltas AS (
			SELECT m.account_id, m.currency, ` + shardSQL + ` AS shard, m.amount_cents AS posted, 0::bigint AS held FROM moved m
		),` + accountsSQL("$5::timestamptz"),
}

// closeHoldSQL closes the open hold of the moved settlement as state.
func closeHoldSQL(state string) string {
	return `,
		ledger_hold AS (
			UPDATE ledger_holds h SET state = '` + state + `', closed_at = $5
			FROM moved m WHERE h.settlement_id = m.settlement_id AND h.state = 'held'
			RETURNING h.amount_minor
		)`
}

// postingSQL posts the moved settlement's amount as kind, from the debit
// account to the credit one (SQL expressions over moved's row m).
func postingSQL(kind, debit, credit string) string {
	return `,
		ledger_posting AS (
			INSERT INTO ledger_postings (settlement_id, kind, debit_account, credit_account, amount_minor, currency, created_at)
			SELECT m.settlement_id, '` + kind + `', ` + debit + `, ` + credit + `, m.amount_cents, m.currency, $5 FROM moved m
		)`
}
