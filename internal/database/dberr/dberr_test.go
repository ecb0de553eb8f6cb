package dberr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// TestClassify: what PostgreSQL could not answer now is ErrUnavailable
// (503, deliver again); what it refused, and every error that is not the
// database's (a scan bug, say), stays what it is (500, logged once).
func TestClassify(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("error doing it: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"admin shutdown", pg(pgerrcode.AdminShutdown), true},
		{"cannot connect now", pg(pgerrcode.CannotConnectNow), true},
		{"statement timeout", pg(pgerrcode.QueryCanceled), true},
		{"connection failure", pg(pgerrcode.ConnectionFailure), true},
		{"too many connections", pg(pgerrcode.TooManyConnections), true},
		{"disk full", pg(pgerrcode.DiskFull), true},
		{"deadlock", pg(pgerrcode.DeadlockDetected), true},
		{"serialization", pg(pgerrcode.SerializationFailure), true},
		{"lock timeout", pg(pgerrcode.LockNotAvailable), true},
		{"read only (standby)", pg(pgerrcode.ReadOnlySQLTransaction), true},
		{"unique violation", pg(pgerrcode.UniqueViolation), false},
		{"undefined table", pg(pgerrcode.UndefinedTable), false},
		{"syntax error", pg(pgerrcode.SyntaxError), false},
		{"connection refused", fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), true},
		{"connection lost", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{"closed pool", puddle.ErrClosedPool, true},
		{"deadline", fmt.Errorf("acquiring: %w", context.DeadlineExceeded), true},
		{"scan bug", errors.New("can't scan into dest[3]: cannot scan text into *int64"), false},
		{"plain bug", errors.New("index out of range"), false},
	} {
		got := Classify(tc.err)
		if errors.Is(got, ErrUnavailable) != tc.unavailable {
			t.Errorf("%s: Classify(%v) unavailable = %v, want %v", tc.name, tc.err, !tc.unavailable, tc.unavailable)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: Classify lost the error it wraps", tc.name)
		}
	}
	if Classify(nil) != nil {
		t.Error("Classify(nil) is not nil")
	}
}
