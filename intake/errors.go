package intake

import (
	"errors"
	"fmt"

	"github.com/settle/settle/internal/database/dberr"
)

// ErrConflict is matched (errors.Is) by a *ConflictError: the settlement_id
// was received before with another payload.
var ErrConflict = errors.New("settlement_id already received with another payload")

// ConflictError reports a receipt conflict. It has been recorded in
// receipt_conflicts (in its own transaction) by the time it is returned.
type ConflictError struct {
	SettlementID string
	// StoredHash is the payload hash of the first receipt.
	StoredHash string
	// IncomingHash is the payload hash of the refused event.
	IncomingHash string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("settlement %s: %v (stored %s, incoming %s)", e.SettlementID, ErrConflict, e.StoredHash, e.IncomingHash)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// ErrUnavailable is matched (errors.Is) when the database could not be
// reached or could not answer in time. Nothing was acknowledged; the same
// event may (and should) be delivered again later. HTTP 503. It is the
// database edge's own (dberr.ErrUnavailable).
var ErrUnavailable = dberr.ErrUnavailable

// classify marks err as ErrUnavailable when it means PostgreSQL could not
// be reached or could not answer now (dberr.Classify); anything else is
// returned as is, and the edge answers it 500 and logs it once. No
// acknowledgement was given, and a redelivery is safe because a replay is
// harmless: that holds too for a COMMIT whose answer was lost with the
// connection.
func classify(err error) error { return dberr.Classify(err) }

// retryable reports whether a whole intake transaction may simply be run
// again at once (a deadlock or serialization failure aborted it).
func retryable(err error) bool { return dberr.Retryable(err) }

// ErrInsufficientFunds is matched (errors.Is) by an *InsufficientFundsError.
var ErrInsufficientFunds = errors.New("insufficient funds")

// InsufficientFundsError refuses a payout whose amount exceeds its
// account's available balance (--funds-check, DESIGN.md section 20).
// Nothing was held; the refusal is the receipt's outcome, so a redelivery
// of the event gets it again (paying after all is a new settlement_id).
type InsufficientFundsError struct {
	SettlementID string
	AccountID    string
	AmountMinor  int64
	Currency     string
}

func (e *InsufficientFundsError) Error() string {
	return fmt.Sprintf("settlement %s: account %s has not %d %s available: %v", e.SettlementID, e.AccountID, e.AmountMinor, e.Currency, ErrInsufficientFunds)
}

func (e *InsufficientFundsError) Unwrap() error { return ErrInsufficientFunds }
