package audit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestInvariantsPaidAtTheWrongBank: run against one bank's books (Expect.Bank),
// the checker flags a payment there of another bank's settlement, and holds
// each bank's settlements against their own bank's books only.
func TestInvariantsPaidAtTheWrongBank(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, bank)
		VALUES ('s-stripe', 'acc', 'ba_1', 500, 'USD', 'confirmed', $1, 'sha256:00', 'stripe')`, bankclient.KeyFor("s-stripe")); err != nil {
		t.Fatal(err)
	}
	paid := []bankclient.Payment{{ID: "pay_1", IdempotencyKey: bankclient.KeyFor("s-stripe"), Reference: "s-stripe",
		Status: bankclient.StatusSettled, AmountCents: 500, Currency: "USD", CreatedAt: time.Now()}}
	wrong, err := audit.CheckInvariants(ctx, db.Pool, audit.Expect{CheckBank: true, Payments: paid, Bank: "settle"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(wrong, "\n"), "PAID AT THE WRONG BANK") {
		t.Fatalf("a stripe settlement in settle's books was not flagged:\n%s", strings.Join(wrong, "\n"))
	}
	right, err := audit.CheckInvariants(ctx, db.Pool, audit.Expect{CheckBank: true, Payments: paid, Bank: "stripe"})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range right {
		if strings.Contains(v, "WRONG BANK") || strings.Contains(v, "bank holds no settled payment") {
			t.Fatalf("its own bank's books: %s", v)
		}
	}
	// Against settle's empty books, the stripe settlement is not missing.
	none, err := audit.CheckInvariants(ctx, db.Pool, audit.Expect{CheckBank: true, Bank: "settle"})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range none {
		if strings.Contains(v, "bank holds no settled payment") {
			t.Fatalf("checked against another bank's books: %s", v)
		}
	}
}
