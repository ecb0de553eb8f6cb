// Package settlement holds the plain domain types of settle: the states of
// a settlement, the settlement as stored and shown, its history, its bank
// progress, its ledger movements, ISO 4217 currencies, and the sentinel
// errors every other package matches with errors.Is.
//
// It imports only the standard library, and every other package points at
// it (as River's rivertype does). It must never reach a database, the
// network or a clock: it describes things, it does not do them.
package settlement
