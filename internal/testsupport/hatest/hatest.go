package hatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartT starts a formation for t (Start with o, its steps logged to t
// unless o.Logf is set) and closes it when t ends, showing the end of every
// node's log if t failed. Without pg_auto_failover installed it skips t,
// except in CI (CI set), where it fails it.
func StartT(t testing.TB, o Options) *Formation {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	f, err := Start(ctx, o)
	if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range append([]*Node{f.Monitor}, f.Nodes...) {
				t.Logf("%s log tail:\n%s", n.Name, tail(n.LogPath(), 25))
			}
		}
		if err := f.Close(); err != nil {
			t.Errorf("error closing the formation: %v", err)
		}
	})
	return f
}

// WaitWritable waits until a transaction that needs a primary (it takes a
// transaction id, which a standby refuses) commits through URL(DBName),
// trying every 50 ms, and returns when it did.
func (f *Formation) WaitWritable(ctx context.Context) (time.Time, error) {
	var lastErr error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, f.URL(DBName))
		if err == nil {
			_, err = conn.Exec(cctx, "SELECT txid_current()")
			conn.Close(context.WithoutCancel(ctx))
		}
		cancel()
		if err == nil {
			return time.Now(), nil
		}
		lastErr = err
		if sleepCtx(ctx, 50*time.Millisecond) != nil {
			return time.Time{}, fmt.Errorf("error waiting for a writable primary: %w (last error: %w)", ctx.Err(), lastErr)
		}
	}
}

// tail returns the last n lines of the file at path, or the error reading
// it.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
