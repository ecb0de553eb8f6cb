package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

func runLedger(t *testing.T, db *dbtest.DB, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &ledgerCmd{s: Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}, dbURL: db.URL}
	return c.run(context.Background(), args), out.String(), errb.String()
}

// TestLedgerCommand: settle ledger credit is idempotent by its ref and
// refuses the ref with another amount (exit 1, nothing posted); balance
// --json prints the shape of DESIGN.md section 20, a payout in flight held
// and a confirmed one posted; postings lists them; every form has --help.
func TestLedgerCommand(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()

	for _, args := range [][]string{{"--help"}, {"credit", "--help"}, {"balance", "--help"}, {"postings", "--help"}} {
		if code, out, errs := runLedger(t, db, args...); code != exitOK || !strings.Contains(out, "Usage: settle ledger") {
			t.Fatalf("%v: exit %d, %q %q", args, code, out, errs)
		}
	}
	if code, out, errs := runLedger(t, db, "credit", "acc", "1050", "EUR", "--ref", "wire-1"); code != exitOK || !strings.Contains(out, "credited 10.50 EUR to acc") {
		t.Fatalf("credit: exit %d, %q %q", code, out, errs)
	}
	if code, out, _ := runLedger(t, db, "credit", "acc", "1050", "EUR", "--ref", "wire-1"); code != exitOK || !strings.Contains(out, "already credited") {
		t.Fatalf("credit again: exit %d, %q", code, out)
	}
	if code, _, errs := runLedger(t, db, "credit", "acc", "1051", "EUR", "--ref", "wire-1"); code != exitFindings || !strings.Contains(errs, "nothing posted") {
		t.Fatalf("credit with another amount: exit %d, %q", code, errs)
	}
	for _, bad := range [][]string{{"credit", "acc", "10.50", "EUR", "--ref", "x"}, {"credit", "acc", "1", "EUR"}, {"credit", "settle:funding", "1", "EUR", "--ref", "y"}, {"credit", "acc", "1", "XXX", "--ref", "z"}} {
		if code, _, _ := runLedger(t, db, bad...); code != exitError {
			t.Errorf("%v: exit %d, want %d", bad, code, exitError)
		}
	}

	// Two payouts: one confirmed, one in flight.
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ('p1', 'acc', 'ben', 300, 'EUR', 'pending', 'k-p1', 'sha256:00'), ('p2', 'acc', 'ben', 200, 'EUR', 'pending', 'k-p2', 'sha256:00')`); err != nil {
			return err
		}
		return statemachine.Created(ctx, tx, "received", time.Time{}, "p1", "p2")
	}); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "p1", From: settlement.Pending, To: settlement.Confirmed, Reason: "settled"})
	}); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runLedger(t, db, "balance", "acc", "--json")
	if code != exitOK {
		t.Fatalf("balance: exit %d %s", code, errs)
	}
	var got struct {
		Accounts []map[string]any `json:"accounts"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got.Accounts) != 1 || got.Accounts[0]["account_id"] != "acc" || got.Accounts[0]["currency"] != "EUR" ||
		got.Accounts[0]["posted_minor"] != float64(750) || got.Accounts[0]["held_minor"] != float64(200) || got.Accounts[0]["available_minor"] != float64(550) {
		t.Fatalf("balance: %s", out)
	}
	code, out, _ = runLedger(t, db, "balance")
	if code != exitOK || !strings.Contains(out, "settle:clearing:settle") || !strings.Contains(out, "-10.50") || !strings.Contains(out, "5.50") {
		t.Fatalf("balance of all: exit %d\n%s", code, out)
	}
	code, out, _ = runLedger(t, db, "postings", "--account", "acc", "--json")
	var ps struct {
		Postings []map[string]any `json:"postings"`
		Count    int              `json:"count"`
	}
	if err := json.Unmarshal([]byte(out), &ps); err != nil || code != exitOK {
		t.Fatalf("postings: exit %d %v: %s", code, err, out)
	}
	if ps.Count != 2 || ps.Postings[0]["kind"] != "credit" || ps.Postings[0]["ref"] != "wire-1" ||
		ps.Postings[1]["kind"] != "payout" || ps.Postings[1]["settlement_id"] != "p1" || ps.Postings[1]["credit_account"] != "settle:clearing:settle" {
		t.Fatalf("postings: %s", out)
	}
	if code, out, _ := runLedger(t, db, "postings", "--settlement", "p1"); code != exitOK || !strings.Contains(out, "1 posting(s)") {
		t.Fatalf("postings of p1: exit %d\n%s", code, out)
	}
}

func TestAmountOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{{123456, "EUR", "1234.56"}, {-5, "EUR", "-0.05"}, {7, "JPY", "7"}, {1001, "BHD", "1.001"}, {-1 << 63, "EUR", "-92233720368547758.08"}, {5, "ZZZ", "5"}} {
		if got := amountOf(tc.minor, tc.currency); got != tc.want {
			t.Errorf("amountOf(%d, %s) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}
