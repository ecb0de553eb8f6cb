package bench

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// tripCounter counts a pool's client round trips to PostgreSQL: one per
// statement sent on its own (BEGIN and COMMIT included), one per pipelined
// batch, two per COPY (the COPY command, then the data and its end). It counts what the code asks for with warm
// statement caches; the first use of a statement on a connection costs
// pgx one more (its describe), which it does not see.
type tripCounter struct {
	n atomic.Int64
}

var (
	_ pgx.QueryTracer    = (*tripCounter)(nil)
	_ pgx.BatchTracer    = (*tripCounter)(nil)
	_ pgx.CopyFromTracer = (*tripCounter)(nil)
)

func (c *tripCounter) load() int64 { return c.n.Load() }

// TraceQueryStart counts a statement sent on its own.
func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if !inBatch(ctx) {
		c.n.Add(1)
	}
	return ctx
}

// TraceQueryEnd does nothing.
func (*tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type batchKey struct{}

func inBatch(ctx context.Context) bool { return ctx.Value(batchKey{}) != nil }

// TraceBatchStart counts a pipelined batch once.
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return context.WithValue(ctx, batchKey{}, true)
}

// TraceBatchQuery does nothing: the batch was counted.
func (*tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (*tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart counts a COPY.
func (c *tripCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.n.Add(2)
	return ctx
}

// TraceCopyFromEnd does nothing.
func (*tripCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// dbCounters are the database's cumulative counters of pg_stat_database.
type dbCounters struct {
	commits, rows int64
}

// readCounters returns the benchmark database's committed transactions and
// rows written (inserted, updated, deleted) so far, every client's. Each
// backend publishes its counts when it goes idle (at most once a second)
// and when it exits. Reading costs two transactions of its own, which
// countersSince takes off.
func readCounters(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) (dbCounters, error) {
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
