// Package sim is settle's deterministic simulation (DESIGN.md section 11):
// for a seed it generates a schedule of settlements, redeliveries,
// conflicting payloads, sends, status checks, clock jumps, bank faults,
// crashes and returns of settled payments (reported by the status API as
// each kind of bank reports them, by webhook hints and by imported camt.054
// statements, in full or in part, before or after confirmation) and, at a
// bank whose payments need a consent first (UK Open Banking), consents
// authorised after a while, rejected or never decided by the customer,
// runs the
// real engine (intake.Service and reconcile.Resolver)
// against a real PostgreSQL database and an in-memory model of the bank
// ([Bank]), then checks the exactly-once invariants in SQL and against the
// bank's books (audit.CheckInvariants, which on every schedule includes
// the ledger's: balances sum to zero per currency, each settlement's
// postings and hold match its state, kept balances equal the sums of
// postings and open holds), and at a consent bank the
// checks of the consent step (consentChecks). The outcome events are
// relayed (events.Relay) every fourth step to a model receiver that
// refuses some deliveries and loses the answer to others, as the seed
// says; at the end the relay is drained and each settlement's events must
// have reached it complete, once each after deduplication, and in order
// (events.go).
//
// It owns the simulated bank, the simulated clock, the cooperative
// scheduler that interleaves several engine calls at the granularity of
// their database statements and bank calls ([scheduler]), the driver
// ([Run]) and the checker.
//
// Determinism: every random decision is drawn from one math/rand/v2 source
// seeded by the seed, time comes from [Clock], and although engine calls run
// on goroutines, exactly one of them runs at any moment; the scheduler picks
// the next one with the seeded source at each database statement or bank
// call outside a transaction. A transaction is never preempted, so two
// simulated calls never wait on each other's row locks. The same seed
// therefore replays the same schedule against the same engine code.
//
// Running it:
//
//	go test ./internal/sim                                  # 400 seeds, and 2,000 small return schedules (-short: 20, 50)
//	go test ./internal/sim -run 'TestSimulationReturns$' -sim.returns=10000
//	go test ./internal/sim -run 'TestSimulation$' -sim.seeds=5000
//	SETTLE_SIM_SEEDS=5000 go test ./internal/sim -run 'TestSimulation$'
//	go test ./internal/sim -run 'TestSimulation$' -sim.seed=86 -v   # replay one seed, print its schedule
//
// -sim.first=N starts the range elsewhere; -sim.margin=D configures the
// engine's key TTL D below the bank's. keyttl_test.go keeps the smallest
// schedule of the key-TTL boundary double payment the simulation found.
//
// It must never change the engine's behaviour to make a schedule pass: it
// reaches the engine only through the engine's exported APIs and the
// interfaces the engine already takes (the database, the bank, the clock),
// and it never writes the engine's tables except to plant violations in the
// checker's own tests.
package sim
