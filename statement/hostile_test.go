package statement

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/settle/settle/settlement"
)

// repeatReader yields prefix, then n bytes of fill, then suffix, without
// holding them: a 50 MB line costs nothing to make.
type repeatReader struct {
	prefix, suffix []byte
	fill           byte
	n              int64
}

func (r *repeatReader) Read(b []byte) (int, error) {
	switch {
	case len(r.prefix) > 0:
		n := copy(b, r.prefix)
		r.prefix = r.prefix[n:]
		return n, nil
	case r.n > 0:
		k := min(int64(len(b)), r.n)
		for i := range k {
			b[i] = r.fill
		}
		r.n -= k
		return int(k), nil
	case len(r.suffix) > 0:
		n := copy(b, r.suffix)
		r.suffix = r.suffix[n:]
		return n, nil
	}
	return 0, io.EOF
}

func fiftyMB(prefix, suffix string, fill byte) io.Reader {
	return &repeatReader{prefix: []byte(prefix), suffix: []byte(suffix), fill: fill, n: 50 << 20}
}

// camtDoc wraps one statement body in a camt.053 document.
func camtDoc(stmt string) string {
	return `<?xml version="1.0"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02"><BkToCstmrStmt>
<Stmt><Acct><Id><IBAN>DE89370400440532013000</IBAN></Id><Ccy>EUR</Ccy></Acct>
` + stmt + `
</Stmt></BkToCstmrStmt></Document>
`
}

func ntry(amt, ccy, extra string) string {
	return `<Ntry><Amt Ccy="` + ccy + `">` + amt + `</Amt><CdtDbtInd>CRDT</CdtDbtInd>` + extra + `</Ntry>`
}

const mt940Head = ":20:REF\n:25:DE89370400440532013000\n:28C:1/1\n:60F:C240101EUR100,00\n"

const bai2Head = "01,S,R,240101,0000,1,,,2/\n02,R,B,1,240101,,USD,2/\n03,1,,010,100,,/\n"

// TestRefused feeds files that must be refused and checks the error: its
// kind, and that it names the file and the line or element.
func TestRefused(t *testing.T) {
	t.Parallel()
	truncated, err := os.ReadFile(filepath.Join("testdata", "camt053_v02.xml"))
	if err != nil {
		t.Fatal(err)
	}
	truncated = truncated[:len(truncated)*2/3]
	for _, tc := range []struct {
		name string
		r    io.Reader
		kind error
		says []string // substrings of the message, besides the file name
	}{
		{"empty", strings.NewReader(""), ErrNotStatement, []string{"empty file"}},
		{"white space", strings.NewReader(" \r\n\t\n"), ErrNotStatement, []string{"white space"}},
		{"pdf", strings.NewReader("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n"), ErrNotStatement, []string{"PDF"}},
		{"zip", strings.NewReader("PK\x03\x04\x14\x00"), ErrNotStatement, []string{"ZIP"}},
		{"utf-16", strings.NewReader("\xff\xfe<\x00D\x00"), ErrNotStatement, []string{"UTF-16"}},
		{"plain text", strings.NewReader("Date,Amount\n2024-01-01,10.00\n"), ErrNotStatement, []string{`"Date,Amount`}},
		{"html", strings.NewReader("<!-- x --><html><body><p>statement</p></body></html>"), ErrNotStatement, []string{"XML document without"}},
		{"pain.001", strings.NewReader(`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.001.001.03"><CstmrCdtTrfInitn/></Document>`), ErrNotStatement, nil},
		{"camt.052", strings.NewReader(`<Document><BkToCstmrAcctRpt><Rpt/></BkToCstmrAcctRpt></Document>`), ErrNotStatement, []string{"camt.052", "BkToCstmrAcctRpt"}},
		{"camt truncated", bytes.NewReader(truncated), ErrMalformed, []string{"line ", "unexpected end of file"}},
		{"camt not well-formed", strings.NewReader("<Document><BkToCstmrStmt><Stmt></Ntry></Stmt></BkToCstmrStmt></Document>"), ErrMalformed, []string{"line 1", "Ntry"}},
		{"billion laughs", strings.NewReader(`<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<Document><BkToCstmrStmt><Stmt><Acct><Id><IBAN>&lol2;</IBAN></Id></Acct></Stmt></BkToCstmrStmt></Document>`), ErrMalformed, []string{"line 2", "DOCTYPE"}},
		{"external entity", strings.NewReader(`<?xml version="1.0"?><!DOCTYPE d [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><Document>&xxe;</Document>`), ErrMalformed, []string{"DOCTYPE"}},
		{"undeclared entity", strings.NewReader(camtDoc(ntry("1.00", "EUR", "<NtryRef>&xxe;</NtryRef>"))), ErrMalformed, []string{"line 4", "entity"}},
		{"deep nesting", strings.NewReader(strings.Repeat("<a>", 100) + strings.Repeat("</a>", 100)), ErrMalformed, []string{"nested more than"}},
		{"camt 50 MB text", fiftyMB(strings.Split(camtDoc("<Ntry><NtryRef>"), "</Stmt>")[0], "</NtryRef></Ntry></Stmt></BkToCstmrStmt></Document>", 'A'), ErrMalformed, []string{"bytes of text"}},
		{"camt 50 MB attribute", fiftyMB(`<Document><BkToCstmrStmt a="`, `"/></Document>`, '>'), ErrMalformed, []string{"bytes of text"}},
		{"bai2 50 MB line", fiftyMB("01,S,R,240101,0000,1,,,2/ 02,", "/\n", 'x'), ErrMalformed, []string{"line 1", "longer than"}},
		{"mt940 50 MB line", fiftyMB(":20:REF\n:86:", "\n", 'x'), ErrMalformed, []string{"line 2", "longer than"}},
		{"50 MB of nothing", fiftyMB("", "", 'x'), ErrNotStatement, nil},
		{"unsupported encoding", strings.NewReader(`<?xml version="1.0" encoding="EBCDIC-US"?><Document/>`), ErrMalformed, []string{"EBCDIC-US"}},

		{"camt inexact entry", strings.NewReader(camtDoc(ntry("10.005", "EUR", ""))), ErrInexactAmount, []string{"line 4", "BkToCstmrStmt/Stmt[1]/Ntry[1]/Amt", "10.005", "EUR"}},
		{"camt inexact yen", strings.NewReader(camtDoc(ntry("1", "EUR", `<NtryDtls><TxDtls><AmtDtls><InstdAmt><Amt Ccy="JPY">100.5</Amt></InstdAmt></AmtDtls></TxDtls></NtryDtls>`))), ErrInexactAmount, []string{"Ntry[1]/NtryDtls/TxDtls/AmtDtls/InstdAmt/Amt", "JPY"}},
		{"camt inexact balance", strings.NewReader(camtDoc(`<Bal><Tp><CdOrPrtry><Cd>OPBD</Cd></CdOrPrtry></Tp><Amt Ccy="KWD">1.0001</Amt><CdtDbtInd>CRDT</CdtDbtInd></Bal>`)), ErrInexactAmount, []string{"Stmt[1]/Bal/Amt", "KWD"}},
		{"camt negative", strings.NewReader(camtDoc(ntry("-1.00", "EUR", ""))), ErrMalformed, []string{"Ntry[1]/Amt"}},
		{"camt unknown currency", strings.NewReader(camtDoc(ntry("1.00", "XYZ", ""))), settlement.ErrUnknownCurrency, []string{"Ntry[1]/Amt", "XYZ"}},
		{"camt impossible date", strings.NewReader(camtDoc(ntry("1.00", "EUR", "<BookgDt><Dt>2023-02-29</Dt></BookgDt>"))), ErrMalformed, []string{"Ntry[1]/BookgDt/Dt", "2023-02-29"}},
		{"camt impossible date-time", strings.NewReader(camtDoc(ntry("1.00", "EUR", "<ValDt><DtTm>2024-04-31T10:00:00</DtTm></ValDt>"))), ErrMalformed, []string{"Ntry[1]/ValDt/DtTm", "2024-04-31"}},
		{"camt no direction", strings.NewReader(camtDoc(`<Ntry><Amt Ccy="EUR">1.00</Amt></Ntry>`)), ErrMalformed, []string{"Ntry[1]", "CdtDbtInd"}},
		{"camt bad reversal", strings.NewReader(camtDoc(ntry("1.00", "EUR", "<RvslInd>yes</RvslInd>"))), ErrMalformed, []string{"RvslInd"}},
		{"camt 053 then 054", strings.NewReader(`<X><BkToCstmrStmt/><BkToCstmrDbtCdtNtfctn/></X>`), ErrMalformed, []string{"camt.054 message after a camt.053"}},

		{"mt940 truncated", strings.NewReader(mt940Head + ":61:240101C1,00NTRFNONREF\n"), ErrMalformed, []string{"line 1", "closing balance", "truncated"}},
		{"mt940 inexact", strings.NewReader(mt940Head + ":61:240101C1,005NTRFNONREF\n:62F:C240101EUR101,01\n"), ErrInexactAmount, []string{"line 5", "field :61:", "1,005"}},
		{"mt940 inexact yen", strings.NewReader(":20:R\n:25:A\n:60F:C240101JPY100,5\n:62F:C240101JPY100\n"), ErrInexactAmount, []string{"line 3", ":60F:", "JPY"}},
		{"mt940 impossible value date", strings.NewReader(mt940Head + ":61:230230C1,00NTRFNONREF\n:62F:C240101EUR101,00\n"), ErrMalformed, []string{"line 5", "230230"}},
		{"mt940 impossible entry date", strings.NewReader(mt940Head + ":61:2302280230C1,00NTRFNONREF\n:62F:C240101EUR101,00\n"), ErrMalformed, []string{"line 5", "2023-02-30"}},
		{"mt940 entry before opening", strings.NewReader(":20:R\n:25:A\n:61:240101C1,00NTRFNONREF\n:60F:C240101EUR1,00\n:62F:C240101EUR2,00\n"), ErrMalformed, []string{"line 3", "before the opening balance"}},
		{"mt940 no mark", strings.NewReader(mt940Head + ":61:240101X1,00NTRFNONREF\n:62F:C240101EUR101,00\n"), ErrMalformed, []string{"line 5", "no C, D, RC or RD"}},
		{"mt940 field before :20:", strings.NewReader(":25:A\n:20:R\n"), ErrMalformed, []string{"line 1", ":25:", "outside a message"}},
		{"mt940 field outside a message", strings.NewReader(mt940Head + ":62F:C240101EUR100,00\n-\n:61:240101C1,00NTRFNONREF\n"), ErrMalformed, []string{"line 7", "outside a message"}},
		{"mt940 currency changes", strings.NewReader(mt940Head + ":62F:C240101USD100,00\n"), ErrMalformed, []string{"closing balance in USD"}},

		{"bai2 truncated", strings.NewReader(bai2Head + "16,195,100,,B,C,text/\n"), ErrMalformed, []string{"line 4", "no 99", "truncated"}},
		{"bai2 impossible as-of date", strings.NewReader("01,S,R,240101,0000,1,,,2/\n02,R,B,1,230231,,USD,2/\n"), ErrMalformed, []string{"line 2", "record 02", "230231"}},
		{"bai2 impossible value date", strings.NewReader(bai2Head + "16,195,100,V,240230,,B,C/\n49,100,3/\n98,100,1,5/\n99,100,1,7/\n"), ErrMalformed, []string{"line 4", "240230"}},
		{"bai2 no direction", strings.NewReader(bai2Head + "16,890,0,,B,C/\n49,0,3/\n98,0,1,5/\n99,0,1,7/\n"), ErrMalformed, []string{"line 4", "record 16", "890"}},
		{"bai2 detail outside an account", strings.NewReader("01,S,R,240101,0000,1,,,2/\n02,R,B,1,240101,,USD,2/\n16,195,100,,B,C/\n"), ErrMalformed, []string{"line 3", "outside an account"}},
		{"bai2 not a record", strings.NewReader(bai2Head + "49,100,2/\nhello/\n"), ErrMalformed, []string{"line 5", "not a BAI2 record"}},
		{"bai2 bad amount", strings.NewReader(bai2Head + "16,195,1.00,,B,C/\n"), ErrMalformed, []string{"line 4", "1.00"}},
		{"bai2 unknown currency", strings.NewReader("01,S,R,240101,0000,1,,,2/\n02,R,B,1,240101,,XYZ,2/\n03,1,,010,100,,/\n"), settlement.ErrUnknownCurrency, []string{"line 3", "XYZ"}},
		{"bai2 88 first", strings.NewReader("01,S,R,240101,0000,1,,,2/\n88,x/\n"), ErrMalformed, []string{"line 2"}},
		{"bai2 after trailer", strings.NewReader(bai2Head + "49,100,2/\n98,100,1,4/\n99,100,1,6/\n03,2,,/\n"), ErrMalformed, []string{"line 7", "after the 99"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := "hostile-" + strings.ReplaceAll(tc.name, " ", "-")
			got, err := Parse(file, tc.r)
			if err == nil {
				t.Fatalf("Parse accepted it: %d statements", len(got.Statements))
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %q does not match %v", err, tc.kind)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != file {
				t.Errorf("error %q is not an *Error naming %s", err, file)
			}
			msg := err.Error()
			for _, s := range append([]string{file + ": "}, tc.says...) {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not say %q", msg, s)
				}
			}
		})
	}
}

// cycleReader yields prefix, then unit repeated until n bytes of it were
// given, then suffix, without holding them.
type cycleReader struct {
	prefix, unit, suffix []byte
	n, off               int64
}

func (r *cycleReader) Read(b []byte) (int, error) {
	switch {
	case len(r.prefix) > 0:
		n := copy(b, r.prefix)
		r.prefix = r.prefix[n:]
		return n, nil
	case r.n > 0:
		k := 0
		for k < len(b) && r.n > 0 {
			b[k] = r.unit[r.off%int64(len(r.unit))]
			r.off++
			r.n--
			k++
		}
		return k, nil
	case len(r.suffix) > 0:
		n := copy(b, r.suffix)
		r.suffix = r.suffix[n:]
		return n, nil
	}
	return 0, io.EOF
}

func fiftyMBOf(prefix, unit, suffix string) io.Reader {
	return &cycleReader{prefix: []byte(prefix), unit: []byte(unit), suffix: []byte(suffix), n: 50 << 20}
}

// TestEveryTokenIsBounded: markup that holds '<' (CDATA, comments,
// processing instructions), a text cut into pieces by comments, an MT940
// field continued over endless short lines and a BAI2 record continued by
// endless 88 records are each refused with an error naming the file and
// the line, before the parser holds them.
func TestEveryTokenIsBounded(t *testing.T) {
	t.Parallel()
	camtIn := func(inner string) (string, string) {
		doc := camtDoc(ntry("1.00", "EUR", "<NtryRef>"+inner+"</NtryRef>"))
		i := strings.Index(doc, inner)
		return doc[:i], doc[i+len(inner):]
	}
	cdataHead, cdataTail := camtIn("<![CDATA[ ]]>")
	commentHead, commentTail := camtIn("<!-- -->")
	piHead, piTail := camtIn("<?pi ?>")
	textHead, textTail := camtIn("QQQQ")
	for _, tc := range []struct {
		name string
		r    io.Reader
		says []string
	}{
		{"camt CDATA holding <", fiftyMBOf(cdataHead+"<![CDATA[", "a<b<", "]]>"+cdataTail), []string{"line "}},
		{"camt comment holding <", fiftyMBOf(commentHead+"<!--", "a<b<", "-->"+commentTail), []string{"line "}},
		{"camt processing instruction holding <", fiftyMBOf(piHead+"<?pi ", "a<b<", "?>"+piTail), []string{"line "}},
		{"camt text cut by comments", fiftyMBOf(textHead, "AAAAAAAA<!---->", textTail), []string{"line ", "NtryRef"}},
		{"camt text cut by CDATA", fiftyMBOf(textHead, "<![CDATA[AAAAAAAA]]>", textTail), []string{"line ", "NtryRef"}},
		{"mt940 endless continuation", fiftyMBOf(mt940Head+":61:240101C1,00NTRFNONREF\n:86:", "/NAME/continued text\n", "\n:62F:C240101EUR101,00\n"), []string{"line ", ":86:"}},
		{"bai2 endless 88 records", fiftyMBOf(bai2Head+"16,195,100,,B,C,text/\n", "88,more text/\n", "\n49,100,3/\n98,100,1,5/\n99,100,1,7/\n"), []string{"line ", "16"}},
		{"bai2 endless unterminated lines", fiftyMBOf(bai2Head+"16,195,100,,B,C,text", "\n more text", "/\n49,100,3/\n98,100,1,5/\n99,100,1,7/\n"), []string{"line ", "16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := "bounded-" + strings.ReplaceAll(tc.name, " ", "-")
			got, err := Parse(file, tc.r)
			if err == nil {
				t.Fatalf("Parse accepted it: %d statements", len(got.Statements))
			}
			var e *Error
			if !errors.Is(err, ErrMalformed) || !errors.As(err, &e) || e.File != file {
				t.Fatalf("error %q is not an *Error naming %s that matches ErrMalformed", err, file)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}
