package reconcile

import (
	"context"
	"strings"
	"testing"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/settlement"
)

// attemptOutcome is the op and outcome of a settlement's one bank attempt.
func attemptOutcome(t *testing.T, b *resolverBundle, id string) (op, outcome, detail string) {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*), min(op), min(outcome), min(coalesce(detail, ''))
		FROM bank_attempts WHERE settlement_id = $1`, id).Scan(&n, &op, &outcome, &detail); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%s: %d bank attempts, want one", id, n)
	}
	return op, outcome, detail
}

// TestUnsendableAmountFailsIt (issue 32, item 4): a settlement whose
// request the connector cannot build (stored before intake checked the
// limits) is a definitive refusal: recorded in bank_attempts as rejected,
// the settlement failed at once, nothing sent, nothing retried. Before,
// settle's protocol sent 2^53 (which a JSON receiver reads as another
// number) and obie's send failed with an error the job retried for ever.
func TestUnsendableAmountFailsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("settle", func(t *testing.T) {
		t.Parallel()
		b := setupResolver(t, fakebank.Faults{})
		resolvertest.InsertSettlement(t, b.db, "json-max", settle.MaxProtocolAmount)
		resolvertest.InsertSettlement(t, b.db, "json-over", settle.MaxProtocolAmount+1)
		if out, err := b.r.Send(ctx, "json-max", nil); err != nil || out.State != settlement.Sent && out.State != settlement.Confirmed {
			t.Fatalf("2^53-1: %+v, %v; want sent", out, err)
		}
		out, err := b.r.Send(ctx, "json-over", nil)
		if err != nil || out.State != settlement.Failed || !out.Done {
			t.Fatalf("2^53: %+v, %v; want failed, done", out, err)
		}
		if op, outcome, detail := attemptOutcome(t, b, "json-over"); op != bankclient.OpSend || outcome != string(AnswerRejected) || !strings.Contains(detail, "limit") {
			t.Errorf("attempt %s %s %q, want a rejected send naming the limit", op, outcome, detail)
		}
		if st := b.bank.Stats(); st.Payments != 1 {
			t.Errorf("the bank holds %d payments, want the one at the limit", st.Payments)
		}
	})
	for _, tc := range []struct {
		name   string
		amount int64
	}{
		{"over-faster-payments", 100_000_001},
		{"14-integer-digits", 100_000_000_000_000 * 100},
		{"max-int64", 1<<63 - 1},
	} {
		t.Run("obie-"+tc.name, func(t *testing.T) {
			t.Parallel()
			ob := setupOBIE(t, fakebank.Faults{}, nil)
			ob.insertOBIE(t, "ob-limit", 100_000_000)
			// Another account: the holds of one account could not sum
			// past the largest bigint.
			ob.insertOBIEFrom(t, "ob-over", tc.amount, "acc-2")
			// The consent is created and authorised at the bank; the
			// payment waits for the account holder's token.
			if out, err := ob.r.Send(ctx, "ob-limit", nil); err != nil || out.State != settlement.Pending {
				t.Fatalf("£1,000,000 before the account holder's redirect: %+v, %v; want pending", out, err)
			}
			ob.authorise(t, "ob-limit")
			if out, err := ob.r.Resolve(ctx, "ob-limit", nil); err != nil || out.State != settlement.Sent && out.State != settlement.Confirmed {
				t.Fatalf("£1,000,000: %+v, %v; want sent", out, err)
			}
			out, err := ob.r.Send(ctx, "ob-over", nil)
			if err != nil || out.State != settlement.Failed || !out.Done {
				t.Fatalf("%d pence: %+v, %v; want failed, done", tc.amount, out, err)
			}
			if op, outcome, _ := attemptOutcome(t, ob.resolverBundle, "ob-over"); op != bankclient.OpConsent || outcome != string(AnswerRejected) {
				t.Errorf("attempt %s %s, want a rejected consent", op, outcome)
			}
			if st := ob.bank.Stats(); st.Payments != 1 {
				t.Errorf("the bank holds %d payments, want the one at the limit", st.Payments)
			}
			if r := resolvertest.ReadRow(t, ob.db, "ob-over"); r.Movements != 0 || r.Unfinished != 0 {
				t.Errorf("row %+v", r)
			}
		})
	}
}
