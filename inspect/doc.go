// Package inspect is the operator's read side: what `settle reconcile` and
// the console show. The [Inspector] answers from the database alone (the
// summary, the overview, keyset pages of settlements and unmatched statement
// lines, the whole story of one settlement, the recorded conflicts and
// rejects) in READ ONLY snapshots that take no lock beyond a plain SELECT's,
// so it never blocks the worker. It also holds the stored statement lines as
// the read side shows them (statementline.go), the ledger's checks that the
// summary reports (ledgercheck.go), the operators' recorded actions
// (operator.go), the banks' worker heartbeats (bankworkers.go) and the JSON
// list writer of the CLI (jsonlist.go).
//
// It must never send anything to a bank nor change a settlement's state: it
// imports neither reconcile nor statemachine. RecordAction and BeatBanks are
// its only writes, to operator_actions and bank_workers.
package inspect
