package database

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/pgembed"
)

// Config says which database Open opens and how. The caller reads it from
// its flags and environment (DATABASE_URL); Open reads neither.
type Config struct {
	// URL is the database to use. Empty: the embedded default cluster under
	// Home, started if needed, and its DefaultDBName database.
	URL string
	// Home is the embedded cluster's home (default pgembed.DefaultHome()).
	Home string
	// Fresh, when set, names a database that Open drops and creates anew on
	// the server URL (or the embedded cluster) is on, and opens instead:
	// the demo's own, never mixed with user data.
	Fresh string
	// Pool tunes the pool (see Connect).
	Pool PoolOptions
	// Ping, when positive, checks that the database answers within it.
	Ping time.Duration
	// Logf hears what the embedded cluster does (started, reused).
	Logf func(string, ...any)
	// NoPool decides the server and starts the embedded cluster when it is
	// the one, and opens nothing: for a command that holds the cluster
	// while code of its own opens its databases there (the benchmark).
	NoPool bool
}

// DB is an open database.
type DB struct {
	// Pool is the connection pool, with settle's limits.
	Pool *pgxpool.Pool
	// URL is the database's URL.
	URL string
	// Cluster is the embedded cluster the database lives in; nil when
	// Config.URL named it. Its Started says whether Open started it.
	Cluster *pgembed.Cluster
}

// Close closes the pool. The embedded cluster, when there is one, keeps
// running: its Release ends the process's use of it.
func (d *DB) Close() {
	if d.Pool != nil {
		d.Pool.Close()
	}
}

// Open is the one way settle's commands and the demo open their database:
// it decides which server (Config.URL or the embedded default cluster),
// creates the Fresh database when asked, opens a pool with settle's limits
// and, with Config.Ping, checks that it answers. It never creates tables:
// that is migrations'.
//
// After an error, the DB returned is nil unless the embedded cluster was
// found or started: then it holds Cluster (and no Pool), so that the
// caller ends its use of the cluster as on success.
func Open(ctx context.Context, c Config) (*DB, error) {
	logf := c.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	d := &DB{URL: c.URL}
	adminURL := c.URL
	if c.URL == "" {
		home := c.Home
		if home == "" {
			var err error
			if home, err = pgembed.DefaultHome(); err != nil {
				return nil, err
			}
		}
		var err error
		if c.Fresh != "" {
			d.Cluster, err = pgembed.Ensure(ctx, pgembed.Options{Home: home, Logf: logf})
		} else {
			d.Cluster, err = Embedded(ctx, home, logf)
		}
		if err != nil {
			return nil, err
		}
		d.URL, adminURL = d.Cluster.URL(DefaultDBName), d.Cluster.URL("postgres")
	}
	fail := func(err error) (*DB, error) {
		if d.Cluster == nil {
			return nil, err
		}
		return &DB{URL: d.URL, Cluster: d.Cluster}, err
	}
	if c.Fresh != "" {
		if c.URL != "" {
			cfg, err := pgx.ParseConfig(c.URL)
			if err != nil {
				return fail(fmt.Errorf("error parsing the database URL: %w", err))
			}
			if cfg.Database == c.Fresh {
				adminURL = WithDB(c.URL, "postgres")
			}
		}
		if err := recreate(ctx, adminURL, c.Fresh); err != nil {
			return fail(err)
		}
		d.URL = WithDB(adminURL, c.Fresh)
		if d.Cluster != nil {
			d.URL = d.Cluster.URL(c.Fresh)
		}
	}
	if c.NoPool {
		return d, nil
	}
	pool, err := Connect(ctx, d.URL, c.Pool)
	if err != nil {
		return fail(err)
	}
	if c.Ping > 0 {
		pctx, cancel := context.WithTimeout(ctx, c.Ping)
		defer cancel()
		if err := pool.Ping(pctx); err != nil {
			pool.Close()
			return fail(fmt.Errorf("database unreachable: %w", err))
		}
	}
	d.Pool = pool
	return d, nil
}

// recreate drops database name on the server of adminURL, when it exists,
// and creates it empty.
func recreate(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("error connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("error dropping the previous database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return fmt.Errorf("error creating the database %s (a role allowed to create databases is needed): %w", name, err)
	}
	return nil
}

// WithDB returns connection string u pointing at database db; u may be a
// URL or a keyword/value string.
func WithDB(u, db string) string {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		if pu, err := url.Parse(u); err == nil {
			pu.Path = "/" + db
			return pu.String()
		}
	}
	return u + " dbname=" + db
}
