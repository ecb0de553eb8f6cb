package fakebank

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"regexp"
	"time"
)

// The camt namespaces the bank writes: version .001.08 of ISO 20022's
// BankToCustomerStatement and BankToCustomerDebitCreditNotification.
const (
	NamespaceCamt053 = "urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"
	NamespaceCamt054 = "urn:iso:std:iso:20022:tech:xsd:camt.054.001.08"
)

// iban is the shape of an IBAN: such an account is written Id/IBAN, any
// other Id/Othr/Id.
var iban = regexp.MustCompile(`^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$`)

// text escapes s for XML character data.
func text(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// max35 cuts s to the 35 characters of the Max35Text elements (MsgId,
// Stmt/Id, AcctSvcrRef).
func max35(s string) string {
	r := []rune(s)
	if len(r) > 35 {
		return string(r[:35])
	}
	return s
}

// max140 cuts s to the 140 characters of a party's Nm.
func max140(s string) string {
	r := []rune(s)
	if len(r) > 140 {
		return string(r[:140])
	}
	return s
}

// camt writes a camt.053.001.08 statement (BkToCstmrStmt/Stmt, with OPBD
// and CLBD balances) or a camt.054.001.08 notification
// (BkToCstmrDbtCdtNtfctn/Ntfctn, no balances), one Stmt or Ntfctn per
// account and currency, elements in the order of the schema's sequences.
//
// Each entry is booked (Sts/Cd BOOK) with its bank transaction code
// (PMNT/ICDT/DMCT for payouts, PMNT/ICDT/RRTN for returns); a batch has
// Btch/NbOfTxs and one TxDtls per payment, each with the payment's id
// (Refs/AcctSvcrRef), the reference it was sent with (Refs/EndToEndId),
// its amount and its creditor's name; a return has RtrInf/Rsn/Cd.
//
// The payment's reference is written whole even past the 35 characters
// the schema allows an EndToEndId: cutting it would make it match nothing.
// (Settle sends references that fit its bank: DESIGN section 13.)
func (w *statementWriter) camt(format StatementFormat, days []*accountDay) {
	ns, msg, item := NamespaceCamt053, "BkToCstmrStmt", "Stmt"
	if format == FormatCamt054 {
		ns, msg, item = NamespaceCamt054, "BkToCstmrDbtCdtNtfctn", "Ntfctn"
	}
	created := w.now.Format("2006-01-02T15:04:05Z")
	date := w.day.Format(time.DateOnly)
	id := fmt.Sprintf("FAKEBANK-%s-%s", w.day.Format("20060102"), w.now.Format("150405"))
	w.printf(`<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<Document xmlns="%s">`+"\n", ns)
	w.printf("<%s>\n<GrpHdr><MsgId>%s</MsgId><CreDtTm>%s</CreDtTm></GrpHdr>\n", msg, id, created)
	to := w.day.Add(24*time.Hour - time.Second)
	if w.now.Before(to) {
		to = w.now // the day so far
	}
	for n, d := range days {
		w.printf("<%s>\n<Id>%s</Id>\n", item, text(max35(fmt.Sprintf("%s-%d", id, n+1))))
		if format == FormatCamt053 {
			w.printf("<ElctrncSeqNb>%s</ElctrncSeqNb>\n", w.day.Format("20060102"))
		}
		w.printf("<CreDtTm>%s</CreDtTm>\n<FrToDt><FrDtTm>%sT00:00:00Z</FrDtTm><ToDtTm>%s</ToDtTm></FrToDt>\n",
			created, date, to.Format("2006-01-02T15:04:05Z"))
		w.printf("<Acct><Id>")
		if iban.MatchString(d.account) {
			w.printf("<IBAN>%s</IBAN>", d.account)
		} else {
			w.printf("<Othr><Id>%s</Id></Othr>", text(d.account))
		}
		w.printf("</Id><Ccy>%s</Ccy></Acct>\n", d.currency)
		if format == FormatCamt053 {
			w.camtBalance("OPBD", d.opening, d, date)
			w.camtBalance("CLBD", d.closing, d, date)
		}
		for _, e := range d.entries(w.batch) {
			w.camtEntry(e, d, date)
		}
		w.printf("</%s>\n", item)
	}
	w.printf("</%s>\n</Document>\n", msg)
}

func (w *statementWriter) camtBalance(code string, v int64, d *accountDay, date string) {
	w.printf(`<Bal><Tp><CdOrPrtry><Cd>%s</Cd></CdOrPrtry></Tp><Amt Ccy="%s">%s</Amt><CdtDbtInd>%s</CdtDbtInd><Dt><Dt>%s</Dt></Dt></Bal>`+"\n",
		code, d.currency, decimal(abs(v), d.exponent, ".", false), creditDebit(v >= 0), date)
}

func creditDebit(credit bool) string {
	if credit {
		return "CRDT"
	}
	return "DBIT"
}

func (w *statementWriter) camtEntry(e statementEntry, d *accountDay, date string) {
	amt := func(v int64) string {
		return fmt.Sprintf(`<Amt Ccy="%s">%s</Amt>`, d.currency, decimal(v, d.exponent, ".", false))
	}
	ind := creditDebit(e.credit)
	sub := "DMCT"
	if e.credit {
		sub = "RRTN"
	}
	w.printf("<Ntry>%s<CdtDbtInd>%s</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts>", amt(e.amount), ind)
	w.printf("<BookgDt><Dt>%s</Dt></BookgDt><ValDt><Dt>%s</Dt></ValDt><AcctSvcrRef>%s</AcctSvcrRef>", date, date, e.ref)
	w.printf("<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>%s</SubFmlyCd></Fmly></Domn></BkTxCd>\n<NtryDtls>", sub)
	if len(e.bookings) > 1 {
		w.printf("<Btch><NbOfTxs>%d</NbOfTxs>%s<CdtDbtInd>%s</CdtDbtInd></Btch>",
			len(e.bookings), fmt.Sprintf(`<TtlAmt Ccy="%s">%s</TtlAmt>`, d.currency, decimal(e.amount, d.exponent, ".", false)), ind)
	}
	for _, bk := range e.bookings {
		p := bk.p
		w.printf("\n<TxDtls><Refs><AcctSvcrRef>%s</AcctSvcrRef><EndToEndId>%s</EndToEndId></Refs>%s<CdtDbtInd>%s</CdtDbtInd>",
			p.ID, text(p.Request.Reference), amt(p.Request.AmountCents), ind)
		// The creditor is the other party: paid by a payout, paying back
		// in a return.
		party := "Cdtr"
		if bk.credit {
			party = "Dbtr"
		}
		w.printf("<RltdPties><%s><Pty><Nm>%s</Nm></Pty></%s></RltdPties>", party, text(max140(p.Request.CreditorAccount)), party)
		if bk.credit {
			w.printf("<RtrInf><Rsn><Cd>%s</Cd></Rsn></RtrInf>", p.ReturnReason)
		}
		w.printf("</TxDtls>")
	}
	w.printf("</NtryDtls></Ntry>\n")
}
