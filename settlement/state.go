package settlement

// State is the state of a settlement (DESIGN.md section 3).
type State string

// The six states.
const (
	// Pending: received, not yet sent to the bank (or to be sent again).
	Pending State = "pending"
	// Sent: the bank accepted the instruction; it has not settled yet.
	Sent State = "sent"
	// Uncertain: the bank gave no definitive answer; only its status API
	// resolves it.
	Uncertain State = "uncertain"
	// Confirmed: the bank settled the payment; the payout movement is
	// written. A bank can still return the money later.
	Confirmed State = "confirmed"
	// Failed: the bank refused or failed the payment; no movement.
	Failed State = "failed"
	// Returned: a settled payment came back; a reversal movement undoes
	// the payout.
	Returned State = "returned"
)

// States lists every state in lifecycle order.
var States = []State{Pending, Sent, Uncertain, Confirmed, Failed, Returned}

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	switch s {
	case Pending, Sent, Uncertain, Confirmed, Failed, Returned:
		return true
	}
	return false
}

// Terminal reports whether the payment instruction is finished: the bank
// confirmed, failed or returned it. Failed and Returned never change
// again; Confirmed can still become Returned when the money comes back.
func (s State) Terminal() bool { return s == Confirmed || s == Failed || s == Returned }
