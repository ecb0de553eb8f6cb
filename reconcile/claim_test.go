package reconcile

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/settlement"
)

// gateDB is a DB whose next Begin, once armed, waits until released.
type gateDB struct {
	DB
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gateDB) Begin(ctx context.Context) (pgx.Tx, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.DB.Begin(ctx)
}

// TestSendClaimGroup: sends that run while a claim transaction is in
// flight share the next claim (one statement, one commit, one started_at
// for their attempts); each settlement is still claimed once, paid once
// and confirmed once, and a settlement sent twice at once is claimed by
// one shared claim at most.
func TestSendClaimGroup(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	gate := &gateDB{DB: b.db.Pool, entered: make(chan struct{}), release: make(chan struct{})}
	b.r.DB = gate
	queued := make(chan int, 100)
	b.r.ClaimGroup = 1
	b.r.claimsOnce.Do(func() { b.r.claims = &claimGroup{r: b.r, inFlight: 1, queued: func(n int) { queued <- n }} })
	ctx := context.Background()

	const n = 12
	for i := range n + 1 {
		resolvertest.InsertSettlement(t, b.db, fmt.Sprintf("grp-%02d", i), int64(100+i))
	}

	gate.armed.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := b.r.Send(ctx, "grp-00", nil)
		first <- err
	}()
	<-gate.entered
	<-queued
	ids := []string{"grp-01"} // grp-01 twice
	for i := 1; i <= n; i++ {
		ids = append(ids, fmt.Sprintf("grp-%02d", i))
	}
	outs := make([]Outcome, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { outs[i], errs[i] = b.r.Send(ctx, id, nil) })
	}
	for k := 0; k < len(ids); {
		k = <-queued
	}
	close(gate.release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("%s: %v", id, errs[i])
		}
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("grp-%02d", i)
		r := resolvertest.ReadRow(t, b.db, id)
		if r.State != settlement.Confirmed || r.Movements != 1 || r.MoveAmount != int64(100+i) || r.Unfinished != 0 {
			t.Errorf("%s: %+v", id, r)
		}
	}
	// The first claim ran alone; the n others shared one (grp-01's second
	// send a later one, or none if the first had moved it on).
	var shared int
	if err := b.db.Pool.QueryRow(ctx, `SELECT max(c) FROM (SELECT count(*) AS c FROM bank_attempts WHERE op = 'send' GROUP BY started_at) x`).Scan(&shared); err != nil {
		t.Fatal(err)
	}
	if shared < n {
		t.Errorf("the largest shared claim took %d sends, want at least %d", shared, n)
	}
	if st := b.bank.Stats(); st.MaxPaymentsPerReference != 1 {
		t.Errorf("bank %+v", st)
	}
	resolvertest.CheckAgainst(t, b.db, b.r.Bank)
}
