// Package intake owns the entry of a settlement into settle: decoding and
// validating a payout event, its canonical payload hash, the one receipt
// transaction, and the HTTP API of the worker (DESIGN.md section 6).
//
// The receipt transaction is the heart of exactly-once: the receipt (keyed
// by the business identity, settlement_id), the settlements row in state
// pending, its creation transition and its first River job commit together
// or not at all. A redelivery with the same payload hash is a replay that
// returns the stored outcome and writes no effect; one with another hash is
// a conflict, recorded in its own transaction and never applied.
//
// Intake must never: change settlements.state after creation (statemachine
// owns that), talk to the bank, deduplicate in process memory, acknowledge
// (201/200) anything that did not commit, interpolate event text into SQL,
// or log the API token or whole payloads. It does not import package jobs:
// it inserts jobs through the small JobInserter interface.
package intake
