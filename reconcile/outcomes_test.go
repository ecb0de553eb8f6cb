package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

// TestOutcomeGroupEachAsAlone records three settled answers in one shared
// transaction: one commits with its movement and its hook, one whose
// settlement another process failed meanwhile loses its race, and one
// whose hook fails gets that error. Neither spoils the others, and the
// two that did not commit wrote nothing.
func TestOutcomeGroupEachAsAlone(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	ctx := context.Background()
	r := b.r
	boom := errors.New("boom")
	var group []*outcomeWaiter
	hooked := map[string]bool{}
	for i, id := range []string{"g-ok", "g-lost", "g-hook"} {
		resolvertest.InsertSettlement(t, b.db, id, int64(100+i))
		f, err := r.load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ans := Answer{Kind: AnswerPayment, Payment: bankclient.Payment{ID: "pay-" + id, Status: bankclient.StatusSettled}}
		d := DecideSend(f.Facts, r.policy(), r.now(), ans)
		if d.To != settlement.Confirmed || !d.WriteMovement {
			t.Fatalf("decision %+v", d)
		}
		hook := func(ctx context.Context, tx pgx.Tx, out Outcome) error {
			if id == "g-hook" {
				return boom
			}
			var state string
			if err := tx.QueryRow(ctx, "SELECT state FROM settlements WHERE settlement_id = $1", id).Scan(&state); err != nil {
				return err
			}
			hooked[id] = state == "confirmed"
			return nil
		}
		group = append(group, &outcomeWaiter{ctx: ctx, o: r.prepare(ctx, f, d, attempt{}, hook), done: make(chan struct{})})
	}
	// Another process fails g-lost between its decision and its record.
	if err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "g-lost", From: settlement.Pending, To: settlement.Failed, Reason: "test"})
	}); err != nil {
		t.Fatal(err)
	}
	g := &outcomeGroup{r: r, inFlight: 1}
	var shared []int
	g.committed = func(n int) { shared = append(shared, n) }
	g.commit(group)
	byID := map[string]*outcomeWaiter{}
	for _, w := range group {
		<-w.done
		byID[w.o.f.SettlementID] = w
	}
	if len(shared) != 1 || shared[0] != 3 {
		t.Fatalf("shared commits %v, want one of 3", shared)
	}
	if w := byID["g-ok"]; w.err != nil || w.out.State != settlement.Confirmed || w.out.LostRace || !hooked["g-ok"] {
		t.Errorf("g-ok: %+v, %v, hooked %v", w.out, w.err, hooked["g-ok"])
	}
	if w := byID["g-lost"]; w.err != nil || !w.out.LostRace || w.out.State != settlement.Failed || !w.out.Done {
		t.Errorf("g-lost: %+v, %v", w.out, w.err)
	}
	if w := byID["g-hook"]; !errors.Is(w.err, boom) {
		t.Errorf("g-hook: %+v, %v", w.out, w.err)
	}
	for id, want := range map[string]resolvertest.Row{
		"g-ok":   {State: settlement.Confirmed, Movements: 1, MoveAmount: 100},
		"g-lost": {State: settlement.Failed},
		"g-hook": {State: settlement.Pending},
	} {
		got := resolvertest.ReadRow(t, b.db, id)
		if got.State != want.State || got.Movements != want.Movements || got.MoveAmount != want.MoveAmount {
			t.Errorf("%s: %+v, want %+v", id, got, want)
		}
	}
}

// TestOutcomeGroupConcurrentSends pays many settlements with concurrent
// Sends whose outcomes share transactions: each is confirmed once, with
// its movement, its hook run in the transaction that recorded it.
func TestOutcomeGroupConcurrentSends(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	b.r.ClaimGroup, b.r.OutcomeGroup = 1, 1
	const n = 24
	for i := range n {
		resolvertest.InsertSettlement(t, b.db, fmt.Sprintf("cs-%02d", i), int64(100+i))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	hooked := map[string]int{}
	for i := range n {
		id := fmt.Sprintf("cs-%02d", i)
		wg.Go(func() {
			out, err := b.r.Send(context.Background(), id, func(ctx context.Context, tx pgx.Tx, out Outcome) error {
				var movements int
				if err := tx.QueryRow(ctx, "SELECT count(*) FROM ledger_movements WHERE settlement_id = $1", id).Scan(&movements); err != nil {
					return err
				}
				mu.Lock()
				hooked[id] += movements
				mu.Unlock()
				return nil
			})
			if err != nil || out.State != settlement.Confirmed {
				t.Errorf("%s: %+v, %v", id, out, err)
			}
		})
	}
	wg.Wait()
	for i := range n {
		id := fmt.Sprintf("cs-%02d", i)
		if r := resolvertest.ReadRow(t, b.db, id); r.State != settlement.Confirmed || r.Movements != 1 || r.Unfinished != 0 || hooked[id] != 1 {
			t.Errorf("%s: %+v, hooked %d", id, r, hooked[id])
		}
	}
	if st := b.bank.Stats(); st.Payments != n || st.MaxPaymentsPerReference != 1 {
		t.Fatalf("bank stats %+v", st)
	}
	resolvertest.CheckAgainst(t, b.db, b.r.Bank)
}
