package sim

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/testsupport/dbtest"
)

var (
	flagSeeds       = flag.Int("sim.seeds", 0, "number of seeds TestSimulation runs (default 200, or $SETTLE_SIM_SEEDS)")
	flagSeed        = flag.Uint64("sim.seed", 0, "run only this seed, verbosely (replay a failure)")
	flagFirst       = flag.Uint64("sim.first", 1, "first seed of the range TestSimulation runs")
	flagMargin      = flag.Duration("sim.margin", 0, "configure the engine's key TTL this much below the bank's")
	flagReturnSeeds = flag.Int("sim.returns", 2000, "number of seeds TestSimulationReturns runs")
	flagBank        = flag.String("sim.bank", "", "run every seed against this kind of bank (by-key, by-id/original-replay/list, by-id/current-replay, list-only, consent/by-id/current-replay; default: the seed's)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(dbtest.Main(m))
}

// defaultSeeds keeps the default run within about a minute on two cores.
const defaultSeeds = 400

func seedCount(t *testing.T) int {
	if *flagSeeds > 0 {
		return *flagSeeds
	}
	if s := os.Getenv("SETTLE_SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("SETTLE_SIM_SEEDS=%q is not a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return 20
	}
	return defaultSeeds
}

// truncate empties the engine's tables between two seeds on one database.
// DELETE is several times cheaper than TRUNCATE on tables this small
// (TRUNCATE makes new files for every table and index); the replica role
// lets it past the append-only triggers.
func truncate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica;
			DELETE FROM bank_statement_entries; DELETE FROM bank_statements; DELETE FROM bank_statement_files;
			DELETE FROM operator_actions; DELETE FROM ledger_movements; DELETE FROM settlement_transitions;
			DELETE FROM bank_attempts; DELETE FROM receipt_conflicts; DELETE FROM consent_authorisations; DELETE FROM settlements;
			DELETE FROM settlement_receipts; DELETE FROM event_attempts; DELETE FROM event_deliveries;
			DELETE FROM settlement_events; DELETE FROM ledger_postings; DELETE FROM ledger_holds; DELETE FROM ledger_balances; DELETE FROM ledger_accounts`)
		return err
	})
}

// TestSimulation runs the simulation for many seeds, a database per worker
// emptied between seeds, and fails with the seed, its schedule and the
// bank's log for every seed that breaks an invariant.
func TestSimulation(t *testing.T) {
	runSeeds(t, seedCount(t), func(seed uint64) Config {
		return Config{Seed: seed, KeyTTLMargin: *flagMargin, Bank: *flagBank}
	})
}

// replay runs one seed (-sim.seed) and reports it.
func replay(t *testing.T, cfg Config) {
	t.Helper()
	db := dbtest.New(t)
	res, err := Run(context.Background(), db.Pool, cfg)
	if err != nil {
		t.Fatalf("seed %d: harness error: %v", cfg.Seed, err)
	}
	t.Logf("%+v", res.Stats)
	if len(res.Violations) > 0 || testing.Verbose() {
		t.Log(res.Report())
	}
	if len(res.Violations) > 0 {
		t.Fail()
	}
}

// TestSimulationReturns runs many small schedules whose bank always
// returns payments (DESIGN.md section 15): returns in full and in part,
// at once or hours after settlement, inside and after the return watch,
// reported by the status API (as each kind of bank reports them), by
// webhook hints and by imported statements, repeated and concurrently,
// with the faults and crashes of every schedule. Each seed runs 2 to 6
// settlements, so that 2,000 schedules take about as long as the 400 of
// TestSimulation; -sim.returns sets the count (-short: 50).
func TestSimulationReturns(t *testing.T) {
	n := *flagReturnSeeds
	if testing.Short() {
		n = 50
	}
	runSeeds(t, n, func(seed uint64) Config {
		// The size turns over apart from the bank (seed modulo the number of
		// capability sets), so every bank runs every size.
		size := 2 + int(seed/uint64(len(CapabilitySets))%5)
		return Config{Seed: seed, Settlements: size, KeyTTLMargin: *flagMargin, Bank: *flagBank, Returns: true}
	})
}

// runSeeds runs the configurations cfg returns for n seeds from
// -sim.first, a database per worker emptied between seeds, and fails with
// the seed, its schedule and the bank's log for every seed that breaks an
// invariant.
func runSeeds(t *testing.T, n int, cfg func(seed uint64) Config) {
	t.Helper()
	if *flagSeed != 0 {
		replay(t, cfg(*flagSeed))
		return
	}
	ctx := context.Background()
	workers := max(runtime.GOMAXPROCS(0), 2)
	seeds := make(chan uint64)
	go func() {
		defer close(seeds)
		for i := range n {
			seeds <- *flagFirst + uint64(i)
		}
	}()
	var (
		mu       sync.Mutex
		failed   []*Result
		total    Stats
		runs     int
		start    = time.Now()
		wg       sync.WaitGroup
		harness  []error
		dbs      = make([]*dbtest.DB, workers)
		reported = 0
	)
	for w := range workers {
		dbs[w] = dbtest.New(t)
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool := dbs[w].Pool
			for seed := range seeds {
				if err := truncate(ctx, pool); err != nil {
					mu.Lock()
					harness = append(harness, fmt.Errorf("seed %d: error truncating: %w", seed, err))
					mu.Unlock()
					continue
				}
				res, err := Run(ctx, pool, cfg(seed))
				mu.Lock()
				runs++
				if err != nil {
					harness = append(harness, fmt.Errorf("seed %d: harness error: %w", seed, err))
				} else {
					total.add(res.Stats)
					if len(res.Violations) > 0 {
						failed = append(failed, res)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d schedules in %s (%.0f schedules/minute, %d workers): %+v", runs, elapsed.Round(time.Millisecond),
		float64(runs)/elapsed.Minutes(), workers, total)
	for _, err := range harness {
		t.Error(err)
	}
	if runs > 0 && len(harness) == 0 && total.Events == 0 {
		t.Error("no outcome event reached the model receiver")
	}
	if runs >= 20 && len(harness) == 0 && (total.FundsRuns == 0 || total.Refused == 0) {
		t.Errorf("%d schedules checked funds and refused %d payouts: the funds path was not exercised", total.FundsRuns, total.Refused)
	}
	for _, res := range failed {
		if reported < 2 {
			t.Error(res.Report())
		} else {
			t.Errorf("seed %d: %d violation(s), first: %s", res.Seed, len(res.Violations), res.Violations[0])
		}
		reported++
	}
}

func (s *Stats) add(o Stats) {
	s.Settlements += o.Settlements
	s.Steps += o.Steps
	s.Actors += o.Actors
	s.Crashes += o.Crashes
	s.Cancels += o.Cancels
	s.Confirmed += o.Confirmed
	s.Failed += o.Failed
	s.Flagged += o.Flagged
	s.BankPayments += o.BankPayments
	s.Rounds += o.Rounds
	s.Returns += o.Returns
	s.Partial += o.Partial
	s.Returned += o.Returned
	s.Webhooks += o.Webhooks
	s.Statements += o.Statements
	s.Consents += o.Consents
	s.Events += o.Events
	s.EventDuplicates += o.EventDuplicates
	s.FundsRuns += o.FundsRuns
	s.Refused += o.Refused
}
