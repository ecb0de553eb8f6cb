package fakebank

import (
	"strconv"
	"strings"
	"time"
)

// BAI2 type codes the bank books with.
const (
	bai2Opening  = "010" // opening ledger
	bai2Closing  = "015" // closing ledger
	bai2Payout   = "495" // outgoing money transfer (debit)
	bai2Returned = "266" // return item (credit)
)

// bai2Field makes s a BAI2 field: no ',' (the field separator) and no '/'
// (the record terminator).
func bai2Field(s string) string {
	return strings.NewReplacer(",", " ", "/", " ", "\n", " ", "\r", " ").Replace(s)
}

// bai2 writes a BAI2 file (version 2): one 02 group of one 03 account per
// account and currency, its opening (010) and closing (015) ledger
// balances, one 16 detail per booking (495 outgoing transfer, 266 return
// item) with the payment id as bank reference and the payment's reference
// as customer reference, and the 49, 98 and 99 trailers with their control
// totals (the algebraic sum of every amount in the 03 and 16 records below
// them) and record counts (every record from the header to the trailer,
// both included). A reference a BAI2 field cannot carry (a ',' or a '/')
// is left out: the line then matches nothing, as at a real bank.
func (w *statementWriter) bai2(days []*accountDay) {
	var group, groupTotal int64
	group = 2 // 02 and 98
	w.printf("01,SETTLEFAKEBANK,SETTLE,%s,%s,%s,,,2/\n", w.now.Format("060102"), w.now.Format("1504"), w.now.Format("150405"))
	modifier := "2" // final, previous day
	if !w.day.Before(w.now.Truncate(24 * time.Hour)) {
		modifier = "3" // interim, same day
	}
	w.printf("02,SETTLE,SETTLEFAKEBANK,1,%s,2400,,%s/\n", w.day.Format("060102"), modifier)
	for _, d := range days {
		total := d.opening + d.closing
		records := int64(2) // 03 and 49
		w.printf("03,%s,%s,%s,%d,,,%s,%d,,/\n", bai2Field(d.account), d.currency, bai2Opening, d.opening, bai2Closing, d.closing)
		for _, e := range d.entries(1) {
			bk := e.bookings[0]
			p := bk.p
			typ, ref, what := bai2Payout, p.ID, "PAYOUT TO "
			if bk.credit {
				typ, ref, what = bai2Returned, returnRef(p), "RETURN "+p.ReturnReason+" FROM "
			}
			customer := p.Request.Reference
			if bai2Field(customer) != customer {
				customer = ""
			}
			w.printf("16,%s,%d,0,%s,%s,%s/\n", typ, p.Request.AmountCents, ref, customer, bai2Field(what+p.Request.CreditorAccount))
			total += p.Request.AmountCents
			records++
		}
		w.printf("49,%d,%d/\n", total, records)
		groupTotal += total
		group += records
	}
	w.printf("98,%d,%d,%d/\n", groupTotal, len(days), group)
	w.printf("99,%d,1,%s/\n", groupTotal, strconv.FormatInt(group+2, 10))
}
