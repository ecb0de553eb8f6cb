// Package dberr is the one classifier of database errors, at the database
// edge: an error either means PostgreSQL could not be reached or could not
// answer now (Unavailable: nothing was done or acknowledged, try again
// later; an HTTP edge answers 503 with Retry-After), or it is anything else
// (a bug or a refusal the caller did not expect: the edge answers 500 and
// logs it once, so that a bug never hides behind an endless 503).
//
// Every HTTP edge decides with it (intake, the bank webhooks, the console);
// lower layers return errors as they are and never log them. It classifies
// by type and SQLSTATE (pgconn, pgerrcode), never by an error's text, and
// imports no settle package.
package dberr

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

// ErrUnavailable is matched (errors.Is) by an error Classify marked: the
// database could not be reached or could not answer in time.
var ErrUnavailable = errors.New("database unavailable")

// unavailableError wraps a database error that a later retry may not hit.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return fmt.Sprintf("%v: %v", ErrUnavailable, e.err) }

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// Classify marks err as ErrUnavailable when it means PostgreSQL could not
// be reached or could not answer now, rather than that it refused the
// request; anything else is returned as is.
//
// Unavailable: the server's own classes for it (connection exception,
// operator intervention such as a shutdown or a statement timeout,
// insufficient resources, system error, a transaction rolled back as a
// deadlock or serialization failure, lock and idle-session timeouts, a
// write on a server that is now a standby); and, without an answer from
// the server, a connection that could not be made or was lost
// (pgconn.SafeToRetry, *pgconn.ConnectError, network errors), a timeout
// (pgconn.Timeout), a closed pool or a request cancelled by its client.
func Classify(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !unavailable(err) {
		return err
	}
	return &unavailableError{err}
}

// Unavailable reports whether err means the database could not be reached
// or could not answer now (see Classify).
func Unavailable(err error) bool {
	return err != nil && (errors.Is(err, ErrUnavailable) || unavailable(err))
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

// Retryable reports whether a whole transaction may simply be run again at
// once: a deadlock or a serialization failure aborted it.
func Retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure)
}
