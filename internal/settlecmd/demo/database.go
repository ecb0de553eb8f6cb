package demo

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/migrations"
)

// DBName is the demo's own database: it never mixes with user data.
const DBName = "settle_demo"

// openDemoDB opens the demo's own fresh database (DBName, dropped and
// created anew by database.Open) on the server of serverURL (DATABASE_URL),
// or in the embedded default cluster, started if needed, when it is empty;
// connected and migrated. where describes where it lives.
func openDemoDB(ctx context.Context, serverURL string, logf func(string, ...any)) (dbURL, where string, pool *pgxpool.Pool, err error) {
	db, err := database.Open(ctx, database.Config{URL: serverURL, Fresh: DBName, Logf: logf,
		Pool: database.PoolOptions{MaxConns: 4, ApplicationName: "settle-demo"}})
	if err != nil {
		return "", "", nil, err
	}
	if db.Cluster != nil {
		where = fmt.Sprintf("%s in the embedded cluster under %s", DBName, db.Cluster.Home)
	} else {
		cfg, err := pgx.ParseConfig(serverURL)
		if err != nil {
			db.Close()
			return "", "", nil, fmt.Errorf("error parsing DATABASE_URL: %w", err)
		}
		where = fmt.Sprintf("%s on the server of DATABASE_URL (%s:%d)", DBName, cfg.Host, cfg.Port)
	}
	if _, err := migrations.Migrate(ctx, db.Pool); err != nil {
		db.Close()
		return "", "", nil, err
	}
	return db.URL, where, db.Pool, nil
}
