package statemachine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/ledger"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

// balanceOf returns account acc's EUR balance.
func balanceOf(t *testing.T, db ledger.DB, acc string) ledger.Balance {
	t.Helper()
	bs, err := ledger.Balances(context.Background(), db, acc)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if b.Currency == "EUR" {
			return b
		}
	}
	return ledger.Balance{AccountID: acc, Currency: "EUR"}
}

// TestLedgerEffectsOfTransitions walks settlements through every
// transition that moves money, in their own transactions: creation holds
// the amount, confirmed posts it and releases the hold, returned posts the
// reversal, failed voids the hold, uncertain keeps it; after every step
// the ledger's checks find nothing.
func TestLedgerEffectsOfTransitions(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	step := func(fn func(tx pgx.Tx) error) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, db.Pool, fn); err != nil {
			t.Fatal(err)
		}
		ms, err := inspect.LedgerMismatches(ctx, db.Pool)
		if err != nil || len(ms) != 0 {
			t.Fatalf("ledger mismatches %v, %v", ms, err)
		}
	}
	move := func(id string, from, to settlement.State) {
		t.Helper()
		step(func(tx pgx.Tx) error {
			return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: id, From: from, To: to, Reason: "test", At: at})
		})
	}
	want := func(posted, held int64) {
		t.Helper()
		b := balanceOf(t, db.Pool, "acc")
		if b.Posted != posted || b.Held != held || b.Available != posted-held {
			t.Fatalf("acc: %+v, want posted %d held %d", b, posted, held)
		}
	}
	if _, err := ledger.Credit(ctx, db.Pool, ledger.CreditRequest{AccountID: "acc", AmountMinor: 1000, Currency: "EUR", Ref: "top-up-1"}); err != nil {
		t.Fatal(err)
	}
	want(1000, 0)
	step(func(tx pgx.Tx) error {
		insertSettlement(t, tx, "a")
		insertSettlement(t, tx, "b")
		insertSettlement(t, tx, "c")
		return statemachine.Created(ctx, tx, "received", at, "a", "b", "c")
	})
	want(1000, 300)
	move("a", settlement.Pending, settlement.Sent)
	move("a", settlement.Sent, settlement.Uncertain)
	want(1000, 300)
	move("a", settlement.Uncertain, settlement.Confirmed)
	want(900, 200)
	move("b", settlement.Pending, settlement.Failed)
	want(900, 100)
	move("a", settlement.Confirmed, settlement.Returned)
	want(1000, 100)
	move("c", settlement.Pending, settlement.Confirmed)
	want(900, 0)

	clearing := balanceOf(t, db.Pool, ledger.ClearingAccount("settle"))
	funding := balanceOf(t, db.Pool, ledger.FundingAccount)
	if clearing.Posted != 100 || funding.Posted != -1000 {
		t.Fatalf("clearing %+v, funding %+v: want 100 and -1000", clearing, funding)
	}
	ps, err := ledger.Postings(ctx, db.Pool, ledger.PostingFilter{AccountID: "acc"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range ps {
		kinds = append(kinds, p.Kind+":"+p.SettlementID)
	}
	if got := len(kinds); got != 4 || kinds[0] != "credit:" || kinds[1] != "payout:a" || kinds[2] != "reversal:a" || kinds[3] != "payout:c" {
		t.Fatalf("postings of acc %v", kinds)
	}
}

// TestLedgerLostRaceWritesNothing: a transition that lost its race posts
// nothing and leaves the hold alone.
func TestLedgerLostRaceWritesNothing(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := setup(t, db)
	ctx := context.Background()
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}, "s1"); err != nil {
		t.Fatal(err)
	}
	err := statemachine.Transition(ctx, b.tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "s1", From: settlement.Sent, To: settlement.Confirmed})
	if err == nil {
		t.Fatal("a transition from the wrong state happened")
	}
	ms, err := inspect.LedgerMismatches(ctx, b.tx)
	if err != nil || len(ms) != 0 {
		t.Fatalf("ledger mismatches %v, %v", ms, err)
	}
	if got := balanceOf(t, b.tx, "acc"); got.Posted != 0 || got.Held != 100 {
		t.Fatalf("acc %+v after a lost race", got)
	}
}

// TestLedgerChecksCatch: a posting written behind the state machine's back,
// or a kept balance changed by hand, is a mismatch.
func TestLedgerChecksCatch(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := setup(t, db)
	ctx := context.Background()
	if err := statemachine.Created(ctx, b.tx, "received", time.Time{}, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.tx.Exec(ctx, `INSERT INTO ledger_postings (settlement_id, kind, debit_account, credit_account, amount_minor, currency)
		VALUES ('s1', 'payout', 'acc', 'settle:clearing:settle', 100, 'EUR')`); err != nil {
		t.Fatal(err)
	}
	ms, err := inspect.LedgerMismatches(ctx, b.tx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, m := range ms {
		kinds[m.Kind]++
	}
	// The posting does not match the pending state, the account's kept
	// balance misses it, and the currency no longer sums to zero.
	if kinds["settlement"] != 1 || kinds["balance"] != 1 || kinds["currency"] != 1 {
		t.Fatalf("mismatches %v", ms)
	}
}

// TestBalanceShardOfConnection: the hold of a creation, the posting of its
// confirmation and a credit each change the balance shard of their
// connection, the backend's pid modulo 64 (migration 0025), so that two
// connections share a shard a quarter as often as modulo 16; the shards
// still add up to the account's balance.
func TestBalanceShardOfConnection(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var shards []int
	step := func(fn func(tx pgx.Tx) error) {
		t.Helper()
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			var shard, want int
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid() & 63, (SELECT shard FROM ledger_balances
				WHERE account_id = 'acc' AND shard = pg_backend_pid() & 63)`).Scan(&want, &shard); err != nil {
				return err
			}
			if shard != want {
				t.Fatalf("changed shard %d, want the connection's %d", shard, want)
			}
			shards = append(shards, shard)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	step(func(tx pgx.Tx) error {
		_, err := ledger.Credit(ctx, tx, ledger.CreditRequest{AccountID: "acc", AmountMinor: 1000, Currency: "EUR", Ref: "top-up-1"})
		return err
	})
	step(func(tx pgx.Tx) error {
		insertSettlement(t, tx, "a")
		return statemachine.Created(ctx, tx, "received", at, "a")
	})
	step(func(tx pgx.Tx) error {
		return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "a",
			From: settlement.Pending, To: settlement.Confirmed, Reason: "test", At: at})
	})
	if b := balanceOf(t, db.Pool, "acc"); b.Posted != 900 || b.Held != 0 {
		t.Fatalf("acc: %+v over shards %v, want posted 900, held 0", b, shards)
	}
	// Every shard of 0 to 63 is a valid row; 64 is not.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ledger_balances (account_id, currency, shard) VALUES ('acc', 'EUR', 63)
		ON CONFLICT DO NOTHING`); err != nil {
		t.Fatalf("shard 63: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ledger_balances (account_id, currency, shard) VALUES ('acc', 'EUR', 64)`); err == nil {
		t.Fatal("shard 64 was accepted")
	}
}
