package reconcile

import (
	"context"
	"fmt"

	"github.com/settle/settle/settlement"
)

// ReasonStatementMismatch: a statement line names the settlement's
// reference but pays another amount than the settlement's.
const ReasonStatementMismatch = "statement_amount_mismatch"

// DecidePaid decides what a bank statement line that pays a settlement
// (a debit carrying its reference, not a reversal) means for it: the bank
// executed the payment, so one whose outcome settle did not know (sent,
// uncertain, or pending after an attempt) is confirmed with its movement;
// another amount is flagged, never guessed; a settlement already confirmed,
// returned or failed is left as it is (the ledger-vs-statements report
// shows a failed one the bank paid). Past the bank's key window this is the
// only thing that resolves a payment whose answer was lost at a bank that
// can be asked neither by key nor by reference nor through a list (DESIGN.md
// section 13, UK Open Banking).
func DecidePaid(f Facts, amount int64, entry string) Decision {
	open := f.State == settlement.Sent || f.State == settlement.Uncertain ||
		(f.State == settlement.Pending && !f.FirstAttemptAt.IsZero())
	switch {
	case !open:
		return Decision{To: f.State, Reason: "statement: nothing to resolve"}
	case amount != f.AmountCents:
		return flag(f, ReasonStatementMismatch, fmt.Sprintf("statement line %s pays %d under the settlement's reference, the settlement is %d", entry, amount, f.AmountCents))
	default:
		return Decision{To: settlement.Confirmed, Reason: "the bank's statement shows it paid (line " + entry + ")", WriteMovement: true, Definitive: true}
	}
}

// ApplyPaid books a payment a bank statement shows (source names the
// source: "statement"): see DecidePaid. Any number of sources may report
// the same payment, in any order, at once, as the status API may too: the
// optimistic transition and UNIQUE (settlement_id, kind) book one movement.
func (r *Resolver) ApplyPaid(ctx context.Context, settlementID, source string, amount int64, entry string) (Outcome, error) {
	f, err := r.load(ctx, settlementID)
	if err != nil {
		return Outcome{}, err
	}
	d := DecidePaid(f.Facts, amount, entry)
	if !d.Moves(f.State) && d.Flag == "" {
		return Outcome{SettlementID: settlementID, From: f.State, State: f.State, Done: true}, nil
	}
	d.Reason = source + ": " + d.Reason
	out, err := r.apply(ctx, f, d, attempt{}, nil)
	out.From = f.State
	return out, err
}
