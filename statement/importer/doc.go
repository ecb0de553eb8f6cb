// Package importer imports bank statement files (parsed by package
// statement) into the database, once per file, matches their lines to
// settlements, and hands a line that pays or brings back a settlement to the
// reconcile Resolver (ApplyPaid, ApplyReturn), which decides; the [Rematcher] examines the lines no settlement
// explained at import again. It never moves
// a settlement itself, and never fails one on a statement's word.
package importer
