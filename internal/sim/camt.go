package sim

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"time"
)

// simAccount is the account the simulated bank pays from.
const simAccount = "SIM-PAYOUTS-1"

// camt054 writes payouts and returns as a camt.054.001.08 notification
// (DESIGN.md section 14): one Ntfctn per currency, one debit entry per
// payout of paid and one credit entry per return of rets, each with the
// payment's end-to-end reference; a return has the amount that came back
// and the return reason (RtrInf/Rsn/Cd), and when reversal is set for it
// also RvslInd (a reversal of the payout's debit). id names the
// notification.
func camt054(id string, at time.Time, paid, rets []ReturnEntry, reversal func(i int) bool) []byte {
	var b bytes.Buffer
	esc := func(s string) string {
		var e bytes.Buffer
		_ = xml.EscapeText(&e, []byte(s))
		return e.String()
	}
	amt := func(ccy string, minor int64) string {
		return fmt.Sprintf(`<Amt Ccy="%s">%d.%02d</Amt>`, ccy, minor/100, minor%100)
	}
	fmt.Fprintf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.054.001.08\">\n")
	fmt.Fprintf(&b, "<BkToCstmrDbtCdtNtfctn><GrpHdr><MsgId>%s</MsgId><CreDtTm>%s</CreDtTm></GrpHdr>\n", esc(id), at.Format(time.RFC3339))
	var ccys []string
	for _, r := range append(append([]ReturnEntry(nil), paid...), rets...) {
		if indexOf(ccys, r.Currency) < 0 {
			ccys = append(ccys, r.Currency)
		}
	}
	for n, ccy := range ccys {
		fmt.Fprintf(&b, "<Ntfctn><Id>%s-%d</Id><Acct><Id><Othr><Id>%s</Id></Othr></Id><Ccy>%s</Ccy></Acct>\n", esc(id), n+1, simAccount, ccy)
		for _, p := range paid {
			if p.Currency != ccy {
				continue
			}
			day := p.At.Format(time.DateOnly)
			fmt.Fprintf(&b, "<Ntry>%s<CdtDbtInd>DBIT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>%s</Dt></BookgDt><ValDt><Dt>%s</Dt></ValDt><AcctSvcrRef>pay-%s</AcctSvcrRef>",
				amt(ccy, p.Amount), day, day, esc(p.PaymentID))
			fmt.Fprintf(&b, "<NtryDtls><TxDtls><Refs><AcctSvcrRef>%s</AcctSvcrRef><EndToEndId>%s</EndToEndId></Refs>%s<CdtDbtInd>DBIT</CdtDbtInd></TxDtls></NtryDtls></Ntry>\n",
				esc(p.PaymentID), esc(p.Reference), amt(ccy, p.Amount))
		}
		for i, r := range rets {
			if r.Currency != ccy {
				continue
			}
			day := r.At.Format(time.DateOnly)
			fmt.Fprintf(&b, "<Ntry>%s<CdtDbtInd>CRDT</CdtDbtInd>", amt(ccy, r.Amount))
			if reversal(i) {
				b.WriteString("<RvslInd>true</RvslInd>")
			}
			fmt.Fprintf(&b, "<Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>%s</Dt></BookgDt><ValDt><Dt>%s</Dt></ValDt><AcctSvcrRef>rtn-%s</AcctSvcrRef>", day, day, esc(r.PaymentID))
			fmt.Fprintf(&b, "<NtryDtls><TxDtls><Refs><AcctSvcrRef>%s</AcctSvcrRef><EndToEndId>%s</EndToEndId></Refs>%s<CdtDbtInd>CRDT</CdtDbtInd>",
				esc(r.PaymentID), esc(r.Reference), amt(ccy, r.Amount))
			fmt.Fprintf(&b, "<RtrInf><Rsn><Cd>%s</Cd></Rsn></RtrInf></TxDtls></NtryDtls></Ntry>\n", esc(r.Reason))
		}
		b.WriteString("</Ntfctn>\n")
	}
	b.WriteString("</BkToCstmrDbtCdtNtfctn>\n</Document>\n")
	return b.Bytes()
}
