// Package camttest builds small camt.053 statement files for tests, so
// that each test says exactly which lines its statement holds: the
// statement tests of audit and statement/importer share it.
package camttest

import (
	"bytes"
	"fmt"
	"html"
	"time"
)

// Stmt is one Stmt: an account in EUR, an opening balance and entries.
// The closing balance is computed from them unless Closing is set (to make
// a statement that does not balance).
type Stmt struct {
	Account string
	Opening int64
	Closing *int64
	Entries []Entry
}

// Entry is one Ntry. Ref is its AcctSvcrRef ("" for none); Amount in
// minor units; Credit sets CRDT (default DBIT); Txs its TxDtls (none: an
// entry without details).
type Entry struct {
	Ref      string
	Amount   int64
	Credit   bool
	Reversal bool
	Booked   string // YYYY-MM-DD; default today (UTC)
	Txs      []Tx
}

// Tx is one TxDtls: its EndToEndId ("" writes NOTPROVIDED), its amount
// (0: none given) and a return reason code ("" for none).
type Tx struct {
	E2E    string
	Amount int64
	Rtr    string
	Party  string // the counterparty's name ("" for none)
}

// Debit is an entry of one payout with reference e2e.
func Debit(ref, e2e string, amount int64) Entry {
	return Entry{Ref: ref, Amount: amount, Txs: []Tx{{E2E: e2e, Amount: amount}}}
}

// Returned is a credit entry returning the payout with reference e2e.
func Returned(ref, e2e string, amount int64, reason string) Entry {
	return Entry{Ref: ref, Amount: amount, Credit: true, Txs: []Tx{{E2E: e2e, Amount: amount, Rtr: reason}}}
}

// Batch is one debit entry of several payouts (e2e → amount, in order).
func Batch(ref string, txs ...Tx) Entry {
	e := Entry{Ref: ref}
	for _, t := range txs {
		e.Amount += t.Amount
	}
	e.Txs = txs
	return e
}

func eur(minor int64) string {
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	return fmt.Sprintf("%s%d.%02d", sign, minor/100, minor%100)
}

func balance(code string, v int64) string {
	ind := "CRDT"
	if v < 0 {
		ind, v = "DBIT", -v
	}
	return fmt.Sprintf(`<Bal><Tp><CdOrPrtry><Cd>%s</Cd></CdOrPrtry></Tp><Amt Ccy="EUR">%s</Amt><CdtDbtInd>%s</CdtDbtInd><Dt><Dt>2030-01-01</Dt></Dt></Bal>`,
		code, eur(v), ind)
}

// Camt053 writes the statements as one camt.053.001.08 file; id makes
// files of the same statements differ in their bytes.
func Camt053(id string, stmts ...Stmt) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt>`)
	fmt.Fprintf(&b, `<GrpHdr><MsgId>%s</MsgId><CreDtTm>2030-01-02T06:00:00Z</CreDtTm></GrpHdr>`, html.EscapeString(id))
	for i, s := range stmts {
		closing := s.Opening
		for _, e := range s.Entries {
			if e.Credit {
				closing += e.Amount
			} else {
				closing -= e.Amount
			}
		}
		if s.Closing != nil {
			closing = *s.Closing
		}
		fmt.Fprintf(&b, `<Stmt><Id>%s-%d</Id><CreDtTm>2030-01-02T06:00:00Z</CreDtTm><Acct><Id><Othr><Id>%s</Id></Othr></Id><Ccy>EUR</Ccy></Acct>`,
			html.EscapeString(id), i+1, html.EscapeString(s.Account))
		b.WriteString(balance("OPBD", s.Opening))
		b.WriteString(balance("CLBD", closing))
		for _, e := range s.Entries {
			ind := "DBIT"
			if e.Credit {
				ind = "CRDT"
			}
			booked := e.Booked
			if booked == "" {
				booked = time.Now().UTC().Format(time.DateOnly)
			}
			fmt.Fprintf(&b, `<Ntry><Amt Ccy="EUR">%s</Amt><CdtDbtInd>%s</CdtDbtInd>`, eur(e.Amount), ind)
			if e.Reversal {
				b.WriteString(`<RvslInd>true</RvslInd>`)
			}
			fmt.Fprintf(&b, `<Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>%s</Dt></BookgDt><ValDt><Dt>%s</Dt></ValDt>`, booked, booked)
			if e.Ref != "" {
				fmt.Fprintf(&b, `<AcctSvcrRef>%s</AcctSvcrRef>`, html.EscapeString(e.Ref))
			}
			b.WriteString(`<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>DMCT</SubFmlyCd></Fmly></Domn></BkTxCd>`)
			if len(e.Txs) > 0 {
				b.WriteString(`<NtryDtls>`)
				if len(e.Txs) > 1 {
					fmt.Fprintf(&b, `<Btch><NbOfTxs>%d</NbOfTxs></Btch>`, len(e.Txs))
				}
				for _, t := range e.Txs {
					e2e := t.E2E
					if e2e == "" {
						e2e = "NOTPROVIDED"
					}
					fmt.Fprintf(&b, `<TxDtls><Refs><EndToEndId>%s</EndToEndId></Refs>`, html.EscapeString(e2e))
					if t.Amount > 0 {
						fmt.Fprintf(&b, `<Amt Ccy="EUR">%s</Amt><CdtDbtInd>%s</CdtDbtInd>`, eur(t.Amount), ind)
					}
					if t.Party != "" {
						role := "Cdtr"
						if e.Credit {
							role = "Dbtr"
						}
						fmt.Fprintf(&b, `<RltdPties><%s><Pty><Nm>%s</Nm></Pty></%s></RltdPties>`, role, html.EscapeString(t.Party), role)
					}
					if t.Rtr != "" {
						fmt.Fprintf(&b, `<RtrInf><Rsn><Cd>%s</Cd></Rsn></RtrInf>`, t.Rtr)
					}
					b.WriteString(`</TxDtls>`)
				}
				b.WriteString(`</NtryDtls>`)
			}
			b.WriteString(`</Ntry>`)
		}
		b.WriteString(`</Stmt>`)
	}
	b.WriteString(`</BkToCstmrStmt></Document>` + "\n")
	return b.Bytes()
}
