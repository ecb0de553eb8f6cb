package reconcile

import (
	"context"
	"fmt"

	"github.com/settle/settle/settlement"
)

// ReasonStatementMismatch: a statement line names the settlement's
// reference but its amount is unknown or zero, or it is in another
// currency or for another amount than the settlement's: nothing is booked.
const ReasonStatementMismatch = "statement_amount_mismatch"

// LineFacts is what one bank statement line says about the payment it
// names by reference.
type LineFacts struct {
	// Line names the line in reasons: its statement and position in the
	// file, and the bank's reference of the entry.
	Line string
	// AmountMinor is the line's amount in Currency; nil when the bank
	// gives it only in another currency.
	AmountMinor *int64
	Currency    string
	// Reversal and ReturnReason are the line's return information (camt
	// RvslInd and RtrInf, MT940 RC/RD and /RTRN/, the BAI2 return item
	// types).
	Reversal     bool
	ReturnReason string
}

// Marked reports whether the line carries return information.
func (l LineFacts) Marked() bool { return l.Reversal || l.ReturnReason != "" }

// amountProblem says what keeps the line from booking for f (amount and
// currency must both be the settlement's): "" when nothing does.
func (l LineFacts) amountProblem(f Facts) string {
	switch {
	case l.AmountMinor == nil:
		return fmt.Sprintf("statement line %s under the settlement's reference carries no amount in %s: nothing booked", l.Line, l.Currency)
	case *l.AmountMinor == 0:
		return fmt.Sprintf("statement line %s under the settlement's reference is for an amount of zero: nothing booked", l.Line)
	case l.Currency != f.Currency:
		return fmt.Sprintf("statement line %s is in another currency: %d %s under the settlement's reference, the settlement is %d %s: nothing booked",
			l.Line, *l.AmountMinor, l.Currency, f.AmountCents, f.Currency)
	case *l.AmountMinor != f.AmountCents:
		return fmt.Sprintf("statement line %s is for another amount: %d %s under the settlement's reference, the settlement is %d %s: nothing booked",
			l.Line, *l.AmountMinor, l.Currency, f.AmountCents, f.Currency)
	}
	return ""
}

// DecidePaid decides what a bank statement line that pays a settlement
// (a debit carrying its reference) means for it: the bank executed the
// payment, so one whose outcome settle did not know (sent, uncertain, or
// pending after an attempt) is confirmed with its movement, when the line
// is for the settlement's amount in its currency; an unknown or zero
// amount, another currency or another amount is flagged, never guessed; a
// debit marked as a return or reversal pays nothing; a settlement already
// confirmed, returned or failed is left as it is (the ledger-vs-statements
// report shows a failed one the bank paid). Past the bank's key window
// this is the only thing that resolves a payment whose answer was lost at
// a bank that can be asked neither by key nor by reference nor through a
// list (DESIGN.md section 13, UK Open Banking).
func DecidePaid(f Facts, l LineFacts) Decision {
	open := f.State == settlement.Sent || f.State == settlement.Uncertain ||
		(f.State == settlement.Pending && !f.FirstAttemptAt.IsZero())
	if !open {
		return Decision{To: f.State, Reason: "statement: nothing to resolve"}
	}
	if l.Marked() {
		return Decision{To: f.State, Reason: "statement line " + l.Line + " is a debit marked as a return or reversal: it pays nothing"}
	}
	if p := l.amountProblem(f); p != "" {
		return flag(f, ReasonStatementMismatch, p)
	}
	return Decision{To: settlement.Confirmed, Reason: "the bank's statement shows it paid (line " + l.Line + ")", WriteMovement: true, Definitive: true}
}

// ApplyPaid books a payment a bank statement shows (source names the
// source: "statement"): see DecidePaid. Any number of sources may report
// the same payment, in any order, at once, as the status API may too: the
// optimistic transition and UNIQUE (settlement_id, kind) book one movement.
func (r *Resolver) ApplyPaid(ctx context.Context, settlementID, source string, l LineFacts) (Outcome, error) {
	f, err := r.load(ctx, settlementID)
	if err != nil {
		return Outcome{}, err
	}
	d := DecidePaid(f.Facts, l)
	if !d.Moves(f.State) && d.Flag == "" {
		return Outcome{SettlementID: settlementID, From: f.State, State: f.State, Done: true}, nil
	}
	d.Reason = source + ": " + d.Reason
	out, err := r.apply(WithSource(ctx, settlement.Source(source)), f, d, attempt{}, nil)
	out.From = f.State
	return out, err
}
