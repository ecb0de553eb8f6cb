// Package reconcile sends payments to the bank and resolves what became of
// them. It holds the pure decision functions (given a settlement's state,
// its first attempt, the key TTL, the clock and the bank's answer: which
// transition, whether to write the ledger movement, whether to resend,
// whether to flag it for a human, when to look again; decide.go,
// consent.go, paid.go) and the [Resolver] that carries them out against the
// database and the bank: it sends, asks, resolves and applies returns and
// statement lines (resolver.go); the sweep's claim of due settlements
// (sweep.go) and the lookup of a bank webhook's settlement (hint.go).
//
// It must never change settlements.state except through statemachine, never
// write a ledger movement outside the transaction that moves the settlement
// to confirmed, never mark a settlement failed because the bank could not be
// reached, never send a payment under any key but the settlement's stable
// bank_key, and never resend once the key TTL has passed since the first
// attempt (DESIGN.md rules 5, 8, 9). It knows nothing about River (the jobs
// package adapts it) and nothing of the read side (inspect), the reports
// (audit) or statement files (statement/importer): they import it, never the
// reverse.
package reconcile
