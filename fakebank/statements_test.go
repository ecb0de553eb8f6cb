package fakebank_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/statement"
)

// books is what the statement tests put in the bank, and what the
// statements must say about it, computed here independently of the
// bank's own rendering.
type books struct {
	tb       *testBundle
	payments []bookedPayment
}

// bookedPayment is a payment made by the test and what became of it.
type bookedPayment struct {
	id                           string
	req                          bankclient.PaymentRequest
	settledOn, returnedOn, cause string // dates; cause is the return reason
}

var (
	day1 = t0.Truncate(24 * time.Hour)
	day2 = day1.AddDate(0, 0, 1)
)

// pay makes a payment that settles at once (settle delay 0), or fails
// when failing is true.
func (bk *books) pay(t *testing.T, account, currency, ref string, amount int64, failing bool) bookedPayment {
	t.Helper()
	f := fakebank.Faults{}
	if failing {
		f.SettlementFailureRate = 1
	}
	bk.tb.setFaults(t, f)
	req := bankclient.PaymentRequest{AmountCents: amount, Currency: currency, DebtorAccount: account,
		CreditorAccount: "Creditor of " + ref, Reference: ref}
	a := bk.tb.post(t, fmt.Sprintf("key-%d", len(bk.payments)), req)
	if a.status != http.StatusCreated {
		t.Fatalf("pay %s: %d %s", ref, a.status, a.body)
	}
	p := bookedPayment{id: a.payment(t).ID, req: req}
	if !failing {
		p.settledOn = bk.tb.clock.Now().UTC().Format(time.DateOnly)
	}
	bk.payments = append(bk.payments, p)
	return p
}

// returnPayment makes payment i come back now.
func (bk *books) returnPayment(t *testing.T, i int, reason string) {
	t.Helper()
	if err := bk.tb.bank.Return(bk.payments[i].id, reason); err != nil {
		t.Fatalf("return %s: %v", bk.payments[i].id, err)
	}
	bk.payments[i].returnedOn, bk.payments[i].cause = bk.tb.clock.Now().UTC().Format(time.DateOnly), reason
}

// setupBooks fills a bank over two days: on day 1 payouts from acc-1 in
// EUR (six, so that batches of four split them 4+2), one in USD, one from
// an IBAN in JPY (no minor unit), one that fails, and one whose reference
// BAI2 and MT940 cannot carry; on day 2 one of day 1's comes back and a new
// one goes out.
func setupBooks(t *testing.T) *books {
	t.Helper()
	bk := &books{tb: setup(t, fakebank.Options{})}
	for i, amount := range []int64{1000, 2050, 5, 99_999, 120, 7} {
		bk.pay(t, "acc-1", "EUR", fmt.Sprintf("settle-%04d", i+1), amount, false)
	}
	bk.pay(t, "acc-1", "USD", "settle-usd-1", 777, false)
	bk.pay(t, "DE89370400440532013000", "JPY", "settle-jpy-1", 5000, false)
	bk.pay(t, "acc-1", "EUR", "settle-failed", 300, true)
	bk.pay(t, "acc-1", "EUR", "odd/ref,with:marks", 40, false)
	bk.tb.clock.Advance(24 * time.Hour)
	bk.returnPayment(t, 1, "AC04")
	bk.tb.clock.Advance(time.Hour)
	bk.pay(t, "acc-1", "EUR", "settle-0007", 300, false)
	return bk
}

// figures is what a statement says, reduced to what a reconciliation uses.
type figures struct {
	account, currency string
	opening, closing  int64
	balanced          bool
	lines             []string // "debit 1000 settle-0001", "credit 2050 settle-0002 AC04"
}

// expect computes the statements of day from the payments.
func (bk *books) expect(day time.Time, format fakebank.StatementFormat) []figures {
	d := day.Format(time.DateOnly)
	byKey := map[string]*figures{}
	var keys []string
	for _, p := range bk.payments {
		if p.settledOn == "" || p.settledOn > d {
			continue
		}
		k := p.req.DebtorAccount + " " + p.req.Currency
		f := byKey[k]
		if f == nil {
			f = &figures{account: p.req.DebtorAccount, currency: p.req.Currency, balanced: true}
			byKey[k] = f
			keys = append(keys, k)
		}
		ref := p.req.Reference
		if format == fakebank.FormatBAI2 && strings.ContainsAny(ref, ",/") ||
			format == fakebank.FormatMT940 && strings.ContainsAny(ref, "/:") {
			ref = "-" // a reference the format cannot carry
		}
		if p.settledOn < d {
			f.opening -= p.req.AmountCents
		} else {
			f.lines = append(f.lines, fmt.Sprintf("debit %d %s", p.req.AmountCents, ref))
		}
		f.closing -= p.req.AmountCents
		if p.returnedOn != "" && p.returnedOn <= d {
			if p.returnedOn < d {
				f.opening += p.req.AmountCents
			} else {
				reason := p.cause
				if format == fakebank.FormatBAI2 {
					reason = "266" // BAI2 says a return by its type code
				}
				f.lines = append(f.lines, fmt.Sprintf("credit %d %s %s", p.req.AmountCents, ref, reason))
			}
			f.closing += p.req.AmountCents
		}
	}
	slices.Sort(keys)
	var out []figures
	for _, k := range keys {
		f := *byKey[k]
		slices.Sort(f.lines)
		if format == fakebank.FormatCamt054 {
			f.opening, f.closing, f.balanced = 0, 0, false // a notification carries no balances
		}
		out = append(out, f)
	}
	return out
}

// reduce is what our own parser reads in a rendered file.
func reduce(t *testing.T, file *statement.File) []figures {
	t.Helper()
	var out []figures
	for _, st := range file.Statements {
		f := figures{account: st.Account, currency: st.Currency}
		if st.OpeningMinor != nil {
			f.opening, f.closing = *st.OpeningMinor, *st.ClosingMinor
		}
		if st.Balanced != nil {
			f.balanced = *st.Balanced
		}
		for _, e := range st.Entries {
			var sum int64
			for _, tx := range e.Transactions {
				ref := tx.Reference
				if ref == "" {
					ref = "-"
				}
				line := fmt.Sprintf("%s %d %s", e.Direction, *tx.AmountMinor, ref)
				if tx.ReturnReason != "" {
					line += " " + tx.ReturnReason
				}
				f.lines = append(f.lines, line)
				sum += *tx.AmountMinor
				if e.Reversal {
					t.Errorf("a return rendered as a reversal: %+v", e)
				}
			}
			if sum != e.AmountMinor || len(e.Transactions) == 0 {
				t.Errorf("entry %s: %d details add up to %d, entry amount %d", e.EntryRef, len(e.Transactions), sum, e.AmountMinor)
			}
		}
		slices.Sort(f.lines)
		out = append(out, f)
	}
	return out
}

// get fetches a statement over HTTP.
func (tb *testBundle) get(t *testing.T, path, accept string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, tb.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := tb.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header.Get("Content-Type"), body
}

// TestStatementsRoundTrip renders two days of books in every format, over
// HTTP, and reads them back with settle's own parser: every statement
// holds the figures the payments call for, and balances.
func TestStatementsRoundTrip(t *testing.T) {
	t.Parallel()
	bk := setupBooks(t)
	for _, format := range fakebank.StatementFormats {
		for _, day := range []time.Time{day1, day2} {
			t.Run(fmt.Sprintf("%s/%s", format, day.Format(time.DateOnly)), func(t *testing.T) {
				status, ctype, body := bk.tb.get(t, fmt.Sprintf("/v1/statements/%s?format=%s&batch=4", day.Format(time.DateOnly), format), "")
				if status != http.StatusOK || ctype != format.MediaType() {
					t.Fatalf("%d %s %s", status, ctype, body)
				}
				file, err := statement.Parse("statement", bytes.NewReader(body))
				if err != nil {
					t.Fatalf("our parser refuses it: %v\n%s", err, body)
				}
				if string(file.Format) != string(format) {
					t.Errorf("read as %s", file.Format)
				}
				got, want := reduce(t, file), bk.expect(day, format)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("statement says\n%v\nthe books say\n%v\n%s", got, want, body)
				}
				switch format {
				case fakebank.FormatCamt053, fakebank.FormatCamt054:
					checkCamt(t, format, body)
				case fakebank.FormatBAI2:
					checkBAI2(t, body)
				case fakebank.FormatMT940:
					checkMT940(t, body)
				}
			})
		}
	}
}

// TestStatementsBatches checks that camt books a day's payouts in batches
// of the size asked for, one TxDtls per payment, and one by one with
// batch=1, where the entry references are the payment ids that BAI2 and
// MT940 use too.
func TestStatementsBatches(t *testing.T) {
	t.Parallel()
	bk := setupBooks(t)
	entries := func(batch int) []string {
		body, err := bk.tb.bank.RenderStatement(day1, fakebank.FormatCamt053, batch)
		if err != nil {
			t.Fatal(err)
		}
		file, err := statement.Parse("s", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, st := range file.Statements {
			for _, e := range st.Entries {
				out = append(out, fmt.Sprintf("%s:%d", e.EntryRef, len(e.Transactions)))
			}
		}
		return out
	}
	// acc-1 EUR has seven settled payouts on day 1 (the failed one is not
	// booked): 4 + 3 with batches of 4.
	if got := entries(4); !slices.Contains(got, "btc_000000000001_4:4") || !slices.Contains(got, "btc_000000000005_3:3") {
		t.Errorf("batches of 4: %v", got)
	}
	one := entries(1)
	mt, err := bk.tb.bank.RenderStatement(day1, fakebank.FormatMT940, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range one {
		ref, n, _ := strings.Cut(e, ":")
		if n != "1" || !strings.Contains(string(mt), "//"+ref+"\n") {
			t.Errorf("with batch=1, entry %s is not the payment the MT940 books", e)
		}
	}
}

func TestStatementsHTTP(t *testing.T) {
	t.Parallel()
	bk := setupBooks(t)
	d := day1.Format(time.DateOnly)
	for _, c := range []struct {
		path, accept string
		status       int
		ctype        string
	}{
		{"/v1/statements/" + d, "", 200, fakebank.FormatCamt053.MediaType()},
		{"/v1/statements/" + d, "application/xml", 200, fakebank.FormatCamt053.MediaType()},
		{"/v1/statements/" + d, "text/html;q=0.9, application/vnd.swift.mt940", 200, fakebank.FormatMT940.MediaType()},
		{"/v1/statements/" + d, fakebank.FormatBAI2.MediaType(), 200, fakebank.FormatBAI2.MediaType()},
		{"/v1/statements/" + d, fakebank.FormatCamt054.MediaType(), 200, fakebank.FormatCamt054.MediaType()},
		{"/v1/statements/" + d + "?format=BAI2", "application/xml", 200, fakebank.FormatBAI2.MediaType()},
		{"/v1/statements/" + d, "text/html", 406, "application/json"},
		{"/v1/statements/" + d + "?format=pdf", "", 400, "application/json"},
		{"/v1/statements/" + d + "?batch=0", "", 400, "application/json"},
		{"/v1/statements/2030-02-30", "", 400, "application/json"},
		{"/v1/statements/yesterday", "", 400, "application/json"},
		{"/v1/statements/2029-12-31", "", 404, "application/json"}, // before the first booking
		{"/v1/statements/2031-01-01", "", 404, "application/json"}, // has not begun
	} {
		status, ctype, body := bk.tb.get(t, c.path, c.accept)
		if status != c.status || ctype != c.ctype {
			t.Errorf("GET %s (Accept %q): %d %s, want %d %s: %s", c.path, c.accept, status, ctype, c.status, c.ctype, body)
		}
	}
}

func TestReturnAdmin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tb := setup(t, fakebank.Options{StatePath: filepath.Join(dir, "bank.json"), Faults: fakebank.Faults{SettleDelayMS: 60_000}})
	p := tb.post(t, "k1", paymentReq("r1")).payment(t)
	if a := tb.do(t, http.MethodPost, "/admin/returns", "", map[string]string{"payment_id": p.ID}); a.status != http.StatusConflict {
		t.Errorf("return before settlement: %d %s", a.status, a.body)
	}
	tb.clock.Advance(time.Minute)
	for _, c := range []struct {
		body   map[string]string
		status int
	}{
		{map[string]string{"payment_id": "pay_999"}, http.StatusNotFound},
		{map[string]string{"payment_id": p.ID, "reason": "closed account"}, http.StatusBadRequest},
		{map[string]string{"payment_id": p.ID, "reason": "MD06"}, http.StatusOK},
		{map[string]string{"payment_id": p.ID}, http.StatusConflict}, // came back already
	} {
		if a := tb.do(t, http.MethodPost, "/admin/returns", "", c.body); a.status != c.status {
			t.Errorf("return %v: %d %s, want %d", c.body, a.status, a.body, c.status)
		}
	}
	got := tb.mustByKey(t, "k1")
	if got.Status != bankclient.StatusReturned || !strings.Contains(got.FailureReason, "MD06") {
		t.Errorf("after the return: %+v", got)
	}
	// The return is in the books on disk.
	if err := tb.bank.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := fakebank.New(fakebank.Options{StatePath: filepath.Join(dir, "bank.json"), Now: tb.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.Close() })
	body, err := again.RenderStatement(tb.clock.Now(), fakebank.FormatCamt053, 0)
	if err != nil || !bytes.Contains(body, []byte("<RtrInf><Rsn><Cd>MD06</Cd></Rsn></RtrInf>")) {
		t.Errorf("the reloaded books lost the return: %v\n%s", err, body)
	}
	if err := again.Return(p.ID, ""); !errors.Is(err, fakebank.ErrNotSettled) {
		t.Errorf("second return after reload: %v", err)
	}
}

// ---- well-formedness per the standards ----

// camtSequences are the children the bank writes, in the order of the
// XSD sequences of camt.053.001.08 and camt.054.001.08 (GroupHeader81,
// AccountStatement9, AccountNotification17, CashAccount39, CashBalance8,
// ReportEntry10, EntryDetails9, BatchInformation2, EntryTransaction10,
// TransactionReferences6, TransactionParties6, PaymentReturnReason5), the
// mandatory ones marked with !.
var camtSequences = map[string][]string{
	"BkToCstmrStmt":         {"!GrpHdr", "!Stmt"},
	"BkToCstmrDbtCdtNtfctn": {"!GrpHdr", "!Ntfctn"},
	"GrpHdr":                {"!MsgId", "!CreDtTm"},
	"Stmt":                  {"!Id", "ElctrncSeqNb", "CreDtTm", "FrToDt", "!Acct", "!Bal", "Ntry"},
	"Ntfctn":                {"!Id", "ElctrncSeqNb", "CreDtTm", "FrToDt", "!Acct", "Ntry"},
	"FrToDt":                {"!FrDtTm", "!ToDtTm"},
	"Acct":                  {"!Id", "Ccy"},
	"Bal":                   {"!Tp", "!Amt", "!CdtDbtInd", "!Dt"},
	"Ntry":                  {"!Amt", "!CdtDbtInd", "!Sts", "BookgDt", "ValDt", "AcctSvcrRef", "!BkTxCd", "NtryDtls"},
	"NtryDtls":              {"Btch", "TxDtls"},
	"Btch":                  {"NbOfTxs", "TtlAmt", "CdtDbtInd"},
	"TxDtls":                {"Refs", "!Amt", "!CdtDbtInd", "RltdPties", "RtrInf"},
	"Refs":                  {"AcctSvcrRef", "EndToEndId"},
	"RltdPties":             {"Dbtr", "Cdtr"},
	"RtrInf":                {"Rsn"},
	"BkTxCd":                {"!Domn"},
	"Domn":                  {"!Cd", "!Fmly"},
	"Fmly":                  {"!Cd", "!SubFmlyCd"},
}

type xmlNode struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []xmlNode  `xml:",any"`
}

func (n *xmlNode) child(name string) *xmlNode {
	for i := range n.Children {
		if n.Children[i].XMLName.Local == name {
			return &n.Children[i]
		}
	}
	return nil
}

// checkCamt checks the namespace, the order and presence of the elements
// the bank writes, and that batch totals and entry amounts add up.
func checkCamt(t *testing.T, format fakebank.StatementFormat, body []byte) {
	t.Helper()
	var doc xmlNode
	if err := xml.Unmarshal(body, &doc); err != nil {
		t.Fatalf("not well-formed XML: %v", err)
	}
	ns := fakebank.NamespaceCamt053
	if format == fakebank.FormatCamt054 {
		ns = fakebank.NamespaceCamt054
	}
	if doc.XMLName.Local != "Document" || doc.XMLName.Space != ns || len(doc.Children) != 1 {
		t.Fatalf("root %v, want Document in %s with one message", doc.XMLName, ns)
	}
	var walk func(n *xmlNode, path string)
	walk = func(n *xmlNode, path string) {
		if n.XMLName.Space != ns {
			t.Errorf("%s: namespace %q", path, n.XMLName.Space)
		}
		seq, known := camtSequences[n.XMLName.Local]
		if known {
			pos := 0
			for _, c := range n.Children {
				i := slices.IndexFunc(seq, func(s string) bool { return strings.Trim(s, "!") == c.XMLName.Local })
				if i < 0 {
					t.Errorf("%s: %s is not written there", path, c.XMLName.Local)
					continue
				}
				if i < pos {
					t.Errorf("%s: %s out of the schema's order", path, c.XMLName.Local)
				}
				pos = i
			}
			for _, s := range seq {
				if strings.Contains(s, "!") && n.child(strings.Trim(s, "!")) == nil {
					t.Errorf("%s: mandatory %s missing", path, strings.Trim(s, "!"))
				}
			}
		}
		for i := range n.Children {
			walk(&n.Children[i], path+"/"+n.Children[i].XMLName.Local)
		}
	}
	walk(&doc.Children[0], doc.Children[0].XMLName.Local)

	// Amounts: an entry's amount is its details' sum, a batch says how many
	// and how much; every amount has a currency.
	amount := func(n *xmlNode) int64 {
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Text, ".", ""), 10, 64)
		if err != nil || len(n.Attrs) != 1 || n.Attrs[0].Name.Local != "Ccy" {
			t.Errorf("amount %q %v", n.Text, n.Attrs)
		}
		return v
	}
	for _, st := range doc.Children[0].Children[1:] {
		for _, e := range st.Children {
			if e.XMLName.Local != "Ntry" {
				continue
			}
			d := e.child("NtryDtls")
			var sum int64
			var n int
			for _, tx := range d.Children {
				if tx.XMLName.Local == "TxDtls" {
					sum += amount(tx.child("Amt"))
					n++
					if ref := tx.child("Refs").child("EndToEndId"); ref == nil || ref.Text == "" {
						t.Errorf("a detail without EndToEndId")
					}
				}
			}
			if got := amount(e.child("Amt")); got != sum {
				t.Errorf("entry %s of %d, details add up to %d", e.child("AcctSvcrRef").Text, got, sum)
			}
			if b := d.child("Btch"); b != nil && (b.child("NbOfTxs").Text != strconv.Itoa(n) || amount(b.child("TtlAmt")) != sum) {
				t.Errorf("batch says %s transactions, has %d", b.child("NbOfTxs").Text, n)
			}
		}
	}
}

// checkBAI2 checks the records of a BAI2 file: every line one record
// ending in '/', and the 49, 98 and 99 trailers' control totals (the sum of
// the amounts in the 03 and 16 records they close) and record counts.
func checkBAI2(t *testing.T, body []byte) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	var acct, group, file struct{ total, records int64 }
	var accounts, groups int64
	num := func(s string) int64 {
		v, err := strconv.ParseInt(strings.TrimPrefix(s, "+"), 10, 64)
		if err != nil {
			t.Errorf("not a number: %q", s)
		}
		return v
	}
	for i, line := range lines {
		if !strings.HasSuffix(line, "/") || strings.Count(line, "/") != 1 {
			t.Fatalf("line %d is not one /-terminated record: %q", i+1, line)
		}
		f := strings.Split(strings.TrimSuffix(line, "/"), ",")
		file.records++
		group.records++
		acct.records++
		switch f[0] {
		case "01":
			if f[len(f)-1] != "2" {
				t.Errorf("version %q, want 2", f[len(f)-1])
			}
		case "02":
			group = struct{ total, records int64 }{0, 1}
			groups++
		case "03":
			acct = struct{ total, records int64 }{0, 1}
			accounts++
			for j := 3; j+1 < len(f); j += 4 {
				acct.total += num(f[j+1])
			}
		case "16":
			acct.total += num(f[2])
		case "49":
			if num(f[1]) != acct.total || num(f[2]) != acct.records {
				t.Errorf("49 says %s, %s; the account adds up to %d in %d records", f[1], f[2], acct.total, acct.records)
			}
			group.total += acct.total
		case "98":
			if num(f[1]) != group.total || num(f[2]) != accounts || num(f[3]) != group.records {
				t.Errorf("98 says %v; the group adds up to %d, %d accounts, %d records", f[1:], group.total, accounts, group.records)
			}
			file.total += group.total
		case "99":
			if num(f[1]) != file.total || num(f[2]) != groups || num(f[3]) != file.records {
				t.Errorf("99 says %v; the file adds up to %d, %d groups, %d records", f[1:], file.total, groups, file.records)
			}
		default:
			t.Errorf("record type %s", f[0])
		}
	}
	if !strings.HasPrefix(lines[0], "01,") || !strings.HasPrefix(lines[len(lines)-1], "99,") {
		t.Errorf("file does not run from 01 to 99")
	}
}

var (
	mt61 = regexp.MustCompile(`^:61:\d{6}\d{4}[CD]\d+,\d*N[A-Z0-9]{3}[^/]{1,16}//.{1,16}$`)
	mt6x = regexp.MustCompile(`^:6[02]F:[CD]\d{6}[A-Z]{3}\d+,\d*$`)
)

// checkMT940 checks the fields of each message, their order and their
// lengths: lines of at most 65 characters, :86: of at most six lines.
func checkMT940(t *testing.T, body []byte) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	order := []string{":20:", ":25:", ":28C:", ":60F:", ":61:", ":86:", ":62F:", "-"}
	state, cont := -1, 0
	for i, line := range lines {
		if len(line) > 65 {
			t.Errorf("line %d longer than 65: %q", i+1, line)
		}
		tag := line
		if j := strings.Index(line[1:], ":"); line[0] == ':' && j > 0 {
			tag = line[:j+2]
		}
		k := slices.Index(order, tag)
		if k < 0 {
			if state != 5 {
				t.Errorf("line %d continues a field that cannot continue: %q", i+1, line)
			}
			if cont++; cont > 5 {
				t.Errorf("line %d: :86: longer than six lines", i+1)
			}
			continue
		}
		cont = 0
		ok := k == state+1 || (k == 4 && state == 5) || (k == 6 && state == 3) || (k == 6 && state == 5) || (k == 0 && state == 7)
		if !ok {
			t.Errorf("line %d: %s after %s", i+1, tag, order[max(state, 0)])
		}
		state = k
		switch tag {
		case ":20:":
			if len(line)-4 > 16 {
				t.Errorf("line %d: :20: longer than 16", i+1)
			}
		case ":61:":
			if !mt61.MatchString(line) {
				t.Errorf("line %d: %q is not a :61: statement line", i+1, line)
			}
		case ":60F:", ":62F:":
			if !mt6x.MatchString(line) {
				t.Errorf("line %d: %q is not a balance", i+1, line)
			}
		}
	}
	if state != 7 {
		t.Errorf("the last message does not end with -")
	}
}

// TestStatementsFromTheBinary asks `settle fakebank` for the day's
// statement in every format after a payment and a return: the wiring of
// the command, end to end.
func TestStatementsFromTheBinary(t *testing.T) {
	t.Parallel()
	bp := startBankProcess(t, "--faults", `{"settle_delay_ms":0}`)
	client, err := settle.New(bp.url, bankclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Send(t.Context(), "k1", bankclient.PaymentRequest{AmountCents: 1234, Currency: "EUR",
		DebtorAccount: "acc-1", CreditorAccount: "Ada", Reference: "settle-1"})
	if err != nil {
		t.Fatal(err)
	}
	ret, err := http.Post(bp.url+"/admin/returns", "application/json", strings.NewReader(`{"payment_id":"`+res.Payment.ID+`","reason":"MD06"}`))
	if err != nil {
		t.Fatal(err)
	}
	ret.Body.Close()
	if ret.StatusCode != http.StatusOK {
		t.Fatalf("return: %s", ret.Status)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	for _, f := range fakebank.StatementFormats {
		req, err := http.NewRequest(http.MethodGet, bp.url+"/v1/statements/"+today, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", f.MediaType())
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %v %s", f, r.Status, err, body)
		}
		file, err := statement.Parse(string(f), bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if st := file.Statements[0]; len(st.Entries) != 2 || st.Entries[1].ReturnReason == "" {
			t.Errorf("%s: %+v", f, st)
		}
	}
}
