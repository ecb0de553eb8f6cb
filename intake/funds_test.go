package intake_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/ledger"
)

// credit brings amount EUR into account.
func credit(t *testing.T, b *testBundle, account string, amount int64, ref string) {
	t.Helper()
	if _, err := ledger.Credit(context.Background(), b.db.Pool, ledger.CreditRequest{AccountID: account, AmountMinor: amount, Currency: "EUR", Ref: ref}); err != nil {
		t.Fatal(err)
	}
}

// event is a payout of amount EUR from account.
func event(id, account string, amount int64) intake.Event {
	return intake.Event{SettlementID: id, AccountID: account, AmountCents: amount, Currency: "EUR", Beneficiary: "DE89 3704 0044 0532 0130 00"}
}

func checkLedger(t *testing.T, b *testBundle) {
	t.Helper()
	ms, err := inspect.LedgerMismatches(context.Background(), b.db.Pool)
	if err != nil || len(ms) != 0 {
		t.Fatalf("ledger mismatches %v, %v", ms, err)
	}
}

// TestFundsCheck: with --funds-check a payout the available balance does
// not cover is answered 422 insufficient-funds, holds nothing and is
// recorded, so its redelivery gets the same answer even once the account
// has the money; a covered one is held; the same id with another payload
// is a conflict.
func TestFundsCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fundsCheck: true})
	credit(t, b, "acc-1", 20000, "top-up-1")

	if r := b.post(t, mustJSON(t, eventFields("pays"))); r.status != http.StatusCreated {
		t.Fatalf("covered payout: %d %s", r.status, r.raw)
	}
	refused := b.post(t, mustJSON(t, eventFields("too-much")))
	if refused.status != http.StatusUnprocessableEntity || refused.body["type"] != intake.ProblemInsufficientFunds ||
		refused.body["settlement_id"] != "too-much" {
		t.Fatalf("uncovered payout: %d %s", refused.status, refused.raw)
	}
	bs, err := ledger.Balances(context.Background(), b.db.Pool, "acc-1")
	if err != nil || len(bs) != 1 || bs[0].Posted != 20000 || bs[0].Held != 12345 || bs[0].Available != 20000-12345 {
		t.Fatalf("balance %+v, %v", bs, err)
	}
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 2, "settlements": 1, "settlement_transitions": 1, "river_job": 1})

	// The money arrives; the refused payout stays refused (its outcome is
	// pinned to its id), a new id pays.
	credit(t, b, "acc-1", 20000, "top-up-2")
	again := b.post(t, mustJSON(t, eventFields("too-much")))
	if again.status != refused.status || again.body["type"] != refused.body["type"] || again.body["detail"] != refused.body["detail"] {
		t.Fatalf("replay of a refused payout: %d %s, first %s", again.status, again.raw, refused.raw)
	}
	changed := eventFields("too-much")
	changed["amount_cents"] = 1
	if c := b.post(t, mustJSON(t, changed)); c.status != http.StatusConflict || c.body["stored_hash"] == nil {
		t.Fatalf("another payload under a refused id: %d %s", c.status, c.raw)
	}
	if r := b.post(t, mustJSON(t, eventFields("too-much-2"))); r.status != http.StatusCreated {
		t.Fatalf("a new id once covered: %d %s", r.status, r.raw)
	}
	var replays int
	var outcome string
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT replay_count, outcome FROM settlement_receipts WHERE settlement_id = 'too-much'`).
		Scan(&replays, &outcome); err != nil || replays != 1 || outcome != "insufficient_funds" {
		t.Fatalf("refused receipt: replays %d outcome %q, %v", replays, outcome, err)
	}
	checkLedger(t, b)
	v, err := audit.CheckInvariants(context.Background(), b.db.Pool, audit.Expect{})
	if err != nil || len(v) != 0 {
		t.Fatalf("invariants %v, %v", v, err)
	}
}

// TestFundsCheckBatch: within a batch the payouts of one account are
// decided in settlement_id order, each against what the ones before left;
// a replay in the batch is not decided again; another account is apart.
func TestFundsCheckBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fundsCheck: true})
	ctx := context.Background()
	credit(t, b, "a", 250, "a-1")
	credit(t, b, "b", 100, "b-1")
	outs, err := b.svc.SubmitBatch(ctx, []intake.Event{
		event("1", "a", 100), event("2", "a", 100), event("3", "a", 100), event("4", "a", 50),
		event("5", "b", 100), event("1", "a", 100), event("6", "c", 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(outs))
	for i, o := range outs {
		switch {
		case errors.Is(o.Err, intake.ErrInsufficientFunds):
			got[i] = "refused"
		case o.Err != nil:
			got[i] = o.Err.Error()
		case o.Result.Replayed:
			got[i] = "replayed"
		default:
			got[i] = "created"
		}
	}
	want := []string{"created", "created", "refused", "created", "created", "replayed", "refused"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	// The batch again: every outcome the same, all replays now.
	outs, err = b.svc.SubmitBatch(ctx, []intake.Event{event("3", "a", 100), event("1", "a", 100)})
	if err != nil || !errors.Is(outs[0].Err, intake.ErrInsufficientFunds) || outs[1].Err != nil || !outs[1].Result.Replayed {
		t.Fatalf("the batch again: %+v, %v", outs, err)
	}
	checkLedger(t, b)
}

// TestFundsCheckConcurrent: 40 payouts at once from one account whose
// balance covers 20: exactly 20 are accepted, whatever the interleaving;
// payouts from other accounts go through beside them.
func TestFundsCheckConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fundsCheck: true})
	ctx := context.Background()
	credit(t, b, "hot", 20*100, "hot-1")
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, refused := 0, 0
	for i := range 40 {
		wg.Go(func() {
			_, err := b.svc.Submit(ctx, event(fmt.Sprintf("p-%02d", i), "hot", 100))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted++
			case errors.Is(err, intake.ErrInsufficientFunds):
				refused++
			default:
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := b.svc.Submit(ctx, event(fmt.Sprintf("q-%02d", i), fmt.Sprintf("cold-%d", i), 1)); !errors.Is(err, intake.ErrInsufficientFunds) {
				t.Errorf("a payout from an empty account: %v", err)
			}
		})
	}
	wg.Wait()
	if accepted != 20 || refused != 20 {
		t.Fatalf("%d accepted, %d refused; want 20 and 20", accepted, refused)
	}
	bs, err := ledger.Balances(ctx, b.db.Pool, "hot")
	if err != nil || len(bs) != 1 || bs[0].Available != 0 || bs[0].Held != 2000 {
		t.Fatalf("balance %+v, %v", bs, err)
	}
	checkLedger(t, b)
}
