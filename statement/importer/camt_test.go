package importer

import (
	"bytes"
	"fmt"
	"html"
	"time"
)

// This file builds small camt.053 files for the import and report tests,
// so that each test says exactly which lines its statement holds.

// tStmt is one Stmt: an account in EUR, an opening balance and entries.
// The closing balance is computed from them unless closing is set (to make
// a statement that does not balance).
type tStmt struct {
	account string
	opening int64
	closing *int64
	entries []tEntry
}

// tEntry is one Ntry. ref is its AcctSvcrRef ("" for none); amount in
// minor units; credit sets CRDT (default DBIT); txs its TxDtls (none: an
// entry without details).
type tEntry struct {
	ref      string
	amount   int64
	credit   bool
	reversal bool
	booked   string // YYYY-MM-DD; default today (UTC)
	txs      []tTx
}

// tTx is one TxDtls: its EndToEndId ("" writes NOTPROVIDED), its amount
// (0: none given) and a return reason code ("" for none).
type tTx struct {
	e2e    string
	amount int64
	rtr    string
	party  string // the counterparty's name ("" for none)
}

// debit is an entry of one payout with reference e2e.
func debit(ref, e2e string, amount int64) tEntry {
	return tEntry{ref: ref, amount: amount, txs: []tTx{{e2e: e2e, amount: amount}}}
}

// returned is a credit entry returning the payout with reference e2e.
func returned(ref, e2e string, amount int64, reason string) tEntry {
	return tEntry{ref: ref, amount: amount, credit: true, txs: []tTx{{e2e: e2e, amount: amount, rtr: reason}}}
}

// batch is one debit entry of several payouts (e2e → amount, in order).
func batch(ref string, txs ...tTx) tEntry {
	e := tEntry{ref: ref}
	for _, t := range txs {
		e.amount += t.amount
	}
	e.txs = txs
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

// camt053 writes the statements as one camt.053.001.08 file; id makes
// files of the same statements differ in their bytes.
func camt053(id string, stmts ...tStmt) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt>`)
	fmt.Fprintf(&b, `<GrpHdr><MsgId>%s</MsgId><CreDtTm>2030-01-02T06:00:00Z</CreDtTm></GrpHdr>`, html.EscapeString(id))
	for i, s := range stmts {
		closing := s.opening
		for _, e := range s.entries {
			if e.credit {
				closing += e.amount
			} else {
				closing -= e.amount
			}
		}
		if s.closing != nil {
			closing = *s.closing
		}
		fmt.Fprintf(&b, `<Stmt><Id>%s-%d</Id><CreDtTm>2030-01-02T06:00:00Z</CreDtTm><Acct><Id><Othr><Id>%s</Id></Othr></Id><Ccy>EUR</Ccy></Acct>`,
			html.EscapeString(id), i+1, html.EscapeString(s.account))
		b.WriteString(balance("OPBD", s.opening))
		b.WriteString(balance("CLBD", closing))
		for _, e := range s.entries {
			ind := "DBIT"
			if e.credit {
				ind = "CRDT"
			}
			booked := e.booked
			if booked == "" {
				booked = time.Now().UTC().Format(time.DateOnly)
			}
			fmt.Fprintf(&b, `<Ntry><Amt Ccy="EUR">%s</Amt><CdtDbtInd>%s</CdtDbtInd>`, eur(e.amount), ind)
			if e.reversal {
				b.WriteString(`<RvslInd>true</RvslInd>`)
			}
			fmt.Fprintf(&b, `<Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>%s</Dt></BookgDt><ValDt><Dt>%s</Dt></ValDt>`, booked, booked)
			if e.ref != "" {
				fmt.Fprintf(&b, `<AcctSvcrRef>%s</AcctSvcrRef>`, html.EscapeString(e.ref))
			}
			b.WriteString(`<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>DMCT</SubFmlyCd></Fmly></Domn></BkTxCd>`)
			if len(e.txs) > 0 {
				b.WriteString(`<NtryDtls>`)
				if len(e.txs) > 1 {
					fmt.Fprintf(&b, `<Btch><NbOfTxs>%d</NbOfTxs></Btch>`, len(e.txs))
				}
				for _, t := range e.txs {
					e2e := t.e2e
					if e2e == "" {
						e2e = "NOTPROVIDED"
					}
					fmt.Fprintf(&b, `<TxDtls><Refs><EndToEndId>%s</EndToEndId></Refs>`, html.EscapeString(e2e))
					if t.amount > 0 {
						fmt.Fprintf(&b, `<Amt Ccy="EUR">%s</Amt><CdtDbtInd>%s</CdtDbtInd>`, eur(t.amount), ind)
					}
					if t.party != "" {
						role := "Cdtr"
						if e.credit {
							role = "Dbtr"
						}
						fmt.Fprintf(&b, `<RltdPties><%s><Pty><Nm>%s</Nm></Pty></%s></RltdPties>`, role, html.EscapeString(t.party), role)
					}
					if t.rtr != "" {
						fmt.Fprintf(&b, `<RtrInf><Rsn><Cd>%s</Cd></Rsn></RtrInf>`, t.rtr)
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
