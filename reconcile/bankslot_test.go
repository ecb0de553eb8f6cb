package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/settlement"
)

// TestClaimedSendWithoutASlotSendsNothing: a send that has claimed its
// settlement (the first attempt is durable) but cannot get a bank slot
// before its context ends (every slot busy with other sends) calls the
// bank not at all, records its attempt as finished and not sent, and
// fails. The settlement is then the lost-answer path's, as after a crash
// before the POST: it ends confirmed with one payment and one movement.
func TestClaimedSendWithoutASlotSendsNothing(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	resolvertest.InsertSettlement(t, b.db, "s-noslot", 4321)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	asked := make(chan struct{})
	slot := BankSlot{
		// Every slot is taken: the wait ends only with ctx, which the
		// test ends once the send asks (after its claim committed).
		Acquire: func(ctx context.Context) error {
			close(asked)
			<-ctx.Done()
			return ctx.Err()
		},
		Release: func() { t.Error("a slot never taken was given back") },
	}
	sctx, release := WithBankSlot(ctx, slot)
	done := make(chan error, 1)
	go func() {
		_, err := b.r.Send(sctx, "s-noslot", nil)
		release()
		done <- err
	}()
	<-asked
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Send without a slot = %v, want context.Canceled", err)
	}

	if st := b.bank.Stats(); st.Payments != 0 || st.Replays != 0 {
		t.Fatalf("the bank was called: %+v", st)
	}
	var claimed bool
	var state, outcome, detail string
	if err := b.db.Pool.QueryRow(context.Background(), `
		SELECT s.state, s.first_attempt_at IS NOT NULL, coalesce(a.outcome, ''), coalesce(a.detail, '')
		FROM settlements s JOIN bank_attempts a USING (settlement_id)
		WHERE s.settlement_id = 's-noslot' AND a.op = 'send' AND a.finished_at IS NOT NULL`).Scan(&state, &claimed, &outcome, &detail); err != nil {
		t.Fatalf("the claimed send's attempt is not recorded as finished: %v", err)
	}
	if state != string(settlement.Pending) || !claimed || outcome != "not_sent" || !strings.Contains(detail, "canceled") {
		t.Fatalf("after the failed send: state %s, claimed %v, attempt %q, detail %q", state, claimed, outcome, detail)
	}

	out := resolveUntilTerminal(t, b, "s-noslot")
	r := resolvertest.ReadRow(t, b.db, "s-noslot")
	if out.State != settlement.Confirmed || r.Movements != 1 || r.MoveAmount != 4321 || r.Unfinished != 0 {
		t.Fatalf("final: %+v, row %+v", out, r)
	}
	if st := b.bank.Stats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 || st.MaxExecutionsPerKey != 1 {
		t.Fatalf("bank stats %+v, want one payment", st)
	}
}
