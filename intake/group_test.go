package intake_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/ledger"
)

// gateDB is a pool whose next Begin, once armed, waits until released: the
// transaction in flight that the events submitted meanwhile queue behind.
type gateDB struct {
	*pgxpool.Pool
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gateDB) Begin(ctx context.Context) (pgx.Tx, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.Pool.Begin(ctx)
}

// groupBundle is an intake service with one group-committed transaction
// in flight at a time, on a gated pool.
type groupBundle struct {
	db   *dbtest.DB
	gate *gateDB
	svc  *intake.Service
	// queued receives the number of events waiting each time one queues;
	// sizes receives each group's size as it commits.
	queued chan int
	sizes  chan int
}

func setupGroup(t *testing.T, fundsCheck bool) *groupBundle {
	t.Helper()
	db := dbtest.New(t)
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gate := &gateDB{Pool: db.Pool, entered: make(chan struct{}), release: make(chan struct{})}
	svc, err := intake.NewService(intake.Config{DB: gate, Jobs: jobs.Inserter{Client: client}, GroupCommit: 1, FundsCheck: fundsCheck})
	if err != nil {
		t.Fatal(err)
	}
	b := &groupBundle{db: db, gate: gate, svc: svc, queued: make(chan int, 1000), sizes: make(chan int, 1000)}
	intake.SetGroupHooks(svc, func(n int) { b.queued <- n }, func(n int) { b.sizes <- n })
	return b
}

// groupResult is one Submit's answer.
type groupResult struct {
	res intake.Result
	err error
}

// submitGrouped holds a first event's transaction at its Begin, submits
// evs concurrently while it is held, waits until every one of them is
// queued behind it, then lets it go; it returns the first event's answer
// and each of evs's, and the sizes of the groups committed.
func (b *groupBundle) submitGrouped(t *testing.T, first intake.Event, evs []intake.Event) (groupResult, []groupResult, []int) {
	t.Helper()
	ctx := context.Background()
	b.gate.armed.Store(true)
	var firstRes groupResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		firstRes.res, firstRes.err = b.svc.Submit(ctx, first)
	}()
	<-b.gate.entered
	<-b.queued // the first event itself
	out := make([]groupResult, len(evs))
	var wg sync.WaitGroup
	for i, ev := range evs {
		wg.Go(func() { out[i].res, out[i].err = b.svc.Submit(ctx, ev) })
	}
	for n := 0; n < len(evs); {
		n = <-b.queued
	}
	close(b.gate.release)
	wg.Wait()
	<-done
	close(b.sizes)
	var sizes []int
	for n := range b.sizes {
		sizes = append(sizes, n)
	}
	return firstRes, out, sizes
}

// TestGroupCommitOwnAnswers: single events submitted while a transaction
// is in flight share the next one, and each gets the answer it would have
// had alone: new ones 201, the same event twice one 201 and one replay, a
// redelivery of a stored settlement a replay (its count bumped, nothing
// created), the same id with another payload a recorded conflict.
func TestGroupCommitOwnAnswers(t *testing.T) {
	t.Parallel()
	b := setupGroup(t, false)
	ctx := context.Background()
	if _, err := b.svc.Submit(ctx, event("stored", "acc-1", 100)); err != nil {
		t.Fatal(err)
	}
	<-b.queued
	<-b.sizes

	evs := []intake.Event{
		event("new-1", "acc-1", 100), event("new-2", "acc-2", 200),
		event("twice", "acc-1", 300), event("twice", "acc-1", 300),
		event("stored", "acc-1", 100),
		event("clash", "acc-1", 400), event("clash", "acc-1", 401),
	}
	first, out, sizes := b.submitGrouped(t, event("first", "acc-1", 1), evs)
	if first.err != nil || first.res.Replayed {
		t.Fatalf("first: %+v %v", first.res, first.err)
	}
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != len(evs) {
		t.Fatalf("groups of %v, want [1 %d]", sizes, len(evs))
	}
	for i, id := range []string{"new-1", "new-2"} {
		if out[i].err != nil || out[i].res.Replayed || out[i].res.Settlement.SettlementID != id || out[i].res.Settlement.State != "pending" {
			t.Errorf("%s: %+v %v, want created", id, out[i].res, out[i].err)
		}
	}
	if out[2].err != nil || out[3].err != nil || out[2].res.Replayed == out[3].res.Replayed {
		t.Errorf("twice: %+v %v / %+v %v, want one created and one replay", out[2].res, out[2].err, out[3].res, out[3].err)
	}
	if out[4].err != nil || !out[4].res.Replayed || out[4].res.ReceivedAt.IsZero() {
		t.Errorf("stored: %+v %v, want a replay", out[4].res, out[4].err)
	}
	// The group takes the events in the order they queued: either payload
	// of clash may come first and decide.
	created, conflict := out[5], out[6]
	if created.err != nil {
		created, conflict = conflict, created
	}
	var ce *intake.ConflictError
	if created.err != nil || created.res.Replayed || !errors.As(conflict.err, &ce) || ce.SettlementID != "clash" {
		t.Errorf("clash: %+v %v / %v, want one created and one conflict", created.res, created.err, conflict.err)
	}
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 6, "settlements": 6, "settlement_transitions": 6,
		"receipt_conflicts": 1, "river_job": 6})
	var replays, replayed int
	if err := b.db.Pool.QueryRow(ctx, `SELECT
		(SELECT replay_count FROM settlement_receipts WHERE settlement_id = 'stored'),
		(SELECT replay_count FROM settlement_receipts WHERE settlement_id = 'twice')`).Scan(&replays, &replayed); err != nil {
		t.Fatal(err)
	}
	if replays != 1 || replayed != 1 {
		t.Errorf("replay counts stored=%d twice=%d, want 1 each", replays, replayed)
	}
}

// TestGroupCommitBadEventSpoilsNone: an event that fails a statement of
// the shared transaction (a settlement_id longer than the table allows,
// which only the HTTP decoder would have refused) gets the error, and the
// others of its group are taken in all the same.
func TestGroupCommitBadEventSpoilsNone(t *testing.T) {
	t.Parallel()
	b := setupGroup(t, false)
	evs := []intake.Event{
		event("ok-1", "acc-1", 100),
		event(strings.Repeat("x", 200), "acc-1", 100),
		event("ok-2", "acc-2", 100),
	}
	first, out, sizes := b.submitGrouped(t, event("first", "acc-1", 1), evs)
	if first.err != nil {
		t.Fatal(first.err)
	}
	if len(sizes) != 2 || sizes[1] != len(evs) {
		t.Fatalf("groups of %v, want [1 %d]", sizes, len(evs))
	}
	for _, i := range []int{0, 2} {
		if out[i].err != nil || out[i].res.Replayed {
			t.Errorf("%s: %+v %v, want created", evs[i].SettlementID, out[i].res, out[i].err)
		}
	}
	if out[1].err == nil || errors.Is(out[1].err, intake.ErrUnavailable) {
		t.Errorf("the bad event: %v, want the statement's error", out[1].err)
	}
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 3, "settlements": 3, "settlement_transitions": 3, "river_job": 3})
}

// TestGroupCommitFundsOneAtATime: with --funds-check, payouts of one
// account in one group are decided one at a time, each against what the
// ones before it left: of three payouts of 60 from a balance of 100, one
// is held and two are refused.
func TestGroupCommitFundsOneAtATime(t *testing.T) {
	t.Parallel()
	b := setupGroup(t, true)
	ctx := context.Background()
	if _, err := ledger.Credit(ctx, b.db.Pool, ledger.CreditRequest{AccountID: "acc-f", AmountMinor: 100, Currency: "EUR", Ref: "top-up"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.Credit(ctx, b.db.Pool, ledger.CreditRequest{AccountID: "acc-1", AmountMinor: 100, Currency: "EUR", Ref: "top-up-1"}); err != nil {
		t.Fatal(err)
	}
	evs := []intake.Event{event("f-1", "acc-f", 60), event("f-2", "acc-f", 60), event("f-3", "acc-f", 60)}
	first, out, _ := b.submitGrouped(t, event("first", "acc-1", 1), evs)
	if first.err != nil {
		t.Fatal(first.err)
	}
	var held, refused int
	for i, o := range out {
		switch {
		case o.err == nil && !o.res.Replayed:
			held++
		case errors.Is(o.err, intake.ErrInsufficientFunds):
			refused++
		default:
			t.Errorf("%s: %+v %v", evs[i].SettlementID, o.res, o.err)
		}
	}
	if held != 1 || refused != 2 {
		t.Fatalf("held %d, refused %d; want 1 and 2", held, refused)
	}
	bs, err := ledger.Balances(ctx, b.db.Pool, "acc-f")
	if err != nil || len(bs) != 1 || bs[0].Held != 60 || bs[0].Available != 40 {
		t.Fatalf("balance %+v, %v", bs, err)
	}
}
