package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/pgembed"
	"github.com/settle/settle/migrations"
)

// openDB resolves the database (DATABASE_URL or the embedded default) and
// opens a pool. On failure it prints one clear line and returns nil.
func openDB(ctx context.Context, s Stdio, o database.PoolOptions) (*pgxpool.Pool, string) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(s.Err, "settle: "+format+"\n", args...)
	}
	url, err := database.Resolve(ctx, logf)
	if err != nil {
		fmt.Fprintf(s.Err, "settle: %v\n", err)
		return nil, ""
	}
	pool, err := database.Connect(ctx, url, o)
	if err != nil {
		fmt.Fprintf(s.Err, "settle: %v\n", err)
		return nil, ""
	}
	return pool, url
}

func cmdMigrate(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("migrate", "", `
Applies settle's schema and River's schema to the database (DATABASE_URL, or
the embedded default cluster). Idempotent: a no-op when up to date. Safe to
run from many processes at once (they serialise on an advisory lock).`, s)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	pool, _ := openDB(ctx, s, database.PoolOptions{MaxConns: 2})
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	res, err := migrations.Migrate(ctx, pool)
	if err != nil {
		fmt.Fprintf(s.Err, "settle migrate: %v\n", err)
		return exitError
	}
	if len(res.Applied) == 0 && len(res.RiverApplied) == 0 {
		fmt.Fprintln(s.Out, "settle migrate: schema is up to date")
		return exitOK
	}
	for _, m := range res.Applied {
		fmt.Fprintf(s.Out, "applied %s\n", m)
	}
	if len(res.RiverApplied) > 0 {
		fmt.Fprintf(s.Out, "applied River migrations %v\n", res.RiverApplied)
	}
	return exitOK
}

func cmdDB(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("db", "status|stop|url", `
Manages the embedded default PostgreSQL cluster under $SETTLE_HOME
(default ~/.local/share/settle), which settle starts on first use when
DATABASE_URL is unset and which every settle process of this user shares.

  status   whether it runs, where, on which port, and its connection URL
  stop     stops it (fast shutdown: committed work is kept)
  url      prints its connection URL, starting it if needed (for psql)`, s)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitError
	}
	home, err := pgembed.DefaultHome()
	if err != nil {
		fmt.Fprintf(s.Err, "settle db: %v\n", err)
		return exitError
	}
	switch fs.Arg(0) {
	case "status":
		c, running, err := pgembed.Find(home)
		if err != nil {
			fmt.Fprintf(s.Err, "settle db: %v\n", err)
			return exitError
		}
		fmt.Fprintf(s.Out, "home:     %s\ncluster:  %s\n", home, c.Dir)
		if !running {
			fmt.Fprintln(s.Out, "status:   stopped (starts on the next settle command)")
			return exitFindings
		}
		fmt.Fprintf(s.Out, "status:   running (pid %d, port %d)\nurl:      %s\n", c.PID, c.Port, c.URL(database.DefaultDBName))
		return exitOK
	case "stop":
		c, running, err := pgembed.Find(home)
		if err != nil {
			fmt.Fprintf(s.Err, "settle db: %v\n", err)
			return exitError
		}
		if !running {
			fmt.Fprintln(s.Out, "settle db: not running")
			return exitOK
		}
		stopCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		if err := c.Stop(stopCtx); err != nil {
			fmt.Fprintf(s.Err, "settle db: %v\n", err)
			return exitError
		}
		fmt.Fprintln(s.Out, "settle db: stopped")
		return exitOK
	case "url":
		if os.Getenv("DATABASE_URL") != "" {
			slog.Warn("DATABASE_URL is set; printing it")
		}
		url, err := database.Resolve(ctx, nil)
		if err != nil {
			fmt.Fprintf(s.Err, "settle db: %v\n", err)
			return exitError
		}
		fmt.Fprintln(s.Out, url)
		return exitOK
	default:
		fmt.Fprintf(s.Err, "settle db: unknown action %q (want status, stop or url)\n", fs.Arg(0))
		return exitError
	}
}
