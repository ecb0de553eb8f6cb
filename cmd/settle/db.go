package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/natsembed"
	"github.com/settle/settle/internal/pgembed"
	"github.com/settle/settle/migrations"
)

// clusterStopTimeout bounds the stop of the embedded cluster when a command
// ends (it runs even after Ctrl-C).
const clusterStopTimeout = 90 * time.Second

// clusterUse says what a command does with the embedded cluster when it
// ends.
type clusterUse int

const (
	// shareCluster: the command is one of the cluster's users (worker,
	// migrate, reconcile); it leaves the cluster running, and says so when
	// it started it.
	shareCluster clusterUse = iota
	// ownCluster: the command needs the cluster only while it runs (demo
	// without --keep, bench); when it started it, it stops it, unless
	// another settle process uses it by then.
	ownCluster
)

// openDatabase opens the database of a command with database.Open: c.URL
// when set, else DATABASE_URL, else the embedded default cluster. On
// failure it prints one line and returns nil. Otherwise the command defers
// done right away, so that it runs last, on every return path and after
// Ctrl-C: done closes the pool and ends the command's use of the embedded
// cluster as use says; when a cluster this command started stays running,
// it says so in one line on s.Err, the command's last.
func openDatabase(ctx context.Context, s Stdio, use clusterUse, c database.Config) (db *database.DB, done func()) {
	if c.URL == "" {
		c.URL = os.Getenv("DATABASE_URL")
	}
	c.Logf = func(format string, args ...any) {
		fmt.Fprintf(s.Err, "settle: "+format+"\n", args...)
	}
	db, err := database.Open(ctx, c)
	if err != nil {
		fmt.Fprintf(s.Err, "settle: %v\n", err)
		if db != nil {
			endClusterUse(ctx, s, db.Cluster, use)
		}
		return nil, nil
	}
	return db, func() { db.Close(); endClusterUse(ctx, s, db.Cluster, use) }
}

// endClusterUse is done of openDatabase for cluster c (nil with DATABASE_URL).
func endClusterUse(ctx context.Context, s Stdio, c *pgembed.Cluster, use clusterUse) {
	if c == nil || !c.Started {
		return // not ours: it was running before, or it is not embedded
	}
	if use == ownCluster {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clusterStopTimeout)
		defer cancel()
		stopped, err := c.Release(stopCtx)
		if err != nil {
			fmt.Fprintf(s.Err, "settle: error stopping the embedded PostgreSQL cluster: %v\n", err)
		}
		if stopped {
			fmt.Fprintf(s.Err, "settle: stopped the embedded PostgreSQL cluster at %s (started for this command)\n", c.Dir)
			return
		}
		if err == nil {
			printStillRunning(s, c.Home, "another settle process uses it")
			return
		}
	}
	printStillRunning(s, c.Home, "")
}

// printStillRunning says, when the cluster of home runs, that it still
// does and how to stop it; why, when not empty, says why it was left so.
func printStillRunning(s Stdio, home, why string) {
	c, running, err := pgembed.Find(home)
	if err != nil || !running {
		return
	}
	if why != "" {
		why = ": " + why
	}
	fmt.Fprintf(s.Err, "settle: the embedded PostgreSQL cluster at %s is still running (pid %d)%s; `settle db stop` stops it\n",
		c.Dir, c.PID, why)
}

// envMigrateBank names the bank the settlements of a database that predates
// migration 0012 are bound to, for settle migrate --bind-bank and for the
// migration a worker runs at start.
const envMigrateBank = "SETTLE_MIGRATE_BANK"

func cmdMigrate(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("migrate", "", `
Applies settle's schema and River's schema to the database (DATABASE_URL, or
the embedded default cluster). Idempotent: a no-op when up to date. Safe to
run from many processes at once (they serialise on an advisory lock).

Migration 0012 binds every settlement to its bank (settlements.bank). The
settlements of a database that predates it are bound to the bank named by
--bind-bank (or SETTLE_MIGRATE_BANK): the --bank its workers ran with. When
there are settlements and no bank is named, the migration refuses and changes
nothing; it never guesses.`, s)
	bindBank := fs.String("bind-bank", "", "the bank the settlements already stored were paid through: settle, stripe or obie (default: $"+envMigrateBank+"); needed once, by migration 0012, when settlements exist")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if *bindBank == "" {
		*bindBank = os.Getenv(envMigrateBank)
	}
	db, done := openDatabase(ctx, s, shareCluster, database.Config{Pool: database.PoolOptions{MaxConns: 2}})
	if db == nil {
		return exitError
	}
	defer done()
	pool := db.Pool
	res, err := migrations.MigrateWith(ctx, pool, migrations.Options{BindBank: *bindBank})
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
	fs := newFlagSet("db", "status|stop|url|prune [--dry-run] [--unknown]", `
Manages the embedded default PostgreSQL cluster under $SETTLE_HOME
(default ~/.local/share/settle), which settle starts on first use when
DATABASE_URL is unset and which every settle process of this user shares,
and the embedded JetStream server beside it ($SETTLE_HOME/nats, started on
first use by --source nats when NATS_URL is unset).
As root, when the postgres user cannot reach $SETTLE_HOME, the cluster lives
in `+pgembed.ClusterRoot+`/cluster-<hash> and $SETTLE_HOME/pg.path says where.

  status   whether it runs, where, on which port, and its connection URL
           (and the embedded NATS server's, when there is one);
           then the other clusters of this user, with their home and
           whether it still exists (exit 1 when this home's is stopped)
  stop     stops it (fast shutdown: committed work is kept), and the
           embedded NATS server (every message it stored is on disk)
  url      prints its connection URL, starting it if needed (for psql)
  prune    stops and removes the clusters whose $SETTLE_HOME is gone (or
           points at another cluster), and stops servers left running on a
           deleted cluster directory; never the cluster of a home that
           exists, nor one a running settle process uses`, s)
	dryRun := fs.Bool("dry-run", false, "prune: list what would be removed, remove nothing")
	unknown := fs.Bool("unknown", false, "prune: also remove clusters made by an older settle, which did not record their home")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitError
	}
	action := fs.Arg(0)
	// Flags may follow the action too.
	if code, done := parseFlags(fs, append([]string{}, fs.Args()[1:]...)); done {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return exitError
	}
	if (*dryRun || *unknown) && action != "prune" {
		fmt.Fprintln(s.Err, "settle db: --dry-run and --unknown go with prune")
		return exitError
	}
	home, err := pgembed.DefaultHome()
	if err != nil {
		fmt.Fprintf(s.Err, "settle db: %v\n", err)
		return exitError
	}
	switch action {
	case "status":
		return dbStatus(s, home)
	case "stop":
		c, running, err := pgembed.Find(home)
		if err != nil {
			fmt.Fprintf(s.Err, "settle db: %v\n", err)
			return exitError
		}
		stopCtx, cancel := context.WithTimeout(ctx, clusterStopTimeout)
		defer cancel()
		if ns, ok := natsembed.Find(home); ok {
			if err := ns.Stop(stopCtx); err != nil {
				fmt.Fprintf(s.Err, "settle db: %v\n", err)
				return exitError
			}
			fmt.Fprintln(s.Out, "settle db: stopped the embedded NATS server")
		}
		if !running {
			fmt.Fprintln(s.Out, "settle db: not running")
			return exitOK
		}
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
		db, err := database.Open(ctx, database.Config{URL: os.Getenv("DATABASE_URL"), NoPool: true})
		if err != nil {
			fmt.Fprintf(s.Err, "settle db: %v\n", err)
			return exitError
		}
		fmt.Fprintln(s.Out, db.URL)
		if db.Cluster != nil {
			printStillRunning(s, db.Cluster.Home, "")
		}
		return exitOK
	case "prune":
		return dbPrune(ctx, s, home, *dryRun, *unknown)
	default:
		fmt.Fprintf(s.Err, "settle db: unknown action %q (want status, stop, url or prune)\n", action)
		return exitError
	}
}

// dbStatus prints the cluster of home, then the other clusters of this
// user. The exit status is that of home's cluster: 0 running, 1 stopped.
func dbStatus(s Stdio, home string) int {
	c, running, err := pgembed.Find(home)
	if err != nil {
		fmt.Fprintf(s.Err, "settle db: %v\n", err)
		return exitError
	}
	fmt.Fprintf(s.Out, "home:     %s\ncluster:  %s\n", home, c.Dir)
	code := exitOK
	if running {
		fmt.Fprintf(s.Out, "status:   running (pid %d, port %d)\nurl:      %s\n", c.PID, c.Port, c.URL(database.DefaultDBName))
	} else {
		fmt.Fprintln(s.Out, "status:   stopped (starts on the next settle command)")
		code = exitFindings
	}
	if ns, ok := natsembed.Find(home); ok {
		fmt.Fprintf(s.Out, "nats:     running (pid %d, port %d) %s, store %s\n", ns.PID, ns.Port, ns.URL(), ns.StoreDir())
	} else if _, err := os.Stat(ns.Dir); err == nil {
		fmt.Fprintln(s.Out, "nats:     stopped (starts on the next settle command with --source nats and no NATS_URL)")
	}
	others, err := otherClusters(c.Dir)
	if err != nil {
		fmt.Fprintf(s.Err, "settle db: %v\n", err)
		return exitError
	}
	if len(others) == 0 {
		return code
	}
	fmt.Fprintln(s.Out, "\nother clusters of this user:")
	tw := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
	orphans := 0
	for _, i := range others {
		size := humanBytes(i.Size)
		if i.DirGone {
			size = "deleted"
		}
		server := "stopped"
		if i.Running {
			server = fmt.Sprintf("running (pid %d, port %d)", i.PID, i.Port)
		}
		owner := "home unknown (made by an older settle)"
		if i.Home != "" {
			owner = fmt.Sprintf("home %s (%s)", i.Home, i.HomeState)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", i.Dir, size, server, owner)
		if i.Orphaned() {
			orphans++
		}
	}
	tw.Flush()
	if orphans > 0 {
		fmt.Fprintf(s.Out, "`settle db prune` stops and removes the %d whose home is gone.\n", orphans)
	}
	return code
}

// otherClusters lists the clusters of this user but the one in current.
func otherClusters(current string) ([]pgembed.Info, error) {
	all, err := pgembed.List()
	if err != nil {
		return nil, err
	}
	var out []pgembed.Info
	for _, i := range all {
		if i.Dir != current || i.DirGone {
			out = append(out, i)
		}
	}
	return out, nil
}

// dbPrune stops and removes the orphaned clusters of this user.
func dbPrune(ctx context.Context, s Stdio, home string, dryRun, unknown bool) int {
	current, _, err := pgembed.Find(home)
	if err != nil {
		fmt.Fprintf(s.Err, "settle db: %v\n", err)
		return exitError
	}
	others, err := otherClusters(current.Dir)
	if err != nil {
		fmt.Fprintf(s.Err, "settle db: %v\n", err)
		return exitError
	}
	code, acted, kept := exitOK, 0, 0
	for _, i := range others {
		switch {
		case i.Orphaned() || (unknown && i.HomeState == pgembed.HomeUnknown):
		case i.HomeState == pgembed.HomeUnknown:
			fmt.Fprintf(s.Out, "settle db prune: left %s: made by an older settle, its home is unknown (--unknown removes it)\n", i.Dir)
			continue
		default:
			kept++
			continue
		}
		acted++
		if dryRun {
			fmt.Fprintf(s.Out, "settle db prune: %s\n", pruneLine(i, false))
			continue
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clusterStopTimeout)
		err := pgembed.Prune(pctx, i, unknown)
		cancel()
		switch {
		case errors.Is(err, pgembed.ErrInUse), errors.Is(err, pgembed.ErrNotOrphaned):
			fmt.Fprintf(s.Out, "settle db prune: left %s: %v\n", i.Dir, errors.Unwrap(err))
		case err != nil:
			fmt.Fprintf(s.Err, "settle db prune: %v\n", err)
			code = exitError
		default:
			fmt.Fprintf(s.Out, "settle db prune: %s\n", pruneLine(i, true))
		}
	}
	if acted == 0 {
		fmt.Fprintf(s.Out, "settle db prune: nothing to prune (%d other clusters whose home exists)\n", kept)
	}
	return code
}

// pruneLine says what pruning i does (done false, for --dry-run) or did.
func pruneLine(i pgembed.Info, done bool) string {
	owner := "home unknown"
	switch {
	case i.HomeState == pgembed.HomeGone:
		owner = fmt.Sprintf("home %s is gone", i.Home)
	case i.Home != "":
		owner = fmt.Sprintf("home %s %s", i.Home, i.HomeState)
	}
	if i.DirGone {
		verb := tense(done, "would stop", "stopped")
		return fmt.Sprintf("%s server pid %d, left running on deleted %s (%s)", verb, i.PID, i.Dir, owner)
	}
	verb := tense(done, "would remove", "removed")
	server := ""
	if i.Running {
		server = fmt.Sprintf("; its server, pid %d, %s first", i.PID, tense(done, "would be stopped", "stopped"))
	}
	return fmt.Sprintf("%s %s (%s; %s%s)", verb, i.Dir, humanBytes(i.Size), owner, server)
}

// tense returns past when done, future otherwise.
func tense(done bool, future, past string) string {
	if done {
		return past
	}
	return future
}

// humanBytes formats n bytes as "812 kB", "45 MB" or "1.8 GB".
func humanBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%d MB", n/1e6)
	default:
		return fmt.Sprintf("%d kB", n/1e3)
	}
}

// connect opens dbURL, else DATABASE_URL, else the embedded default (left
// running, never said), with database.Open, and checks that the database
// answers within 10 s. When the embedded cluster could not be had it says
// so on s.Err, and connect returns nil, nil.
func connect(ctx context.Context, s Stdio, dbURL string, o database.PoolOptions) (*pgxpool.Pool, error) {
	if dbURL == "" {
		dbURL = os.Getenv("DATABASE_URL")
	}
	db, err := database.Open(ctx, database.Config{URL: dbURL, Pool: o, Ping: 10 * time.Second,
		Logf: func(format string, args ...any) { fmt.Fprintf(s.Err, "settle: "+format+"\n", args...) }})
	if err != nil && dbURL == "" && db == nil {
		fmt.Fprintf(s.Err, "settle: %v\n", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return db.Pool, nil
}
