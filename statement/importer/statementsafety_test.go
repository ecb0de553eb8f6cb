package importer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/testsupport/camttest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
)

// safetyBundle is a private database, an importer that books what the
// statements say, and the settlements a test seeds.
type safetyBundle struct {
	db *dbtest.DB
	im *StatementImporter
}

func setupSafety(t *testing.T) *safetyBundle {
	t.Helper()
	db := dbtest.New(t)
	return &safetyBundle{db: db, im: &StatementImporter{DB: db.Pool, Returns: &reconcile.Resolver{DB: db.Pool}, Accounts: []string{"acc-1"}}}
}

// seed writes settlement id in state st for amount minor units of ccy, as
// the engine leaves it: attempted unless st is pending, with its payout
// movement when confirmed.
func (b *safetyBundle) seed(t *testing.T, id string, amount int64, ccy string, st settlement.State) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state,
			bank_key, payload_hash, first_attempt_at)
			VALUES ($1, 'acc-1', 'bene-1', $2, $3, $4, $5, 'sha256:'||repeat('0', 64),
			        CASE WHEN $4 <> 'pending' THEN now() - interval '1 hour' END)`,
			id, amount, ccy, string(st), bankclient.KeyFor(id)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason)
			SELECT $1, NULL, 'pending', 'test' UNION ALL SELECT $1, 'pending', $2, 'test' WHERE $2 <> 'pending'`, id, string(st)); err != nil {
			return err
		}
		if st == settlement.Confirmed {
			_, err := tx.Exec(ctx, `INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency)
				VALUES ($1, 'acc-1', $2, $3)`, id, amount, ccy)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed %s: %v", id, err)
	}
}

// after is a settlement's state, flag and movements once a statement was
// imported.
type after struct {
	state     settlement.State
	flag      string
	detail    string
	movements string
}

func (b *safetyBundle) after(t *testing.T, id string) after {
	t.Helper()
	var a after
	err := b.db.Pool.QueryRow(context.Background(), `SELECT s.state, coalesce(s.investigation_reason, ''),
		coalesce((SELECT reason FROM settlement_transitions WHERE settlement_id = s.settlement_id ORDER BY id DESC LIMIT 1), ''),
		coalesce((SELECT string_agg(kind, '+' ORDER BY kind) FROM ledger_movements WHERE settlement_id = s.settlement_id), '')
		FROM settlements s WHERE s.settlement_id = $1`, id).Scan(&a.state, &a.flag, &a.detail, &a.movements)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	return a
}

// mt940Credit is an MT940 statement of acc-1 in ccy holding one credit of
// amount (as written, comma decimals) under reference ref, with info
// the rest of its :86:.
func mt940Credit(ccy, amount, ref, info string) []byte {
	return []byte(":20:STMT-" + ref + "\n:25:acc-1\n:28C:1/1\n:60F:C300101" + ccy + "0,00\n" +
		":61:3001010101C" + amount + "NTRFNONREF//B-" + ref + "\n:86:/EREF/" + ref + "/" + info + "\n" +
		":62F:C300101" + ccy + amount + "\n")
}

// bai2Credit is a BAI2 file of acc-1 in USD holding one detail of type typ
// for amount (minor units, as written) under customer reference ref.
func bai2Credit(typ, amount, ref string) []byte {
	return []byte("01,S,R,300101,0000,1,,,2/\n02,R,B,1,300101,,USD,2/\n03,acc-1,USD,010,0,,/\n" +
		"16," + typ + "," + amount + ",,BREF-" + ref + "," + ref + "/\n49,0,2/\n98,0,1,4/\n99,0,1,6/\n")
}

// TestStatementCreditIsAReturnOnlyWithReturnInformationAndItsAmount: a
// credit under a settlement's reference whose amount is zero or unknown,
// in another currency, or that carries no return information books
// nothing, in any format and whatever the settlement's state; a statement
// never fails a settlement; a zero or unknown amount is flagged.
func TestStatementCreditIsAReturnOnlyWithReturnInformationAndItsAmount(t *testing.T) {
	t.Parallel()
	type want struct {
		state settlement.State
		flag  string
	}
	for _, tc := range []struct {
		name  string
		st    settlement.State
		ccy   string
		file  func(ref string) []byte
		want  want
		extra string // a word the flag's detail must hold
	}{
		{"camt zero, confirmed", settlement.Confirmed, "EUR", func(ref string) []byte {
			return camttest.Camt053(ref, camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Returned("R1", ref, 0, "AC04")}})
		}, want{settlement.Confirmed, reconcile.ReasonStatementMismatch}, "amount"},
		{"camt no amount in a batch, confirmed", settlement.Confirmed, "EUR", func(ref string) []byte {
			return camttest.Camt053(ref, camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{{Ref: "R1", Amount: 5000, Credit: true,
				Txs: []camttest.Tx{{E2E: ref, Rtr: "AC04"}, {E2E: "someone-else", Rtr: "AC04"}}}}})
		}, want{settlement.Confirmed, reconcile.ReasonStatementMismatch}, "amount"},
		{"camt zero, uncertain", settlement.Uncertain, "EUR", func(ref string) []byte {
			return camttest.Camt053(ref, camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Returned("R1", ref, 0, "AC04")}})
		}, want{settlement.Uncertain, reconcile.ReasonStatementMismatch}, "amount"},
		{"camt full return, uncertain: never failed by a statement", settlement.Uncertain, "EUR", func(ref string) []byte {
			return camttest.Camt053(ref, camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Returned("R1", ref, 5000, "AC04")}})
		}, want{settlement.Uncertain, ""}, ""},
		{"camt full reversal, sent: never failed by a statement", settlement.Sent, "EUR", func(ref string) []byte {
			return camttest.Camt053(ref, camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{{Ref: "R1", Amount: 5000, Credit: true, Reversal: true,
				Txs: []camttest.Tx{{E2E: ref, Amount: 5000}}}}})
		}, want{settlement.Sent, ""}, ""},
		{"camt credit without return information, confirmed", settlement.Confirmed, "EUR", func(ref string) []byte {
			return camttest.Camt053(ref, camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{{Ref: "R1", Amount: 5000, Credit: true,
				Txs: []camttest.Tx{{E2E: ref, Amount: 5000}}}}})
		}, want{settlement.Confirmed, ""}, ""},
		{"camt return in another currency, confirmed", settlement.Confirmed, "USD", func(ref string) []byte {
			return camttest.Camt053(ref, camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Returned("R1", ref, 5000, "AC04")}})
		}, want{settlement.Confirmed, reconcile.ReasonStatementMismatch}, "currency"},
		{"mt940 zero, confirmed", settlement.Confirmed, "EUR", func(ref string) []byte {
			return mt940Credit("EUR", "0,00", ref, "RTRN/AC04/")
		}, want{settlement.Confirmed, reconcile.ReasonStatementMismatch}, "amount"},
		{"mt940 zero without return mark, uncertain", settlement.Uncertain, "EUR", func(ref string) []byte {
			return mt940Credit("EUR", "0,00", ref, "")
		}, want{settlement.Uncertain, ""}, ""},
		{"mt940 full return in another currency, confirmed", settlement.Confirmed, "EUR", func(ref string) []byte {
			return mt940Credit("GBP", "50,00", ref, "RTRN/AC04/")
		}, want{settlement.Confirmed, reconcile.ReasonStatementMismatch}, "currency"},
		{"bai2 zero return item, confirmed", settlement.Confirmed, "USD", func(ref string) []byte {
			return bai2Credit("266", "0", ref)
		}, want{settlement.Confirmed, reconcile.ReasonStatementMismatch}, "amount"},
		{"bai2 credit that is no return item, confirmed", settlement.Confirmed, "USD", func(ref string) []byte {
			return bai2Credit("195", "5000", ref)
		}, want{settlement.Confirmed, ""}, ""},
		{"bai2 full return item, uncertain", settlement.Uncertain, "USD", func(ref string) []byte {
			return bai2Credit("266", "5000", ref)
		}, want{settlement.Uncertain, ""}, ""},
		{"bai2 debit return item is no payment, uncertain", settlement.Uncertain, "USD", func(ref string) []byte {
			return bai2Credit("555", "5000", ref)
		}, want{settlement.Uncertain, ""}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupSafety(t)
			ref := "set-" + strings.NewReplacer(" ", "-", ",", "", ":", "").Replace(tc.name)
			b.seed(t, ref, 5000, tc.ccy, tc.st)
			res, err := b.im.Import(context.Background(), "file", bytes.NewReader(tc.file(ref)))
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			got := b.after(t, ref)
			wantMoves := map[settlement.State]string{settlement.Confirmed: "payout"}[tc.want.state]
			if got.state != tc.want.state || got.flag != tc.want.flag || got.movements != wantMoves {
				t.Fatalf("after the statement: %+v; want %s flagged %q with movements %q", got, tc.want.state, tc.want.flag, wantMoves)
			}
			if tc.extra != "" && !strings.Contains(problem(res, ref), tc.extra) {
				t.Errorf("the import says of the line %q, not %q", problem(res, ref), tc.extra)
			}
			if tc.want.flag != "" && !res.Findings() {
				t.Errorf("the import reports no finding: %+v", res)
			}
		})
	}
}

// problem is what the import says of the line of settlement id it did
// not book.
func problem(res ImportResult, id string) string {
	for _, l := range res.NotBookedEntries {
		if l.SettlementID != nil && *l.SettlementID == id {
			return l.Problem
		}
	}
	return ""
}

// TestStatementPaymentInAnotherCurrency: a debit of the settlement's
// amount in another currency resolves nothing; it is flagged, saying
// currency, and writes no movement. The same amount in the right
// currency confirms.
func TestStatementPaymentInAnotherCurrency(t *testing.T) {
	t.Parallel()
	b := setupSafety(t)
	b.seed(t, "usd-1", 1_000_000, "USD", settlement.Uncertain)
	b.seed(t, "usd-2", 1_000_000, "USD", settlement.Sent)
	b.seed(t, "eur-ok", 1_000_000, "EUR", settlement.Uncertain)
	jpy := []byte(":20:JPY\n:25:acc-1\n:28C:1/1\n:60F:C300101JPY5000000\n" +
		":61:3001010101D1000000NTRFNONREF//J1\n:86:/EREF/usd-1/\n" +
		":62F:C300101JPY4000000\n")
	res, err := b.im.Import(context.Background(), "jpy.sta", bytes.NewReader(jpy))
	if err != nil {
		t.Fatal(err)
	}
	said := problem(res, "usd-1")
	bai := []byte("01,S,R,300101,0000,1,,,2/\n02,R,B,1,300101,,GBP,2/\n03,acc-1,GBP,010,0,,/\n" +
		"16,495,1000000,,B1,usd-2/\n49,0,2/\n98,0,1,4/\n99,0,1,6/\n")
	if res, err = b.im.Import(context.Background(), "gbp.bai", bytes.NewReader(bai)); err != nil {
		t.Fatal(err)
	}
	said += " / " + problem(res, "usd-2")
	if strings.Count(said, "currency") != 2 {
		t.Errorf("the imports say %q of the two lines, not currency", said)
	}
	for _, id := range []string{"usd-1", "usd-2"} {
		got := b.after(t, id)
		if got.state == settlement.Confirmed || got.movements != "" || got.flag != reconcile.ReasonStatementMismatch {
			t.Errorf("%s after a debit in another currency: %+v; want not confirmed, no movement, flagged %s", id, got, reconcile.ReasonStatementMismatch)
		}
	}
	if _, err := b.im.Import(context.Background(), "eur.xml", bytes.NewReader(camttest.Camt053("eur", camttest.Stmt{Account: "acc-1",
		Entries: []camttest.Entry{camttest.Debit("E1", "eur-ok", 1_000_000)}}))); err != nil {
		t.Fatal(err)
	}
	if got := b.after(t, "eur-ok"); got.state != settlement.Confirmed || got.movements != "payout" {
		t.Errorf("after a debit of its amount and currency: %+v; want confirmed with its payout", got)
	}
}

// TestStatementLineWithoutAmountBlocksNothing: a batch whose details carry
// no amount under two settlements' references, next to lines that pay
// and return others: the import succeeds, the other lines are booked, the
// two are flagged and listed; importing the file again succeeds too.
func TestStatementLineWithoutAmountBlocksNothing(t *testing.T) {
	t.Parallel()
	b := setupSafety(t)
	b.seed(t, "nul-paid", 700, "EUR", settlement.Uncertain)
	b.seed(t, "nul-back", 800, "EUR", settlement.Confirmed)
	b.seed(t, "ok-paid", 900, "EUR", settlement.Uncertain)
	b.seed(t, "ok-back", 1000, "EUR", settlement.Confirmed)
	file := camttest.Camt053("nul", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{
		{Ref: "B1", Amount: 1500, Txs: []camttest.Tx{{E2E: "nul-paid"}, {E2E: "stranger"}}},
		camttest.Debit("E2", "ok-paid", 900),
		{Ref: "B3", Amount: 1600, Credit: true, Txs: []camttest.Tx{{E2E: "nul-back", Rtr: "AC04"}, {E2E: "stranger-2", Rtr: "AC04"}}},
		camttest.Returned("E4", "ok-back", 1000, "AC04"),
	}})
	for i, name := range []string{"nul.xml", "nul-again.xml"} {
		res, err := b.im.Import(context.Background(), name, bytes.NewReader(file))
		if err != nil {
			t.Fatalf("import %d: %v", i+1, err)
		}
		if res.NotBooked != 2 || len(res.NotBookedEntries) != 2 || !res.Findings() {
			t.Fatalf("import %d: %d lines not booked %+v; want the two without an amount", i+1, res.NotBooked, res.NotBookedEntries)
		}
		for _, l := range res.NotBookedEntries {
			if l.Problem == "" || l.SettlementID == nil {
				t.Errorf("a line not booked without its settlement or why: %+v", l)
			}
		}
	}
	for id, want := range map[string]after{
		"nul-paid": {state: settlement.Uncertain, flag: reconcile.ReasonStatementMismatch},
		"nul-back": {state: settlement.Confirmed, flag: reconcile.ReasonStatementMismatch, movements: "payout"},
		"ok-paid":  {state: settlement.Confirmed, movements: "payout"},
		"ok-back":  {state: settlement.Returned, movements: "payout+reversal"},
	} {
		got := b.after(t, id)
		if got.state != want.state || got.flag != want.flag || got.movements != want.movements {
			t.Errorf("%s: %+v; want %+v", id, got, want)
		}
	}
}

// flipReader is a file that changes between two reads: its first read
// yields a, and after a seek back to the start, b.
type flipReader struct {
	r       *bytes.Reader
	b       []byte
	flipped bool
}

func (f *flipReader) Read(p []byte) (int, error) { return f.r.Read(p) }

func (f *flipReader) Seek(off int64, whence int) (int64, error) {
	if f.r.Size()-int64(f.r.Len()) > 0 && !f.flipped {
		f.r, f.flipped = bytes.NewReader(f.b), true
	}
	return f.r.Seek(off, whence)
}

// TestImportHashesWhatItParses: the digest stored for a file is that of
// the bytes parsed, even when the file changes while it is imported.
func TestImportHashesWhatItParses(t *testing.T) {
	t.Parallel()
	b := setupSafety(t)
	first := camttest.Camt053("first", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Debit("E1", "one", 100)}})
	second := camttest.Camt053("second", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Debit("E1", "one", 100), camttest.Debit("E2", "two", 200)}})
	res, err := b.im.Import(context.Background(), "flip.xml", &flipReader{r: bytes.NewReader(first), b: second})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(first)
	if want := "sha256:" + hex.EncodeToString(sum[:]); res.Digest != want || res.Lines != 1 {
		t.Fatalf("stored digest %s with %d lines; want %s, the digest of the one-line file that was read", res.Digest, res.Lines, want)
	}
	// A reader that can be read only once is enough.
	once := camttest.Camt053("once", camttest.Stmt{Account: "acc-1", Entries: []camttest.Entry{camttest.Debit("E1", "one", 100)}})
	if res, err := b.im.Import(context.Background(), "-", io.MultiReader(bytes.NewReader(once))); err != nil || res.Lines != 1 {
		t.Fatalf("import of a stream: %+v, %v", res, err)
	}
}
