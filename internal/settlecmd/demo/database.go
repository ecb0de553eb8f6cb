package demo

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/pgembed"
	"github.com/settle/settle/migrations"
)

// DBName is the demo's own database: it never mixes with user data.
const DBName = "settle_demo"

// demoDB finds the server (DATABASE_URL, or the embedded default cluster,
// started if needed) and creates a fresh DBName database on it, dropping
// the one of a previous run. It returns the demo database's URL and a
// description of where it lives.
func demoDB(ctx context.Context, logf func(string, ...any)) (dbURL, where string, err error) {
	var adminURL string
	if u := os.Getenv("DATABASE_URL"); u != "" {
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			return "", "", fmt.Errorf("error parsing DATABASE_URL: %w", err)
		}
		adminURL = u
		if cfg.Database == DBName {
			adminURL = withDB(u, "postgres")
		}
		dbURL = withDB(u, DBName)
		where = fmt.Sprintf("%s on the server of DATABASE_URL (%s:%d)", DBName, cfg.Host, cfg.Port)
	} else {
		home, err := pgembed.DefaultHome()
		if err != nil {
			return "", "", err
		}
		c, err := pgembed.Ensure(ctx, pgembed.Options{Home: home, Logf: logf})
		if err != nil {
			return "", "", err
		}
		adminURL, dbURL = c.URL("postgres"), c.URL(DBName)
		where = fmt.Sprintf("%s in the embedded cluster under %s", DBName, home)
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", "", fmt.Errorf("error connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	name := pgx.Identifier{DBName}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", "", fmt.Errorf("error dropping the previous demo database: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", fmt.Errorf("error creating the demo database %s (the demo needs a role allowed to create databases): %w", DBName, err)
	}
	return dbURL, where, nil
}

// withDB returns connection string u pointing at database db; u may be a
// URL or a keyword/value string.
func withDB(u, db string) string {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		if pu, err := url.Parse(u); err == nil {
			pu.Path = "/" + db
			return pu.String()
		}
	}
	return u + " dbname=" + db
}

// openDemoDB opens the demo's own fresh database (demoDB), connected and
// migrated.
func openDemoDB(ctx context.Context, logf func(string, ...any)) (dbURL, where string, pool *pgxpool.Pool, err error) {
	if dbURL, where, err = demoDB(ctx, logf); err != nil {
		return "", "", nil, err
	}
	if pool, err = database.Connect(ctx, dbURL, database.PoolOptions{MaxConns: 4, ApplicationName: "settle-demo"}); err != nil {
		return "", "", nil, err
	}
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		pool.Close()
		return "", "", nil, err
	}
	return dbURL, where, pool, nil
}
