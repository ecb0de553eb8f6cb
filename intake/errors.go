package intake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
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
// request; anything else is returned as is, and the edge answers it 500
// and logs it once (a bug must not hide behind an endless 503).
//
// Unavailable: the server's own classes for it (connection exception,
// operator intervention such as a shutdown or a statement timeout,
// insufficient resources, system error, a transaction rolled back as a
// deadlock or serialization failure, lock and idle-session timeouts); and,
// without an answer from the server, a connection that could not be made
// or was lost (pgconn.SafeToRetry, *pgconn.ConnectError, network errors),
// a timeout (pgconn.Timeout), a closed pool or a request cancelled by its
// client. No acknowledgement was
// given, and a redelivery is safe because a replay is harmless: that holds
// too for a COMMIT whose answer was lost with the connection.
func classify(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !unavailable(err) {
		return err
	}
	return &unavailableError{err}
}

func unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		return pgerrcode.IsConnectionException(c) || pgerrcode.IsOperatorIntervention(c) ||
			pgerrcode.IsInsufficientResources(c) || pgerrcode.IsSystemError(c) ||
			pgerrcode.IsTransactionRollback(c) ||
			c == pgerrcode.LockNotAvailable || c == pgerrcode.IdleInTransactionSessionTimeout ||
			c == pgerrcode.IdleSessionTimeout ||
			// A write on a server that is (now) a standby: no primary is
			// reachable on this connection until the failover completes.
			c == pgerrcode.ReadOnlySQLTransaction
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, puddle.ErrClosedPool) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled)
}

// retryable reports whether a whole intake transaction may simply be run
// again at once (a deadlock or serialization failure aborted it).
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure)
}

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
