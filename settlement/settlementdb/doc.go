// Package settlementdb reads settlements from the database: the view of one
// settlement with its receipt, transitions, bank attempts and movement in
// one round trip ([LoadView]). It imports pgx and settlement only, so that
// intake can answer a replay without the heavy packages; it never writes
// (statemachine does).
package settlementdb
