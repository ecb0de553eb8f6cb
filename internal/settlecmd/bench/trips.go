package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/database"
)

// tripCounter counts a pool's client round trips to PostgreSQL: one per
// statement sent on its own (BEGIN and COMMIT included), one per pipelined
// batch, two per COPY (the COPY command, then the data and its end). It counts what the code asks for with warm
// statement caches; the first use of a statement on a connection costs
// pgx one more (its describe), which it does not see.
//
// It also counts, from the client's side, the transactions committed: each
// COMMIT, and each statement or batch sent outside a transaction. That is
// exact for one process's own work, where pg_stat_database sees every
// client's (and publishes late).
type tripCounter struct {
	n, commits atomic.Int64
}

// tripCounts is a snapshot of a tripCounter.
type tripCounts struct{ trips, commits int64 }

func (c *tripCounter) snapshot() tripCounts {
	return tripCounts{trips: c.n.Load(), commits: c.commits.Load()}
}

type autocommitKey struct{}

// autocommit marks ctx when conn is outside a transaction: what is sent
// then commits on its own.
func autocommit(ctx context.Context, conn *pgx.Conn) context.Context {
	if conn.PgConn().TxStatus() == 'I' {
		return context.WithValue(ctx, autocommitKey{}, true)
	}
	return ctx
}

var (
	_ pgx.QueryTracer    = (*tripCounter)(nil)
	_ pgx.BatchTracer    = (*tripCounter)(nil)
	_ pgx.CopyFromTracer = (*tripCounter)(nil)
)

func (c *tripCounter) load() int64 { return c.n.Load() }

// TraceQueryStart counts a statement sent on its own.
func (c *tripCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if !inBatch(ctx) {
		c.n.Add(1)
		return autocommit(ctx, conn)
	}
	return ctx
}

// TraceQueryEnd counts a commit.
func (c *tripCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err != nil || inBatch(ctx) {
		return
	}
	tag := d.CommandTag.String()
	if tag == "COMMIT" || (ctx.Value(autocommitKey{}) != nil && tag != "BEGIN") {
		c.commits.Add(1)
	}
}

type batchKey struct{}

func inBatch(ctx context.Context) bool { return ctx.Value(batchKey{}) != nil }

// TraceBatchStart counts a pipelined batch once.
func (c *tripCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return context.WithValue(autocommit(ctx, conn), batchKey{}, true)
}

// TraceBatchQuery does nothing: the batch was counted.
func (*tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd counts a batch sent outside a transaction as a commit.
func (c *tripCounter) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	if d.Err == nil && ctx.Value(autocommitKey{}) != nil {
		c.commits.Add(1)
	}
}

// TraceCopyFromStart counts a COPY.
func (c *tripCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.n.Add(2)
	return ctx
}

// TraceCopyFromEnd does nothing.
func (*tripCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// querier is a pool or one of its connections.
type querier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

// openMeasured opens a pool of its own, named name in pg_stat_activity,
// for work whose database counts are read afterwards: closing it ends its
// backends, and a backend publishes its counts when it exits (an idle one
// may hold them back for seconds when others are publishing theirs).
func openMeasured(ctx context.Context, dbURL, name string, size int, trips *tripCounter) (*pgxpool.Pool, error) {
	o := database.PoolOptions{MaxConns: int32(size), ApplicationName: name}
	if trips != nil {
		o.Tracer = trips
	}
	return database.Connect(ctx, dbURL, o)
}

// closeMeasured closes p, named name, and waits until its backends have
// exited, so that every count of its work is published.
func closeMeasured(ctx context.Context, p *pgxpool.Pool, observer querier, name string) error {
	p.Close()
	return waitBackendsGone(ctx, observer, name)
}

// waitBackendsGone waits until no backend named name is left, and their
// counts are published.
func waitBackendsGone(ctx context.Context, observer querier, name string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		if err := observer.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n); err != nil {
			return fmt.Errorf("error waiting for the backends of %s to exit: %w", name, err)
		}
		if n == 0 {
			// An exiting backend leaves pg_stat_activity and publishes its
			// counts in its exit callbacks, in either order: give the last
			// ones a moment.
			select {
			case <-time.After(500 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("error waiting for the backends of %s to exit: %d left after a minute", name, n)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// dbCounters are the database's cumulative counters of pg_stat_database.
type dbCounters struct {
	commits, rows int64
}

// readCounters returns the benchmark database's committed transactions and
// rows written (inserted, updated, deleted) so far, every client's. Each
// backend publishes its counts when it goes idle (at most once a second,
// later when others hold the lock) and when it exits: what is measured runs
// on a pool or process of its own that has exited before the second read.
// Reading costs two transactions of its own, which since takes off.
func readCounters(ctx context.Context, q querier) (dbCounters, error) {
	var c dbCounters
	if _, err := q.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return c, err
	}
	err := q.QueryRow(ctx, `SELECT xact_commit, tup_inserted + tup_updated + tup_deleted
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.commits, &c.rows)
	return c, err
}

// since returns the counts from before to c, less the transactions the
// benchmark itself ran in between (own: its polls and its reads).
func (c dbCounters) since(before dbCounters, own int64) dbCounters {
	return dbCounters{commits: c.commits - before.commits - own - 2, rows: c.rows - before.rows}
}
