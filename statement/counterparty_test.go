package statement

import (
	"os"
	"strings"
	"testing"
)

// TestCounterparty checks the other party's name: the creditor of a
// debit and the debtor of a credit in camt (.001.02's Cdtr/Nm and
// .001.08's Cdtr/Pty/Nm), /NAME/ and ?32?33 in MT940.
func TestCounterparty(t *testing.T) {
	t.Parallel()
	camt := func(ns, party string) string {
		return `<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.` + ns + `"><BkToCstmrStmt><Stmt>
<Acct><Id><IBAN>NL91ABNA0417164300</IBAN></Id><Ccy>EUR</Ccy></Acct>
<Ntry><Amt Ccy="EUR">1.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><NtryDtls><TxDtls>
<RltdPties><Dbtr>` + party + `Us</Nm>` + strings.Repeat("</Pty>", strings.Count(party, "<Pty>")) + `</Dbtr><Cdtr>` + party + `Ada Lovelace</Nm>` + strings.Repeat("</Pty>", strings.Count(party, "<Pty>")) + `</Cdtr></RltdPties>
</TxDtls></NtryDtls></Ntry>
<Ntry><Amt Ccy="EUR">1.00</Amt><CdtDbtInd>CRDT</CdtDbtInd><NtryDtls><TxDtls>
<RltdPties><Dbtr>` + party + `Grace Hopper</Nm>` + strings.Repeat("</Pty>", strings.Count(party, "<Pty>")) + `</Dbtr><Cdtr>` + party + `Us</Nm>` + strings.Repeat("</Pty>", strings.Count(party, "<Pty>")) + `</Cdtr></RltdPties>
</TxDtls><TxDtls/></NtryDtls></Ntry>
</Stmt></BkToCstmrStmt></Document>`
	}
	for _, c := range []struct{ name, data, want string }{
		{"camt .02", camt("02", "<Nm>"), "Ada Lovelace|Grace Hopper|"},
		{"camt .08", camt("08", "<Pty><Nm>"), "Ada Lovelace|Grace Hopper|"},
		{"mt940 dutch", fixture(t, "mt940_dutch.sta"), "X||"},
		{"mt940 german", fixture(t, "mt940_german.sta"), "Max Mustermann||||"},
	} {
		f, err := Parse(c.name, strings.NewReader(c.data))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []string
		for _, st := range f.Statements {
			for _, e := range st.Entries {
				for _, tx := range e.Transactions {
					got = append(got, tx.Counterparty)
				}
			}
		}
		if g := strings.Join(got, "|"); g != c.want {
			t.Errorf("%s: counterparties %q, want %q", c.name, g, c.want)
		}
	}
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCounterpartyAccount checks the other party's account: camt
// CdtrAcct of a debit and DbtrAcct of a credit, by IBAN or Othr/Id; the
// MT940 /IBAN/, ING's /CNTP/ and the German ?31; spaces removed.
func TestCounterpartyAccount(t *testing.T) {
	t.Parallel()
	camt := `<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt><Stmt>
<Acct><Id><IBAN>NL91ABNA0417164300</IBAN></Id><Ccy>EUR</Ccy></Acct>
<Ntry><Amt Ccy="EUR">1.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><NtryDtls><TxDtls>
<RltdPties><Dbtr><Pty><Nm>Us</Nm></Pty></Dbtr><DbtrAcct><Id><IBAN>NL91ABNA0417164300</IBAN></Id></DbtrAcct>
<Cdtr><Pty><Nm>Ada Lovelace</Nm></Pty></Cdtr><CdtrAcct><Id><IBAN>GB29 NWBK 6016 1331 9268 19</IBAN></Id></CdtrAcct></RltdPties>
</TxDtls><TxDtls>
<RltdPties><Cdtr><Pty><Nm>Alan Turing</Nm></Pty></Cdtr><CdtrAcct><Id><Othr><Id>12345678</Id><SchmeNm><Prtry>BBAN</Prtry></SchmeNm></Othr></Id></CdtrAcct></RltdPties>
</TxDtls></NtryDtls></Ntry>
<Ntry><Amt Ccy="EUR">1.00</Amt><CdtDbtInd>CRDT</CdtDbtInd><NtryDtls><TxDtls>
<RltdPties><Dbtr><Pty><Nm>Grace Hopper</Nm></Pty></Dbtr><DbtrAcct><Id><IBAN>DE89370400440532013000</IBAN></Id></DbtrAcct>
<CdtrAcct><Id><IBAN>NL91ABNA0417164300</IBAN></Id></CdtrAcct></RltdPties>
</TxDtls></NtryDtls></Ntry>
</Stmt></BkToCstmrStmt></Document>`
	ing := `:20:ING
:25:NL69INGB0123456789EUR
:28C:1
:60F:C240102EUR100,00
:61:240102D10,00NTRFNONREF//B1
:86:/CNTP/NL20INGB0001234567/INGBNL2A/J. Jansen/Amsterdam/REMI/USTD//settle-x/
:62F:C240102EUR90,00
`
	for _, c := range []struct{ name, data, want string }{
		{"camt", camt, "GB29NWBK60161331926819 Ada Lovelace|12345678 Alan Turing|DE89370400440532013000 Grace Hopper"},
		{"mt940 dutch", fixture(t, "mt940_dutch.sta"), "NL20INGB0001234567 X| | "},
		{"mt940 german", fixture(t, "mt940_german.sta"), "DE89370400440532013000 Max Mustermann| | | | "},
		{"mt940 ing cntp", ing, "NL20INGB0001234567 J. Jansen"},
	} {
		f, err := Parse(c.name, strings.NewReader(c.data))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []string
		for _, st := range f.Statements {
			for _, e := range st.Entries {
				for _, tx := range e.Transactions {
					got = append(got, tx.CounterpartyAccount+" "+tx.Counterparty)
				}
			}
		}
		if g := strings.Join(got, "|"); g != c.want {
			t.Errorf("%s: counterparties %q, want %q", c.name, g, c.want)
		}
	}
}
