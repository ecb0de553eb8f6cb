// Package ledger owns settle's double-entry ledger (DESIGN.md section 20):
// the accounts, the postings that move money between them and the holds
// that reserve a payout's amount while it is in flight, in integer minor
// units. It brings money in (Credit) and reads balances and postings.
//
// It never writes a settlement's hold or postings itself: those are
// effects of the settlement's transitions, written by package statemachine
// in the transaction of the transition. Postings are never changed or
// removed (the table is append-only in the database).
package ledger

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// System account names. A customer account_id may not start with
// SystemPrefix (intake refuses it), so no event can name one.
const (
	// SystemPrefix starts the name of every account settle keeps for
	// itself.
	SystemPrefix = "settle:"
	// ClearingPrefix + a bank's name is that bank's clearing account: a
	// confirmed payout moves its amount there from the paying account.
	ClearingPrefix = SystemPrefix + "clearing:"
	// FundingAccount is where credits (settle ledger credit) come from.
	FundingAccount = SystemPrefix + "funding"
)

// Account kinds (ledger_accounts.kind).
const (
	KindCustomer = "customer"
	KindClearing = "clearing"
	KindFunding  = "funding"
)

// Posting kinds (ledger_postings.kind).
const (
	PostingPayout   = "payout"
	PostingReversal = "reversal"
	PostingCredit   = "credit"
)

// ShardSQL is the SQL expression of the balance shard
// (ledger_balances.shard) a statement changes: its connection's, the
// backend's pid modulo 64 (migration 0025), so that the transactions of
// different connections change different rows of a busy account and
// rarely wait for each other's commit. Any shard is right: a customer
// account's balance is the sum of its shards.
const ShardSQL = `(pg_backend_pid() & 63)::smallint`

// ClearingAccount is the clearing account of bank.
func ClearingAccount(bank string) string { return ClearingPrefix + bank }

// ErrReservedAccount is matched (errors.Is) by CheckAccountID's error.
var ErrReservedAccount = errors.New("account ids starting with " + SystemPrefix + " are settle's own")

// CheckAccountID refuses an account_id a customer may not use: one that
// names a system account.
func CheckAccountID(id string) error {
	if strings.HasPrefix(id, SystemPrefix) {
		return fmt.Errorf("%q: %w", id, ErrReservedAccount)
	}
	return nil
}

// Balance is one account's balance in one currency, in minor units.
// Available is Posted minus Held.
type Balance struct {
	AccountID string `json:"account_id"`
	Currency  string `json:"currency"`
	Kind      string `json:"kind"`
	Posted    int64  `json:"posted_minor"`
	Held      int64  `json:"held_minor"`
	Available int64  `json:"available_minor"`
}

// Posting is one row of ledger_postings.
type Posting struct {
	ID            int64     `json:"id"`
	SettlementID  string    `json:"settlement_id,omitempty"`
	Kind          string    `json:"kind"`
	Ref           string    `json:"ref,omitempty"`
	DebitAccount  string    `json:"debit_account"`
	CreditAccount string    `json:"credit_account"`
	AmountMinor   int64     `json:"amount_minor"`
	Currency      string    `json:"currency"`
	CreatedAt     time.Time `json:"created_at"`
}
