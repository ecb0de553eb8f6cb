package reconcile

import (
	"testing"
	"time"

	"github.com/settle/settle/settlement"
)

// TestDecidePaid is DecidePaid's table.
func TestDecidePaid(t *testing.T) {
	t.Parallel()
	confirm := Decision{To: settlement.Confirmed, WriteMovement: true, Definitive: true}
	mismatch := Decision{To: settlement.Uncertain, Flag: ReasonStatementMismatch}
	for _, tt := range []struct {
		name string
		f    Facts
		line LineFacts
		want Decision
	}{
		{"sent", facts0(settlement.Sent, t0), line(minor(1000), "EUR", ""), confirm},
		{"uncertain", facts0(settlement.Uncertain, t0), line(minor(1000), "EUR", ""), confirm},
		{"pending after an attempt", facts0(settlement.Pending, t0), line(minor(1000), "EUR", ""), confirm},
		{"another amount", facts0(settlement.Sent, t0), line(minor(999), "EUR", ""), mismatch},
		{"another currency", facts0(settlement.Uncertain, t0), line(minor(1000), "JPY", ""), mismatch},
		{"no amount", facts0(settlement.Sent, t0), line(nil, "EUR", ""), mismatch},
		{"zero", facts0(settlement.Uncertain, t0), line(minor(0), "EUR", ""), mismatch},
		{"a debit marked as a return", facts0(settlement.Uncertain, t0), line(minor(1000), "EUR", "AC04"), Decision{To: settlement.Uncertain}},
		{"a reversal", facts0(settlement.Sent, t0), LineFacts{AmountMinor: minor(1000), Currency: "EUR", Reversal: true}, Decision{To: settlement.Sent}},
		{"never attempted", facts0(settlement.Pending, time.Time{}), line(minor(1000), "EUR", ""), Decision{To: settlement.Pending}},
		{"already confirmed", facts0(settlement.Confirmed, t0), line(minor(1000), "EUR", ""), Decision{To: settlement.Confirmed}},
		{"failed stays failed", facts0(settlement.Failed, t0), line(minor(1000), "EUR", ""), Decision{To: settlement.Failed}},
		{"returned stays returned", facts0(settlement.Returned, t0), line(minor(1000), "EUR", ""), Decision{To: settlement.Returned}},
	} {
		got := DecidePaid(tt.f, tt.line)
		got.Reason = ""
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
