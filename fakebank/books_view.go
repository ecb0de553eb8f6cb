package fakebank

import "github.com/settle/settle/bankclient"

// Books returns one page of every payment the bank holds, whatever its
// profile, as settle's own protocol reports them (the statement of DESIGN.md
// section 7), starting after the cursor. It is how a test in the same
// process reads the books of a profile whose API has no list of payments
// (obie), to check the exactly-once invariants against them.
func (b *Bank) Books(after string, limit int) (bankclient.StatementPage, error) {
	return b.statement(after, limit)
}
