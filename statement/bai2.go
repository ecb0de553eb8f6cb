package statement

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
)

// isBAI2Start says whether a file starts like BAI2: a 01 file header.
func isBAI2Start(b []byte) bool {
	return len(b) >= 3 && b[0] == '0' && b[1] == '1' && b[2] == ','
}

// bai2Returns are the BAI2 detail type codes of return items.
var bai2Returns = map[string]bool{
	"123": true, "168": true, "255": true, "257": true, "266": true, "268": true,
	"423": true, "468": true, "555": true, "557": true, "566": true, "568": true,
}

// bai2Record is one logical record: a physical record with its 88
// continuations, without the record code and the '/' terminator.
type bai2Record struct {
	code    string
	content []byte
	line    int
	// continued holds, for each 88 continuation, the index of its first
	// field in the logical record.
	continued []int
}

// bai2Parser reads BAI2 (Cash Management Balance Reporting Specifications
// version 2): records 01/02/03/16/49/88/98/99, '/'-terminated or not,
// several per physical line or one running over several lines. Control
// totals in the trailers are not checked: published files contradict
// their own, and the records are what moved.
type bai2Parser struct {
	name  string
	lines *lineReader
	h     Handler
	cur   currencyCache

	pending  *bai2Record // the logical record being assembled
	open     bool        // the last physical record had no '/': a plain next line continues it
	recBuf   bai2Record
	fields   []string
	header   bool
	trailer  bool
	inGroup  bool
	groupCcy string
	asOf     string

	st   *Statement
	sums sums
}

func (p *bai2Parser) fail(line int, element string, err error) error {
	return &Error{File: p.name, Line: line, Element: element, Err: err}
}

func (p *bai2Parser) run() error {
	for {
		raw, err := p.lines.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return p.fail(p.lines.line+1, "", err)
		}
		if err := p.physical(string(raw), p.lines.line); err != nil {
			return err
		}
	}
	if err := p.flush(); err != nil {
		return err
	}
	if !p.trailer {
		line := p.lines.line
		if !p.header {
			return p.fail(line, "", errorf(ErrMalformed, "no 01 file header"))
		}
		return p.fail(line, "", errorf(ErrMalformed, "no 99 file trailer: the file is truncated"))
	}
	return nil
}

// isBAI2Record says whether s starts with a record code and a comma.
func isBAI2Record(s string) bool {
	if len(s) < 3 || s[2] != ',' {
		return false
	}
	switch s[:2] {
	case "01", "02", "03", "16", "49", "88", "98", "99":
		return true
	}
	return false
}

// bai2Terminator returns the index of the '/' that ends the record in s:
// one followed by nothing but blanks, or by the next record. A '/' inside
// text is text.
func bai2Terminator(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			rest := strings.TrimLeft(s[i+1:], " \t")
			if rest == "" || isBAI2Record(rest) {
				return i
			}
		}
	}
	return -1
}

// physical splits one physical line into records.
func (p *bai2Parser) physical(s string, line int) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	if p.open && !isBAI2Record(strings.TrimLeft(s, " \t")) {
		// The open record runs on over this line (a text too long for
		// its line).
		i := bai2Terminator(s)
		if i < 0 {
			return p.extend(line, s)
		}
		if err := p.extend(line, s[:i]); err != nil {
			return err
		}
		s = s[i+1:]
	}
	p.open = false
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return nil
		}
		if !isBAI2Record(s) {
			n := min(len(s), 24)
			return p.fail(line, "", errorf(ErrMalformed, "not a BAI2 record: %q", s[:n]))
		}
		code, body := s[:2], s[3:]
		content := body
		s = ""
		if i := bai2Terminator(body); i >= 0 {
			content, s = body[:i], body[i+1:]
		} else {
			p.open = true
		}
		if p.trailer {
			return p.fail(line, "record "+code, errorf(ErrMalformed, "a record after the 99 file trailer"))
		}
		if code == "88" {
			if p.pending == nil {
				return p.fail(line, "record 88", errorf(ErrMalformed, "an 88 continuation with no record before it"))
			}
			p.pending.continued = append(p.pending.continued, bytes.Count(p.pending.content, []byte{','})+1)
			if err := p.extend(line, ","+content); err != nil {
				return err
			}
			continue
		}
		if err := p.flush(); err != nil {
			return err
		}
		p.recBuf.code, p.recBuf.line = code, line
		p.recBuf.content = append(p.recBuf.content[:0], content...)
		p.recBuf.continued = p.recBuf.continued[:0]
		p.pending = &p.recBuf
	}
}

// extend adds more of the pending logical record, read on line, refusing
// a record longer than maxRecord.
func (p *bai2Parser) extend(line int, more string) error {
	r := p.pending
	if len(r.content)+len(more) > maxRecord {
		return p.fail(r.line, "record "+r.code, errorf(ErrMalformed,
			"a record longer than %d bytes (continued from line %d to line %d)", maxRecord, r.line, line))
	}
	r.content = append(r.content, more...)
	return nil
}

// flush handles the pending logical record, now complete.
func (p *bai2Parser) flush() error {
	r := p.pending
	if r == nil {
		return nil
	}
	p.pending = nil
	p.fields = splitFields(p.fields[:0], string(r.content))
	if err := p.record(r.code, p.fields); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return err
		}
		return p.fail(r.line, "record "+r.code, err)
	}
	return nil
}

func splitFields(dst []string, s string) []string {
	for {
		i := strings.IndexByte(s, ',')
		if i < 0 {
			return append(dst, s)
		}
		dst = append(dst, s[:i])
		s = s[i+1:]
	}
}

// fieldAt returns f[i], or "" past the end (trailing empty fields may be
// left out).
func fieldAt(f []string, i int) string {
	if i < len(f) {
		return strings.TrimSpace(f[i])
	}
	return ""
}

func (p *bai2Parser) record(code string, f []string) error {
	if p.trailer {
		return errorf(ErrMalformed, "a record after the 99 file trailer")
	}
	if !p.header && code != "01" {
		return errorf(ErrMalformed, "record %s before the 01 file header", code)
	}
	switch code {
	case "01":
		if p.header {
			return errorf(ErrMalformed, "a second 01 file header")
		}
		p.header = true
	case "02":
		if p.inGroup {
			return errorf(ErrMalformed, "a 02 group header inside a group (no 98 trailer before it)")
		}
		p.inGroup = true
		p.groupCcy = fieldAt(f, 5)
		p.asOf = ""
		if d := fieldAt(f, 3); d != "" {
			t, err := shortDate(d)
			if err != nil {
				return err
			}
			p.asOf = t.Format("2006-01-02")
		}
	case "03":
		return p.account(f, p.recBuf.continued)
	case "16":
		return p.detail(f)
	case "49":
		if p.st == nil {
			return errorf(ErrMalformed, "a 49 account trailer without an 03 account")
		}
		st := p.st
		p.st = nil
		st.Balanced = p.sums.balanced(st.Currency, st.OpeningMinor, st.ClosingMinor)
		if p.h != nil {
			return p.h.EndStatement(st)
		}
	case "98":
		if !p.inGroup || p.st != nil {
			return errorf(ErrMalformed, "a 98 group trailer outside a group or before the account's 49")
		}
		p.inGroup = false
	case "99":
		if p.inGroup {
			return errorf(ErrMalformed, "the 99 file trailer inside a group (no 98 before it)")
		}
		p.trailer = true
	}
	return nil
}

// account handles an 03 record: a new statement with its balances. The
// summaries are read group by group, each by its layout (type code,
// amount, item count, funds type and what that type adds); continued
// lists where the record's 88 continuations begin. Banks pad a record
// with empty fields before its '/' ("…,015,35217175,,,/"): at a group's
// start, empty fields running to the next continuation are that padding,
// and counting them as fields would shift every group after it.
func (p *bai2Parser) account(f []string, continued []int) error {
	if !p.inGroup {
		return errorf(ErrMalformed, "an 03 account outside a group")
	}
	if p.st != nil {
		return errorf(ErrMalformed, "account %s has no 49 trailer", p.st.Account)
	}
	code := fieldAt(f, 1)
	if code == "" {
		code = p.groupCcy
	}
	if code == "" {
		code = "USD" // the specification's default
	}
	cur, err := p.cur.lookup(code)
	if err != nil {
		return err
	}
	p.st = &Statement{Account: fieldAt(f, 0), Currency: cur.Code}
	p.sums = p.sums[:0]
	for i := 2; i < len(f); {
		if next, ok := bai2Padding(f, i, continued); ok {
			i = next
			continue
		}
		typ, amt := fieldAt(f, i), fieldAt(f, i+1)
		extra, _, err := bai2Funds(f, i+3)
		if err != nil {
			return err
		}
		i += 4 + extra
		if amt == "" || (typ != "010" && typ != "015") {
			continue
		}
		v, err := bai2Amount(amt, true)
		if err != nil {
			return errorf(ErrMalformed, "type %s: %v", typ, err)
		}
		if typ == "010" {
			p.st.OpeningMinor = &v
		} else {
			p.st.ClosingMinor = &v
		}
	}
	return nil
}

// bai2Padding reports whether the fields of f from i to the next
// continuation's first field are all empty, and that field's index.
func bai2Padding(f []string, i int, continued []int) (next int, ok bool) {
	for _, c := range continued {
		if c <= i {
			continue
		}
		for j := i; j < c; j++ {
			if fieldAt(f, j) != "" {
				return 0, false
			}
		}
		return c, true
	}
	return 0, false
}

// bai2Funds reads the funds type at f[i] and returns how many fields of
// distribution follow it, and the value date of type V.
func bai2Funds(f []string, i int) (extra int, valueDate string, err error) {
	switch ft := strings.ToUpper(fieldAt(f, i)); ft {
	case "", "0", "1", "2", "Z":
		return 0, "", nil
	case "S":
		return 3, "", nil
	case "V":
		return 2, fieldAt(f, i+1), nil
	case "D":
		n, err := strconv.Atoi(fieldAt(f, i+1))
		if err != nil || n < 0 || n > len(f) {
			return 0, "", errorf(ErrMalformed, "funds type D with %q distributions", fieldAt(f, i+1))
		}
		return 1 + 2*n, "", nil
	default:
		return 0, "", errorf(ErrMalformed, "unknown funds type %q", ft)
	}
}

// bai2Amount reads a BAI2 amount: digits in minor units (the decimals are
// implied by the currency's exponent, so every amount is exact), signed
// only where signed is allowed (balances).
func bai2Amount(s string, signed bool) (int64, error) {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		if s[0] == '-' {
			if !signed {
				return 0, errorf(ErrMalformed, "negative amount %q", s)
			}
			neg = true
		}
		s = s[1:]
	}
	if s == "" {
		return 0, errorf(ErrMalformed, "empty amount")
	}
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errorf(ErrMalformed, "amount %q is not a number", s)
		}
		if v > (math.MaxInt64-int64(c-'0'))/10 {
			return 0, errorf(ErrMalformed, "amount %s is too large", s)
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, nil
}

// detail handles a 16 record: one entry with its one transaction.
func (p *bai2Parser) detail(f []string) error {
	if p.st == nil {
		return errorf(ErrMalformed, "a 16 detail outside an account")
	}
	typ := fieldAt(f, 0)
	n, err := strconv.Atoi(typ)
	if err != nil || len(typ) != 3 {
		return errorf(ErrMalformed, "type code %q is not three digits", typ)
	}
	e := Entry{Currency: p.st.Currency, BookedOn: p.asOf, ValueOn: p.asOf}
	switch {
	case n >= 100 && n <= 399:
		e.Direction = Credit
	case n >= 400 && n <= 699:
		e.Direction = Debit
	default:
		return errorf(ErrMalformed, "type code %s is neither a credit (100-399) nor a debit (400-699) detail", typ)
	}
	if e.AmountMinor, err = bai2Amount(fieldAt(f, 1), false); err != nil {
		return err
	}
	extra, valueDate, err := bai2Funds(f, 2)
	if err != nil {
		return err
	}
	if valueDate != "" {
		t, err := shortDate(valueDate)
		if err != nil {
			return err
		}
		e.ValueOn = t.Format("2006-01-02")
	}
	i := 3 + extra
	e.EntryRef = noRef(fieldAt(f, i))
	if bai2Returns[typ] {
		e.ReturnReason = typ
	}
	amount := e.AmountMinor
	e.Transactions = []Transaction{{Reference: noRef(fieldAt(f, i+1)), AmountMinor: &amount, ReturnReason: e.ReturnReason}}
	if err := p.sums.add(&e); err != nil {
		return err
	}
	if p.h != nil {
		return p.h.Entry(p.st, e)
	}
	return nil
}
