package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/motoserver"
	"github.com/settle/settle/internal/settlecmd/bench"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, bintest.Cleanup)) }

// requiredFields are the figures issues 8 and 19 ask of every run.
var requiredFields = []string{
	"intake_single_per_s", "intake_batch_per_s", "insert_baseline_per_s", "e2e_per_s",
	"river_noop_jobs_per_s", "jobs_per_settlement", "replay_p50_us_1e4", "replay_p99_us_1e4",
	"replay_p50_us_1e6", "replay_p99_us_1e6", "worker_peak_rss_mb",
	"river_noop_best_jobs_per_s", "e2e_latency100_per_s", "e2e_latency100_bound_per_s",
	"commits_per_settlement", "round_trips_per_event", "source_nats_per_s", "source_nats_broker_per_s", "source_kafka_per_s", "source_sqs_per_s",
	"e2e_events_per_s", "e2e_no_events_per_s", "events_delivered_per_s", "events_per_settlement",
	"e2e_funds_per_s", "e2e_no_funds_per_s", "e2e_funds_hot_per_s", "e2e_hot_per_s",
	"wal_bytes_per_settlement", "bank_calls_per_settlement", "worker_cpu_s_per_1k_settlements",
	"postgres_cpu_s_per_1k_settlements", "e2e_confirm_p50_ms", "e2e_confirm_p99_ms",
	"e2e_latency10_per_s", "e2e_latency10_bound_per_s", "e2e_latency1000_per_s", "e2e_latency1000_bound_per_s",
	"life_return_watch_s", "life_bank_calls_per_settlement", "life_wal_bytes_per_settlement", "life_rows_per_settlement",
	"life_commits_per_settlement", "life_jobs_per_settlement",
	"life_own_checks_bank_calls_per_settlement", "life_own_checks_wal_bytes_per_settlement",
	"life_own_checks_rows_per_settlement", "life_own_checks_commits_per_settlement", "life_own_checks_jobs_per_settlement",
	"settlements_per_job", "e2e_latency100_reachable_per_s",
}

// benchDB is the admin URL of the test cluster and the name of a
// benchmark database dropped when the test ends, and a context that ends
// in six minutes.
func benchDB(t *testing.T, prefix string) (admin, name string, ctx context.Context) {
	t.Helper()
	admin = dbtest.AdminURL(t)
	name = fmt.Sprintf("%s_%d", prefix, os.Getpid())
	t.Cleanup(func() {
		if err := bench.DropDatabase(context.Background(), admin, name); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	return admin, name, ctx
}

// TestRunTiny runs every phase of the benchmark in a tiny configuration and
// checks that every figure is present and positive. It asserts nothing
// about speed.
func TestRunTiny(t *testing.T) {
	t.Parallel()
	admin, name, ctx := benchDB(t, "settle_bench_test")
	res, err := bench.Run(ctx, bench.Config{
		URL:                admin,
		DBName:             name,
		DatabaseLabel:      "test",
		WorkerCommand:      []string{bintest.Build(t), "worker"},
		Duration:           200 * time.Millisecond,
		Concurrency:        2,
		BatchSize:          10,
		E2ESettlements:     25,
		NoopJobs:           50,
		LatencySettlements: 25,
		BankLatency:        20 * time.Millisecond,
		ReplaySamples:      20,
		ReplayRows:         [2]int{100, 1000},
		Logf:               t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}

	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, f := range requiredFields {
		if _, err := motoserver.Path(); f == "source_sqs_per_s" && err != nil && os.Getenv("CI") != "true" {
			t.Logf("source_sqs_per_s not checked: %v", err) // CI has it
			continue
		}
		v, ok := got[f].(float64)
		if !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", f, got[f])
		}
	}
	if v, ok := got["e2e_db_commits_per_settlement"].(float64); !ok || v <= 0 {
		t.Errorf("e2e_db_commits_per_settlement = %v, want the old key kept", got["e2e_db_commits_per_settlement"])
	}
	if len(res.Targets) != 15 {
		t.Errorf("got %d targets, want 15: %+v", len(res.Targets), res.Targets)
	}
	if s, ok := got["river_best_settings"].(string); !ok || !strings.Contains(s, "MaxWorkers") {
		t.Errorf("river_best_settings = %v, want the settings of the best River run", got["river_best_settings"])
	}
	if search, ok := got["river_search"].([]any); !ok || len(search) < 2 {
		t.Errorf("river_search = %v, want every run of the search", got["river_search"])
	}
	if res.EventsPerSettlement < 2 { // pending and confirmed at least
		t.Errorf("events_per_settlement = %v, want each settlement's events delivered", res.EventsPerSettlement)
	}
	if res.JobsPerSettlement <= 0 {
		// A send_batch job sends many settlements: fewer jobs than
		// settlements, never none.
		t.Errorf("jobs_per_settlement = %v, want the settlements sent by jobs", res.JobsPerSettlement)
	}
	// Which of the two watches costs less is a measurement (BENCHMARKS.md),
	// not asserted here: in a run this small, on a loaded machine, the
	// sweep and the lease move either side. That a round writes nothing
	// for a settlement nothing happened to is proven in reconcile's
	// TestWatch tests, counted in SQL. Here: both were measured.
	if res.LifeBankCallsPerSettlement <= 0 || res.LifeOwnChecksBankCallsPerSettlement <= 0 ||
		res.LifeRowsPerSettlement <= 0 || res.LifeOwnChecksRowsPerSettlement <= 0 {
		t.Errorf("the watch phase measured %.2f bank calls and %.1f rows per settlement in rounds, %.2f and %.1f with own checks: want every figure",
			res.LifeBankCallsPerSettlement, res.LifeRowsPerSettlement, res.LifeOwnChecksBankCallsPerSettlement, res.LifeOwnChecksRowsPerSettlement)
	}

	var table bytes.Buffer
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, f := range append(requiredFields, "intake_single", "replay_growth", "worker_rss", "e2e_commit_bound", "e2e_river", "e2e_latency100", "e2e_latency100_reachable", "e2e_latency10", "e2e_latency1000", "source_nats", "source_nats_reachable", "source_kafka", "e2e_events", "e2e_funds") {
		if !strings.Contains(table.String(), f) {
			t.Errorf("table lacks %s:\n%s", f, table.String())
		}
	}
}

// TestRunGridTiny runs the grid in a tiny configuration: one cell per
// batch size and bank concurrency, each with its figures, and the
// Markdown table.
func TestRunGridTiny(t *testing.T) {
	t.Parallel()
	admin, name, ctx := benchDB(t, "settle_bench_grid_test")
	res, err := bench.Run(ctx, bench.Config{
		URL: admin, DBName: name, DatabaseLabel: "test", WorkerCommand: []string{bintest.Build(t), "worker"},
		Duration: 200 * time.Millisecond, Concurrency: 2, BatchSize: 10, E2ESettlements: 20,
		Grid: true, GridBatchSizes: []int{5, 20}, GridBankConcurrency: []int{4},
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Grid) != 2 || res.InsertBaselinePerS <= 0 || res.E2EPerS != 0 {
		t.Fatalf("grid %+v, insert baseline %v, e2e_per_s %v: want two cells, the baseline and no other phase", res.Grid, res.InsertBaselinePerS, res.E2EPerS)
	}
	for _, c := range res.Grid {
		if c.E2EPerS <= 0 || c.CommitsPerSettlement <= 0 || c.WALBytesPerSettlement <= 0 || c.BankConcurrency != 4 {
			t.Errorf("grid cell %+v: want every figure", c)
		}
	}
	var table bytes.Buffer
	if err := res.WriteGrid(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "| intake batch |") || strings.Count(table.String(), "\n") != 4 {
		t.Errorf("grid table:\n%s", table.String())
	}
}

// TestRunRefusesItsOwnURL checks that the benchmark never drops the
// database it was pointed at.
func TestRunRefusesItsOwnURL(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	_, err := bench.Run(context.Background(), bench.Config{URL: db.URL, DBName: db.Name, WorkerCommand: []string{"settle", "worker"}})
	if err == nil || !strings.Contains(err.Error(), "points at") {
		t.Fatalf("Run on its own database: err = %v, want a refusal", err)
	}
	var one int
	if err := db.Pool.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the database was touched: %v", err)
	}
}
