// Package e2e holds settle's multi-process tests: `settle worker`
// subprocesses killed at the crash points of DESIGN.md section 5 and
// restarted, several workers sharing one database, against an in-process
// fakebank, with the exactly-once invariants checked in SQL and at the bank.
//
// It owns only tests. It must never be imported, and no process it starts
// may outlive its test.
package e2e
