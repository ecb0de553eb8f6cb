// Package loadtest is the harness shared by the fault tests
// (internal/systemtest/faulttest) and the soak program (internal/systemtest/soak): a
// restartable PostgreSQL cluster, an in-process fakebank behind a
// switchable, counting front, a redelivering producer, a scrape of a
// worker's /metrics, and waiting for and checking the end state (through
// audit.CheckInvariants). Its functions return errors rather than take
// a *testing.T so that the soak can use them too.
//
// It owns only test machinery: nothing in settle's binaries may import it,
// and every process or cluster it starts must be stopped by its caller.
package loadtest
