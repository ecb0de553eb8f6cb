// Package bench is `settle bench`: it measures what a settlement costs and
// how the engine behaves as its tables grow, and measures every figure's
// baseline in the same run on the same database, so that the claim is the
// ratio, not a number that depends on the machine (DESIGN.md section 9).
//
// It owns one database of its own (DefaultDBName), dropped and created
// afresh on every run; it must never read or write any other database. It
// starts what it needs — a fakebank at zero latency with no faults, the
// intake API in-process, a `settle worker` subprocess — and stops all of it
// before Run returns.
//
// It opens its pools with database.Connect, not database.Open: the server
// is decided by the command (settle bench opens it with database.Open and
// hands Run its URL), Run creates its own database there, and each pool it
// measures on its own (openMeasured, the River no-op runs) must be one it
// closes to read its counts; there is nothing left for Open to decide.
package bench
