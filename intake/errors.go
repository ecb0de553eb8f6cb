package intake

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
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
// event may (and should) be delivered again later. HTTP 503.
var ErrUnavailable = errors.New("database unavailable")

// unavailableError wraps a database error that a later retry may not hit.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return fmt.Sprintf("%v: %v", ErrUnavailable, e.err) }

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// classify marks err as ErrUnavailable when it means PostgreSQL could not
// be reached or could not answer now, rather than that it refused the
// request. Anything that is not an answer from the server (connection
// refused or lost, closed pool, pool or statement timeout, cancelled
// context) counts as unavailable: no acknowledgement was given, and a
// redelivery is safe because a replay is harmless.
func classify(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) < 2:
			return err
		case pgErr.Code[:2] == "08", // connection exception
			pgErr.Code[:2] == "40", // serialization failure, deadlock
			pgErr.Code[:2] == "53", // insufficient resources (too many connections, disk full)
			pgErr.Code[:2] == "57", // operator intervention: shutdown, statement timeout, cannot connect now
			pgErr.Code[:2] == "58", // system error
			pgErr.Code == "55P03",  // lock_not_available (lock_timeout)
			pgErr.Code == "25P03":  // idle_in_transaction_session_timeout
			return &unavailableError{err}
		}
		return err
	}
	return &unavailableError{err}
}

// retryable reports whether a whole intake transaction may simply be run
// again at once (a deadlock or serialization failure aborted it).
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}
