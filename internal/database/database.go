// Package database decides which PostgreSQL settle talks to (the URL its
// caller passes, from DATABASE_URL or a flag, or the embedded default
// cluster) and opens connection pools with the limits settle relies on:
// Open is the one way every command and the demo open theirs. It reads no
// environment and never creates tables (that is migrations'). Its
// subpackage dberr classifies database errors for the HTTP edges.
package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/pgembed"
)

// DefaultDBName is the database settle uses inside the embedded cluster.
const DefaultDBName = "settle"

// Embedded starts (or reuses) the embedded default cluster under home and
// makes sure the settle database (DefaultDBName) exists in it.
func Embedded(ctx context.Context, home string, logf func(string, ...any)) (*pgembed.Cluster, error) {
	c, err := pgembed.Ensure(ctx, pgembed.Options{Home: home, Logf: logf})
	if err != nil {
		return nil, err
	}
	if err := CreateDatabase(ctx, c.URL("postgres"), DefaultDBName, ""); err != nil {
		if c.Started {
			// Do not leave behind a server nobody was told about.
			_, _ = c.Release(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return c, nil
}

// CreateDatabase creates database name (from template when not empty)
// unless it exists. Concurrent callers are fine: the loser of a race sees
// "already exists" and treats it as success.
func CreateDatabase(ctx context.Context, adminURL, name, template string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("error connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("error checking for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	// CREATE DATABASE takes no parameters; the names are quoted identifiers.
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.DuplicateDatabase || pgErr.Code == pgerrcode.UniqueViolation) {
			return nil // created by a concurrent process
		}
		return fmt.Errorf("error creating database %s: %w", name, err)
	}
	return nil
}

// PoolOptions tune a pool. Zero values take the defaults.
type PoolOptions struct {
	// MaxConns caps the pool (default 20).
	MaxConns int32
	// StatementTimeout aborts any statement running longer (default 30s),
	// so a stuck query cannot hold locks or connections forever.
	StatementTimeout time.Duration
	// LockTimeout aborts a statement waiting longer for a lock (default 10s).
	LockTimeout time.Duration
	// IdleInTxTimeout ends sessions idle inside a transaction (default 60s).
	IdleInTxTimeout time.Duration
	// ApplicationName shows in pg_stat_activity (default "settle").
	ApplicationName string
	// Tracer, when set, traces every connection's queries (the benchmark
	// counts round trips with it).
	Tracer pgx.QueryTracer
}

// Connect opens a pool to url with settle's limits.
func Connect(ctx context.Context, url string, o PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("error parsing the database URL: %w", err)
	}
	if o.MaxConns == 0 {
		o.MaxConns = 20
	}
	if o.StatementTimeout == 0 {
		o.StatementTimeout = 30 * time.Second
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = 10 * time.Second
	}
	if o.IdleInTxTimeout == 0 {
		o.IdleInTxTimeout = 60 * time.Second
	}
	if o.ApplicationName == "" {
		o.ApplicationName = "settle"
	}
	cfg.MaxConns = o.MaxConns
	cfg.MaxConnIdleTime = 5 * time.Minute
	cfg.HealthCheckPeriod = 5 * time.Second
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	rp := cfg.ConnConfig.RuntimeParams
	rp["statement_timeout"] = fmt.Sprint(o.StatementTimeout.Milliseconds())
	rp["lock_timeout"] = fmt.Sprint(o.LockTimeout.Milliseconds())
	rp["idle_in_transaction_session_timeout"] = fmt.Sprint(o.IdleInTxTimeout.Milliseconds())
	rp["application_name"] = o.ApplicationName
	if o.Tracer != nil {
		cfg.ConnConfig.Tracer = o.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("error creating the connection pool: %w", err)
	}
	return pool, nil
}
