// Package faulttest proves that settle survives faults outside the engine:
// a PostgreSQL server that restarts under load (fast and immediate
// shutdown), a bank that is unreachable for a while, intake overload, and
// hostile HTTP clients. Its tests run `settle worker` subprocesses against
// private PostgreSQL clusters and an in-process fakebank behind a
// switchable, counting front (internal/testsupport/loadtest), and check the
// exactly-once invariants in SQL and at the bank afterwards
// (audit.CheckInvariants).
//
// It holds tests only.
package faulttest
