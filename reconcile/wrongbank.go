package reconcile

import (
	"fmt"
)

// WrongBankError is the refusal of a Resolver asked to send, check or
// resolve a settlement bound to another bank than its own: nothing was
// asked of any bank.
type WrongBankError struct {
	SettlementID string
	// Bank is the settlement's bank; Served the Resolver's.
	Bank, Served string
}

func (e *WrongBankError) Error() string {
	return fmt.Sprintf("settlement %s belongs to bank %s, not to %s: only a worker of %s may send, check or resolve it",
		e.SettlementID, e.Bank, e.Served, e.Bank)
}
