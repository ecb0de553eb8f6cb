package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/migrations"
)

// benchAppName is the application_name of the benchmark's own pool.
const benchAppName = "settle-bench"

// Run measures every figure of Result and stops everything it started
// before it returns. It drops and recreates cfg.DBName first.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	benchURL, err := recreateDatabase(ctx, cfg.URL, cfg.DBName)
	if err != nil {
		return nil, err
	}
	cfg.Logf("database %s created", cfg.DBName)

	trips := &tripCounter{}
	pool, err := database.Connect(ctx, benchURL, database.PoolOptions{
		MaxConns: int32(max(20, cfg.Concurrency+4)), ApplicationName: benchAppName})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return nil, fmt.Errorf("error migrating %s: %w", cfg.DBName, err)
	}

	r := &Result{Concurrency: cfg.Concurrency, DurationS: cfg.Duration.Seconds(), BatchSize: cfg.BatchSize,
		BankConcurrency: cfg.BankConcurrency, ReplayRows: cfg.ReplayRows}
	if r.BankConcurrency <= 0 {
		r.BankConcurrency = jobs.DefaultBankConcurrency
	}
	cfg.BankConcurrency = r.BankConcurrency
	if err := pool.QueryRow(ctx, "SHOW fsync").Scan(&r.Fsync); err != nil {
		return nil, fmt.Errorf("error reading fsync: %w", err)
	}
	r.Database = cfg.DatabaseLabel

	// Each phase starts from empty settle tables, so one phase's rows and
	// jobs never weigh on the next. A phase that fails says which it was.
	phases := []struct {
		name string
		run  func() error
	}{
		{"intake", func() error { return measureIntake(ctx, cfg, pool, benchURL, trips, r) }},
		{"river", func() error { return measureRiver(ctx, cfg, pool, benchURL, r) }},
		{"e2e", func() error { return measureE2E(ctx, cfg, pool, benchURL, trips, r) }},
		{"watch", func() error { return measureLife(ctx, cfg, pool, benchURL, r) }},
		{"funds", func() error { return measureFunds(ctx, cfg, pool, benchURL, r) }},
		{"replay", func() error { return measureReplay(ctx, cfg, pool, benchURL, r) }},
		{"grid", func() error { return measureGrid(ctx, cfg, pool, benchURL, r) }},
	}
	for i, p := range phases {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, p.name) || len(cfg.Only) == 0 && p.name == "grid" {
			continue
		}
		if i > 0 {
			if err := truncate(ctx, pool); err != nil {
				return nil, fmt.Errorf("before the %s phase: %w", p.name, err)
			}
		}
		t0 := time.Now()
		if err := p.run(); err != nil {
			return nil, fmt.Errorf("the %s phase failed after %s: %w", p.name, time.Since(t0).Round(time.Millisecond), err)
		}
	}
	r.computeTargets()
	return r, nil
}

// recreateDatabase drops and creates database name on the server of
// adminURL and returns a URL to it. It refuses to touch the database
// adminURL itself points at.
func recreateDatabase(ctx context.Context, adminURL, name string) (string, error) {
	pc, err := pgx.ParseConfig(adminURL)
	if err != nil {
		return "", fmt.Errorf("error parsing the database URL: %w", err)
	}
	if pc.Database == name {
		return "", fmt.Errorf("error preparing the benchmark: the database URL points at %s itself; point it at another database on the same server", name)
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("error connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("error dropping database %s: %w", name, err)
	}
	if err := database.CreateDatabase(ctx, adminURL, name, ""); err != nil {
		return "", err
	}
	return replaceDB(adminURL, name), nil
}

// DropDatabase removes the benchmark's database (for tests and cleanup).
func DropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("error connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("error dropping database %s: %w", name, err)
	}
	return nil
}

// replaceDB returns connection string u pointing at database db; u may be a
// URL or a keyword/value string.
func replaceDB(u, db string) string {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		if pu, err := url.Parse(u); err == nil {
			pu.Path = "/" + db
			return pu.String()
		}
	}
	return u + " dbname=" + db
}

// truncate empties settle's tables and River's jobs. CASCADE also empties
// every table that references settlements (imported statement lines,
// operator actions) and the outcome events' deliveries, which TRUNCATE
// otherwise refuses; the benchmark's database is its own. The event sinks
// go too: a run with a sink leaves none behind for the next.
func truncate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `TRUNCATE settlement_receipts, settlements, settlement_transitions, ledger_movements,
		receipt_conflicts, bank_attempts, settlement_events, event_sinks, ledger_postings, ledger_holds, ledger_balances, ledger_accounts,
		river_job CASCADE`)
	if err != nil {
		return fmt.Errorf("error emptying the benchmark tables: %w", err)
	}
	return nil
}

// loop runs fn from n goroutines until d has passed and returns how many
// units of work they did (fn returns its units) and the elapsed time.
func loop(parent context.Context, n int, d time.Duration, fn func(ctx context.Context, worker, i int) (int, error)) (int64, time.Duration, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	deadline := time.Now().Add(d)
	counts := make([]int64, n)
	errs := make(chan error, n)
	start := time.Now()
	for w := range n {
		go func() {
			for i := 0; time.Now().Before(deadline); i++ {
				units, err := fn(ctx, w, i)
				if err != nil {
					cancel()
					errs <- err
					return
				}
				counts[w] += int64(units)
			}
			errs <- nil
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	}
	elapsed := time.Since(start)
	if first == nil {
		first = parent.Err()
	}
	var total int64
	for _, c := range counts {
		total += c
	}
	return total, elapsed, first
}
