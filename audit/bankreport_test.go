package audit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/reporttest"
	"github.com/settle/settle/settlement"
)

func (b *reportBundle) report(t *testing.T, bank bankclient.Bank) *BankReport {
	t.Helper()
	if bank == nil {
		bank = b.Client
	}
	var rep BankReport
	r := &BankReporter{DB: b.DB.Pool, Bank: bank, PageSize: 2}
	counts, err := r.Run(context.Background(), &rep)
	if err != nil {
		t.Fatalf("bank report: %v", err)
	}
	if counts.Discrepancies() != rep.Discrepancies() {
		t.Fatalf("returned counts differ from streamed counts")
	}
	// The streamed lists agree with the counts.
	for _, cl := range BreakClasses {
		if int64(len(rep.Breaks[cl])) != rep.ByClass[cl] {
			t.Errorf("%s: %d listed, %d counted", cl, len(rep.Breaks[cl]), rep.ByClass[cl])
		}
	}
	return &rep
}

// onlyBreak checks that the report found exactly one discrepancy, of class
// want, for id, and returns it.
func onlyBreak(t *testing.T, rep *BankReport, want Class, id string) Break {
	t.Helper()
	if got := rep.Discrepancies(); got != 1 {
		t.Fatalf("discrepancies = %d, want 1: %+v", got, rep.Breaks)
	}
	bs := rep.Breaks[want]
	if len(bs) != 1 || bs[0].SettlementID != id {
		t.Fatalf("%s = %+v, want exactly %s (all: %+v)", want, bs, id, rep.Breaks)
	}
	if bs[0].Reason == "" {
		t.Errorf("break without a reason: %+v", bs[0])
	}
	return bs[0]
}

func TestBankReportClean(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	for i := range 5 {
		b.Confirmed(t, fmt.Sprintf("s-%d", i), int64(100+i))
	}
	b.Seed(t, "rejected", 100, settlement.Failed, false) // rejected: the bank holds no payment
	b.Seed(t, "waiting", 100, settlement.Pending, false)
	b.Seed(t, "in-flight", 300, settlement.Sent, false)
	b.Pay(t, "in-flight", 300)

	rep := b.report(t, nil)
	if rep.Discrepancies() != 0 {
		t.Fatalf("discrepancies on a clean ledger: %+v", rep.Breaks)
	}
	if rep.ByClass[ClassMatched] != 5 {
		t.Errorf("matched = %d, want 5 (the confirmed count)", rep.ByClass[ClassMatched])
	}
	if rep.ByClass[ClassFailedAgreed] != 1 {
		t.Errorf("failed_agreed = %d, want 1", rep.ByClass[ClassFailedAgreed])
	}
	if rep.Settlements != 8 || rep.BankPayments != 6 || rep.Rechecked != 0 {
		t.Errorf("settlements %d, bank payments %d, rechecked %d; want 8, 6, 0", rep.Settlements, rep.BankPayments, rep.Rechecked)
	}
	un := rep.Breaks[ClassUnresolved]
	if len(un) != 2 || un[0].SettlementID != "in-flight" || un[1].SettlementID != "waiting" {
		t.Fatalf("unresolved = %+v", un)
	}
	if un[0].Since == nil || len(un[0].BankPayments) != 1 || un[0].BankPayments[0].Status != "settled" {
		t.Errorf("unresolved in-flight lacks detail: %+v", un[0])
	}
}

func TestBankReportMissingInLedger(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	b.Confirmed(t, "ok", 100)
	b.Confirmed(t, "lost-movement", 250)
	b.DeleteMovement(t, "lost-movement")

	br := onlyBreak(t, b.report(t, nil), ClassMissingInLedger, "lost-movement")
	if br.State != "confirmed" || br.Movement != nil || len(br.BankPayments) != 1 || br.BankPayments[0].AmountCents != 250 {
		t.Errorf("break = %+v", br)
	}
}

func TestBankReportBankPaidUnknownID(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	b.Confirmed(t, "ok", 100)
	b.Pay(t, "stranger", 999)

	br := onlyBreak(t, b.report(t, nil), ClassMissingInLedger, "stranger")
	if br.State != "" || len(br.BankPayments) != 1 {
		t.Errorf("break = %+v", br)
	}
}

func TestBankReportMissingAtBank(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	b.Confirmed(t, "ok", 100)
	b.Seed(t, "never-paid", 400, settlement.Confirmed, true)

	rep := b.report(t, nil)
	br := onlyBreak(t, rep, ClassMissingAtBank, "never-paid")
	if br.Movement == nil || br.Movement.AmountCents != 400 || len(br.BankPayments) != 0 {
		t.Errorf("break = %+v", br)
	}
	// It was asked about again by key (404) before being reported.
	if rep.Rechecked != 1 {
		t.Errorf("rechecked = %d, want 1", rep.Rechecked)
	}
}

func TestBankReportAmountMismatch(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	b.Confirmed(t, "ok", 100)
	b.Pay(t, "altered", 900) // the bank executed another amount
	b.Seed(t, "altered", 1000, settlement.Confirmed, true)

	br := onlyBreak(t, b.report(t, nil), ClassAmountMismatch, "altered")
	if br.AmountCents != 1000 || br.BankPayments[0].AmountCents != 900 {
		t.Errorf("break = %+v", br)
	}
}

func TestBankReportStatusMismatch(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	b.Confirmed(t, "ok", 100)
	b.Pay(t, "paid-anyway", 500)
	b.Seed(t, "paid-anyway", 500, settlement.Failed, false)

	br := onlyBreak(t, b.report(t, nil), ClassStatusMismatch, "paid-anyway")
	if br.State != "failed" || br.BankPayments[0].Status != "settled" {
		t.Errorf("break = %+v", br)
	}
}

func TestBankReportDuplicateAtBank(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	b.Confirmed(t, "ok", 100)
	// The bank forgets keys after a minute; a second POST under the same key
	// after that creates a second payment for the same settlement.
	if err := b.Bank.SetFaults(fakebank.Faults{KeyTTLMS: 60_000}); err != nil {
		t.Fatal(err)
	}
	first := b.Pay(t, "twice", 700)
	b.Clock.Advance(2 * time.Minute)
	second := b.Pay(t, "twice", 700)
	if first.ID == second.ID {
		t.Fatalf("the bank did not forget the key: one payment %s", first.ID)
	}
	b.Seed(t, "twice", 700, settlement.Confirmed, true)

	br := onlyBreak(t, b.report(t, nil), ClassDuplicateAtBank, "twice")
	if len(br.BankPayments) != 2 || br.BankPayments[0].ID != first.ID || br.BankPayments[1].ID != second.ID {
		t.Errorf("break = %+v", br)
	}
}

// staleBank serves a statement read before some payments were created (it
// hides them), while StatusByKey tells the truth: what a live report sees
// when the worker confirms settlements while the statement is being read.
type staleBank struct {
	bankclient.Bank
	hide map[string]bool
}

func (s staleBank) Statement(ctx context.Context, after string, limit int) (bankclient.StatementPage, error) {
	p, err := s.Bank.Statement(ctx, after, limit)
	kept := p.Payments[:0:0]
	for _, x := range p.Payments {
		if !s.hide[x.Reference] {
			kept = append(kept, x)
		}
	}
	p.Payments = kept
	return p, err
}

func TestBankReportRechecksWhatTheStatementMissed(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	b.Confirmed(t, "ok", 100)
	b.Confirmed(t, "confirmed-during-the-read", 200)

	rep := b.report(t, staleBank{Bank: b.Client, hide: map[string]bool{"confirmed-during-the-read": true}})
	if rep.Discrepancies() != 0 || rep.ByClass[ClassMatched] != 2 || rep.Rechecked != 1 {
		t.Fatalf("matched %d, rechecked %d, breaks %+v; want 2 matched after 1 recheck", rep.ByClass[ClassMatched], rep.Rechecked, rep.Breaks)
	}
}

func TestBankReportBankDown(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	b.Confirmed(t, "ok", 100)
	dead, err := settle.New("http://127.0.0.1:1", bankclient.Options{Timeout: time.Second, Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var rep BankReport
	if _, err := (&BankReporter{DB: b.DB.Pool, Bank: dead}).Run(context.Background(), &rep); err == nil {
		t.Fatal("report against an unreachable bank succeeded")
	}
	if rep.Breaks != nil {
		t.Errorf("sink received a partial report: %+v", rep)
	}
	// The connection went back to the pool without its temporary tables.
	var n int
	if err := b.DB.Pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_tables WHERE tablename = $1", stmtTable).Scan(&n); err != nil || n != 0 {
		t.Errorf("temporary tables left behind: %d, %v", n, err)
	}
}

func TestBankReportManySettlements(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	const n = 3000
	reporttest.SeedBulk(t, b.DB, n, 0)
	rep := b.report(t, &genBank{n: n})
	if rep.ByClass[ClassMatched] != n || rep.Discrepancies() != 0 || rep.BankPayments != n {
		t.Fatalf("matched %d of %d, breaks %d", rep.ByClass[ClassMatched], n, rep.Discrepancies())
	}
}

var _ bankclient.Bank = (*genBank)(nil)

// TestBankReportReturned: a settlement returned here with its reversal,
// whose payment the bank returned, agrees; one returned here while the
// bank still holds its payment settled, or returned without its reversal,
// is a status mismatch.
func TestBankReportReturned(t *testing.T) {
	t.Parallel()
	b := setupReport(t)
	ctx := context.Background()
	reversal := func(id string, amount int64) {
		if _, err := b.DB.Pool.Exec(ctx, `INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency)
			VALUES ($1, 'reversal', 'acc-1', $2, 'EUR')`, id, amount); err != nil {
			t.Fatal(err)
		}
	}
	back := b.Pay(t, "back", 700)
	b.Seed(t, "back", 700, settlement.Returned, true)
	reversal("back", 700)
	if err := b.Bank.Return(back.ID, "AC04"); err != nil {
		t.Fatal(err)
	}
	rep := b.report(t, nil)
	if rep.Discrepancies() != 0 || rep.ByClass[ClassReturnedAgreed] != 1 {
		t.Fatalf("returned at both ends: returned_agreed %d, breaks %+v", rep.ByClass[ClassReturnedAgreed], rep.Breaks)
	}

	b.Pay(t, "not-back", 800)
	b.Seed(t, "not-back", 800, settlement.Returned, true)
	reversal("not-back", 800)
	onlyBreak(t, b.report(t, nil), ClassStatusMismatch, "not-back")
}
