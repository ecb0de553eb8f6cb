package reconcile

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
)

// idOnlyBank is a real bank client seen through the capabilities of a bank
// that looks payments up only by its own id (as Stripe and UK Open Banking
// do): asking by our key is not offered.
type idOnlyBank struct{ *settle.Client }

func (idOnlyBank) StatusByKey(context.Context, string) (bankclient.Payment, error) {
	return bankclient.Payment{}, bankclient.ErrUnsupported
}

// setupIDOnly is a Resolver against a fakebank through an id-only bank with
// the given search capability, on a manual clock.
func setupIDOnly(t *testing.T, faults fakebank.Faults, search bool) (*resolverBundle, *settletest.ManualClock) {
	t.Helper()
	b := setupResolverOpts(t, fakebank.Options{Seed: 3, Faults: faults})
	client := b.r.Bank.(*settle.Client)
	b.r.Bank = idOnlyBank{client}
	b.r.Capabilities = &bankclient.Capabilities{LookupByID: true, Search: search, Replay: bankclient.ReplayOriginal, KeyWindow: 24 * time.Hour}
	clock := settletest.NewManualClock(time.Now())
	b.r.Now = clock.Now
	return b, clock
}

// TestLostAnswerResolvedByReplayAtAnIDOnlyBank: the bank executes the
// payment and the answer is lost; the bank cannot be asked by our key, so
// the engine repeats the identical request under the same key while the
// key is remembered, learns the bank's id from the replay, then polls by
// id: paid once, confirmed with one movement, never a new key.
func TestLostAnswerResolvedByReplayAtAnIDOnlyBank(t *testing.T) {
	t.Parallel()
	b, clock := setupIDOnly(t, fakebank.Faults{DropResponseRate: 1, SettleDelayMS: 1}, false)
	ctx := context.Background()
	resolvertest.InsertSettlement(t, b.db, "lost-1", 4200)
	if out, err := b.r.Send(ctx, "lost-1", nil); err != nil || out.State != settlement.Uncertain {
		t.Fatalf("send with the answer lost: %+v, %v", out, err)
	}
	if err := b.bank.SetFaults(fakebank.Faults{SettleDelayMS: 1}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	out, err := b.r.Resolve(ctx, "lost-1", nil)
	if err != nil || out.State != settlement.Sent || resolvertest.ReadRow(t, b.db, "lost-1").PaymentID == nil {
		t.Fatalf("replay: %+v, %v; want sent with the bank's id learned", out, err)
	}
	var ops []string
	settletest.Wait(t, "confirmation by id", func() (bool, string) {
		clock.Advance(time.Minute)
		out, err = b.r.Resolve(ctx, "lost-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		return out.State == settlement.Confirmed, string(out.State)
	})
	rows, _ := b.db.Pool.Query(ctx, `SELECT op FROM bank_attempts WHERE settlement_id = 'lost-1' ORDER BY id`)
	for rows.Next() {
		var op string
		_ = rows.Scan(&op)
		ops = append(ops, op)
	}
	rows.Close()
	if len(ops) < 3 || ops[0] != "send" || ops[1] != "replay" || ops[2] != "status" {
		t.Errorf("bank calls %v, want send, replay, then status by id", ops)
	}
	if st := b.bank.Stats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 {
		t.Errorf("bank %+v, want one payment", st)
	}
	resolvertest.CheckAgainst(t, b.db, b.r.Bank)
}

// TestLostAnswerAfterTheKeyWindow: past the key window a replay could pay
// twice, so it is never sent: the engine searches the bank's list for our
// reference (found: resolved) or, at a bank without a list, flags it.
func TestLostAnswerAfterTheKeyWindow(t *testing.T) {
	t.Parallel()
	for _, search := range []bool{true, false} {
		t.Run(fmt.Sprintf("search=%v", search), func(t *testing.T) {
			t.Parallel()
			b, clock := setupIDOnly(t, fakebank.Faults{DropResponseRate: 1}, search)
			ctx := context.Background()
			resolvertest.InsertSettlement(t, b.db, "late-1", 990)
			if out, err := b.r.Send(ctx, "late-1", nil); err != nil || out.State != settlement.Uncertain {
				t.Fatalf("send with the answer lost: %+v, %v", out, err)
			}
			if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
				t.Fatal(err)
			}
			clock.Advance(2 * time.Hour) // past KeyTTL (1 h)
			out, err := b.r.Resolve(ctx, "late-1", nil)
			if err != nil {
				t.Fatal(err)
			}
			r := resolvertest.ReadRow(t, b.db, "late-1")
			if search {
				if out.State != settlement.Confirmed || r.Movements != 1 {
					t.Errorf("found in the list: %+v, movements %d; want confirmed", out, r.Movements)
				}
			} else if r.Flag == nil || *r.Flag != ReasonNoSafeQuestion || out.State != settlement.Uncertain {
				t.Errorf("no safe question: %+v, flag %v; want uncertain flagged %s", out, r.Flag, ReasonNoSafeQuestion)
			}
			var replays int
			_ = b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM bank_attempts WHERE settlement_id = 'late-1' AND op IN ('replay', 'send')`).Scan(&replays)
			if replays != 1 {
				t.Errorf("%d POSTs, want only the first", replays)
			}
			if st := b.bank.Stats(); st.Payments != 1 {
				t.Errorf("bank %+v, want one payment", st)
			}
		})
	}
}

// TestNotInTheListAfterTheWindow: the first POST never reached the bank;
// past the key window the list does not hold it, and the engine flags it
// rather than guess or resend.
func TestNotInTheListAfterTheWindow(t *testing.T) {
	t.Parallel()
	b, clock := setupIDOnly(t, fakebank.Faults{FailBeforeRate: 1}, true)
	ctx := context.Background()
	resolvertest.InsertSettlement(t, b.db, "never-1", 77)
	if out, err := b.r.Send(ctx, "never-1", nil); err != nil || out.State != settlement.Uncertain {
		t.Fatalf("send failing before the bank: %+v, %v", out, err)
	}
	if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	if _, err := b.r.Resolve(ctx, "never-1", nil); err != nil {
		t.Fatal(err)
	}
	if r := resolvertest.ReadRow(t, b.db, "never-1"); r.Flag == nil || *r.Flag != ReasonNotInList || r.State != settlement.Uncertain {
		t.Errorf("state %s, flag %v; want uncertain flagged %s", r.State, r.Flag, ReasonNotInList)
	}
	if st := b.bank.Stats(); st.Payments != 0 {
		t.Errorf("bank %+v, want no payment", st)
	}
}

// TestLongIDGetsAStableShortReference: a 128-byte, non-ASCII settlement id
// travels to a bank with strict reference rules under a stable short
// reference, and the ledger-vs-bank report matches it.
func TestLongIDGetsAStableShortReference(t *testing.T) {
	t.Parallel()
	b := setupResolver(t, fakebank.Faults{})
	strict := bankclient.Capabilities{LookupByKey: true, Search: true, RefMaxLen: 31, RefASCIIOnly: true, RefAllowed: "-"}
	b.r.Capabilities = &strict
	ctx := context.Background()
	id := ""
	for len(id) < 128 {
		id += "é"
	}
	resolvertest.InsertSettlement(t, b.db, id, 1500)
	ref := strict.Reference(id)
	if _, err := b.db.Pool.Exec(ctx, `UPDATE settlements SET bank_reference = $2 WHERE settlement_id = $1`, id, ref); err != nil {
		t.Fatal(err)
	}
	if out, err := b.r.Send(ctx, id, nil); err != nil || out.State != settlement.Confirmed && out.State != settlement.Sent {
		t.Fatalf("send: %+v, %v", out, err)
	}
	resolveUntilTerminal(t, b, id)
	ps, err := bankclient.AllPayments(ctx, b.r.Bank)
	if err != nil || len(ps) != 1 || ps[0].Reference != ref || len(ref) > 31 {
		t.Fatalf("bank holds %+v (%v), want one payment under %q", ps, err, ref)
	}
	rep := &audit.BankReport{}
	counts, err := (&audit.BankReporter{DB: b.db.Pool, Bank: b.r.Bank}).Run(ctx, rep)
	if err != nil {
		t.Fatal(err)
	}
	if counts.ByClass[audit.ClassMatched] != 1 || counts.Discrepancies() != 0 {
		t.Errorf("report %+v, want the settlement matched by its short reference", counts)
	}
}
