// Package faulttest proves that settle survives faults outside the engine:
// a PostgreSQL server that restarts under load (fast and immediate
// shutdown), a bank that is unreachable for a while, intake overload, and
// hostile HTTP clients. Its tests run `settle worker` subprocesses against
// private PostgreSQL clusters and an in-process fakebank behind a switchable,
// counting front, and check the exactly-once invariants in SQL and at the
// bank afterwards.
//
// The non-test files are the harness those tests and the soak program
// (internal/soak) share: a restartable cluster, the switchable bank, a
// redelivering producer, a scrape of a worker's /metrics and the invariant
// checks (the worker subprocesses are internal/workerproc's). They
// report errors rather than taking a *testing.T so that the soak can use
// them too.
//
// It owns only test machinery: nothing in settle's binaries may import it,
// and every process or cluster it starts must be stopped by its caller.
package faulttest
