// Package audit checks settle against the outside world and against its own
// rules: the streaming ledger-vs-bank report ([BankReporter], `settle
// reconcile bank`), the report against imported bank statements
// ([StatementReporter]), their JSON ([BankJSON]), and the one exactly-once
// invariant checker ([CheckInvariants]) that the simulation, the fault tests
// and the end-to-end tests run.
//
// It reads; it never sends a payment nor changes a settlement (it imports
// neither reconcile nor statemachine's writers). It builds on inspect for
// the stored statement lines and the ledger's checks.
package audit
