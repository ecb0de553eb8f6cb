package fakebank

import "strings"

// swiftX reports whether c is in the SWIFT X character set, the one MT
// messages are written in.
func swiftX(c rune) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.ContainsRune("/-?:().,'+ ", c)
}

// mtText makes s SWIFT X text: other characters become spaces.
func mtText(s string) string {
	return strings.Map(func(c rune) rune {
		if swiftX(c) {
			return c
		}
		return ' '
	}, s)
}

// mtRef returns s when an MT940 reference field can carry it as it is
// (SWIFT X, no '/' or ':', which structure the fields), else "".
func mtRef(s string) string {
	for _, c := range s {
		if !swiftX(c) || c == '/' || c == ':' {
			return ""
		}
	}
	return s
}

// mtAmount writes an MT940 amount: "12,50", "5," without minor units.
func mtAmount(v int64, exponent int) string { return decimal(abs(v), exponent, ",", true) }

// mtBalance writes a :60F:/:62F: value: C or D, YYMMDD, currency, amount.
func (w *statementWriter) mtBalance(tag string, v int64, d *accountDay) {
	mark := "C"
	if v < 0 {
		mark = "D"
	}
	w.printf(":%s:%s%s%s%s\n", tag, mark, w.day.Format("060102"), d.currency, mtAmount(v, d.exponent))
}

// mt940 writes SWIFT MT940 messages, one per account and currency, each
// one page (:28C: n/1): :20: :25: :28C: :60F:, then per booking a :61:
// (value and entry date, D for a payout, C with transaction type RTI for
// a return, the amount, the payment's reference as the customer reference
// and the payment id after //) with its :86: (/EREF/ the reference, /RTRN/
// the return reason, /NAME/ the creditor), and :62F:. Lines hold at most
// 65 characters; :86: at most six of them. A reference that SWIFT X
// cannot carry as it is (or that holds '/' or ':') is written NONREF, and
// the line then matches nothing, as at a real bank.
func (w *statementWriter) mt940(days []*accountDay) {
	for n, d := range days {
		w.printf(":20:FB%s%d\n", w.day.Format("060102"), n+1)
		w.printf(":25:%s\n", mtText(d.account))
		w.printf(":28C:%d/1\n", w.day.YearDay())
		w.mtBalance("60F", d.opening, d)
		for _, e := range d.entries(1) {
			bk := e.bookings[0]
			p := bk.p
			mark, typ, bankRef := "D", "NTRF", p.ID
			if bk.credit {
				mark, typ, bankRef = "C", "NRTI", returnRef(p)
			}
			ref := mtRef(p.Request.Reference)
			custRef := ref
			if custRef == "" || len(custRef) > 16 {
				custRef = "NONREF"
			}
			w.printf(":61:%s%s%s%s%s%s//%s\n", w.day.Format("060102"), w.day.Format("0102"), mark,
				mtAmount(p.Request.AmountCents, d.exponent), typ, custRef, bankRef)
			// The structured :86: of Dutch banks: /KEY/value/KEY/value/.
			var info strings.Builder
			if ref != "" {
				info.WriteString("/EREF/" + ref)
			}
			if bk.credit {
				info.WriteString("/RTRN/" + p.ReturnReason)
			}
			info.WriteString("/NAME/" + strings.ReplaceAll(mtText(p.Request.CreditorAccount), "/", " ") + "/")
			w.mtLines(":86:", info.String(), 6)
		}
		w.mtBalance("62F", d.closing, d)
		w.printf("-\n")
	}
}

// mtLines writes s after tag in lines of at most 65 characters (the tag
// counts in the first) and at most max lines, cutting what does not fit.
// No continuation line starts with ':' or '-', which would read as a new
// field or the end of the message.
func (w *statementWriter) mtLines(tag, s string, max int) {
	line := tag
	lines := 0
	for s != "" && lines < max {
		n := min(65-len(line), len(s))
		for n > 1 && n < len(s) && (s[n] == ':' || s[n] == '-') {
			n-- // the next line would start with it
		}
		line += s[:n]
		s = s[n:]
		w.printf("%s\n", line)
		lines++
		line = ""
	}
	if lines == 0 {
		w.printf("%s\n", tag)
	}
}
