package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/settle/settle/internal/settlecmd/worker"
)

// DefaultDBName is the database the benchmark creates (and drops) next to
// the one it is pointed at.
const DefaultDBName = "settle_bench"

// Phases are the benchmark's phases, in the order they run. The grid runs
// only when asked for (Config.Grid, or by name in Only).
var Phases = []string{"intake", "river", "e2e", "watch", "funds", "replay", "grid"}

// Config says where and how long to measure. Zero fields take the defaults
// of Full.
type Config struct {
	// URL connects to a database on the server under test; the benchmark
	// only uses it to drop and create DBName.
	URL string
	// DatabaseLabel names the server in the report ("embedded default",
	// "DATABASE_URL").
	DatabaseLabel string
	// DBName is the benchmark's own database (default DefaultDBName).
	DBName string
	// WorkerCommand starts a settle worker: the settle binary and "worker".
	// The benchmark adds --listen, --bank-url and its tuning flags, and
	// sets DATABASE_URL.
	WorkerCommand []string
	// BankConcurrency, when positive, is the worker's --bank-concurrency
	// and the River baseline's queue concurrency (default: the worker's
	// default, jobs.DefaultBankConcurrency).
	BankConcurrency int
	// WorkerCPUProfile, when set, is passed to the worker as --cpuprofile.
	WorkerCPUProfile string
	// WorkerArgs are added to the worker's command line (tuning flags for
	// experiments; the figures of record use the worker's defaults).
	WorkerArgs []string
	// WorkerPoolSize is the worker's --db-max-conns, also the River
	// baseline's pool size (default: the worker's default).
	WorkerPoolSize int
	// BankLatency is the fakebank's answer time in the second e2e run
	// (default 100 ms).
	BankLatency time.Duration

	// Only, when not empty, names the phases to run ("intake", "river",
	// "e2e", "replay"); the figures of the others stay zero. For
	// experiments: the figures of record come from a whole run.
	Only []string

	// Grid runs the intake phase (for its baseline) and the grid: e2e_per_s
	// for each of GridBatchSizes × GridBankConcurrency (defaults
	// DefaultGridBatchSizes, DefaultGridBankConcurrency).
	Grid                bool
	GridBatchSizes      []int
	GridBankConcurrency []int

	// Duration is how long each throughput loop runs.
	Duration time.Duration
	// Concurrency is how many clients the throughput loops run at once.
	Concurrency int
	// BatchSize is the number of events per batch request.
	BatchSize int
	// E2ESettlements is how many settlements the end-to-end run pays.
	E2ESettlements int
	// NoopJobs is how many no-op jobs River works in each run of its
	// baseline (each run also stops after Duration).
	NoopJobs int
	// LatencySettlements is how many settlements the e2e run against the
	// slow bank pays.
	LatencySettlements int
	// ReplaySamples is how many redeliveries are timed at each table size.
	ReplaySamples int
	// ReplayRows are the two receipt counts the replay latency is measured
	// at (default 10^4 and 10^6; the JSON names keep 1e4 and 1e6).
	ReplayRows [2]int

	// Logf receives one line per phase (default: discard).
	Logf func(format string, args ...any)
}

// Full returns the configuration of a full run.
func Full() Config {
	return Config{
		Duration:           20 * time.Second,
		Concurrency:        16,
		BatchSize:          100,
		E2ESettlements:     10000,
		NoopJobs:           20000,
		LatencySettlements: 5000,
		ReplaySamples:      5000,
		ReplayRows:         [2]int{10_000, 1_000_000},
	}
}

// Quick returns the configuration of --quick: every figure, in well under
// three minutes on a small machine.
func Quick() Config {
	c := Full()
	c.Duration = 5 * time.Second
	c.E2ESettlements = 2000
	c.NoopJobs = 10000
	c.LatencySettlements = 2000
	c.ReplaySamples = 2000
	return c
}

// withDefaults fills c's zero fields from Full.
func (c Config) withDefaults() Config {
	d := Full()
	if c.DBName == "" {
		c.DBName = DefaultDBName
	}
	if c.Duration <= 0 {
		c.Duration = d.Duration
	}
	if c.Concurrency <= 0 {
		c.Concurrency = d.Concurrency
	}
	if c.BatchSize <= 0 {
		c.BatchSize = d.BatchSize
	}
	if c.E2ESettlements <= 0 {
		c.E2ESettlements = d.E2ESettlements
	}
	if c.NoopJobs <= 0 {
		c.NoopJobs = d.NoopJobs
	}
	if c.LatencySettlements <= 0 {
		c.LatencySettlements = d.LatencySettlements
	}
	if c.BankLatency <= 0 {
		c.BankLatency = 100 * time.Millisecond
	}
	if c.ReplaySamples <= 0 {
		c.ReplaySamples = d.ReplaySamples
	}
	if c.ReplayRows[0] <= 0 || c.ReplayRows[1] <= 0 {
		c.ReplayRows = d.ReplayRows
	}
	if len(c.GridBatchSizes) == 0 {
		c.GridBatchSizes = DefaultGridBatchSizes
	}
	if len(c.GridBankConcurrency) == 0 {
		c.GridBankConcurrency = DefaultGridBankConcurrency
	}
	if c.Grid && len(c.Only) == 0 {
		c.Only = []string{"intake", "grid"}
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("error configuring the benchmark: URL is required")
	case len(c.WorkerCommand) == 0:
		return errors.New("error configuring the benchmark: WorkerCommand is required")
	case c.BatchSize > 1000 || slices.ContainsFunc(c.GridBatchSizes, func(n int) bool { return n < 1 || n > 1000 }):
		return errors.New("error configuring the benchmark: a batch size is 1 to 1000")
	case slices.ContainsFunc(c.GridBankConcurrency, func(n int) bool { return n < 1 }):
		return errors.New("error configuring the benchmark: a bank concurrency is positive")
	case c.ReplayRows[0] >= c.ReplayRows[1]:
		return errors.New("error configuring the benchmark: ReplayRows must grow")
	case slices.ContainsFunc(c.Only, func(p string) bool { return !slices.Contains(Phases, p) }):
		return fmt.Errorf("error configuring the benchmark: phases are %s", strings.Join(Phases, ", "))
	case c.ReplaySamples > c.ReplayRows[0]:
		return errors.New("error configuring the benchmark: ReplaySamples must not exceed ReplayRows[0]")
	}
	return nil
}

// workerPoolSize is the worker's pool size: WorkerPoolSize or the
// worker's default.
func (c Config) workerPoolSize() int {
	if c.WorkerPoolSize > 0 {
		return c.WorkerPoolSize
	}
	return worker.DefaultDBMaxConns
}

// riverTrialLimit bounds one run of the River search.
func (c Config) riverTrialLimit() time.Duration { return c.Duration }
