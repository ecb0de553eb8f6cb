package statement

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/settle/settle/settlement"
)

// isMT940Start says whether a file looks like MT940: a line starting with
// the :20: field or a SWIFT block header, within the head (banks put
// header lines of their own before the first message).
func isMT940Start(b []byte) bool {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexAny(b, "\r\n"); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if bytes.HasPrefix(line, []byte(":20:")) || bytes.HasPrefix(line, []byte("{1:")) {
			return true
		}
	}
	return false
}

// mt940Parser reads SWIFT MT940: each message (:20: to :62F:/:62M:) is a
// statement, the pages of a multi-page statement included. Lines that are
// not fields continue the field before them; lines outside a message
// (bank headers, :940:, blank lines) are skipped.
type mt940Parser struct {
	name  string
	lines *lineReader
	h     Handler
	cur   currencyCache

	// The field being read: its tag, its lines, its first line's number.
	tag     string
	val     []string
	valLen  int
	tagLine int

	messages int
	inMsg    bool
	msgLine  int
	st       *Statement
	stCcy    settlement.Currency
	has25    bool
	has62    bool
	sums     sums

	// The entry read from the last :61:, waiting for its :86:.
	pending    *Entry
	entry      Entry
	pendingRTI bool
	has86      bool
}

func (p *mt940Parser) fail(line int, element string, err error) error {
	return &Error{File: p.name, Line: line, Element: element, Err: err}
}

// mt940Tag splits a field line ":61:..." into its tag and value.
func mt940Tag(s string) (tag, value string, ok bool) {
	if len(s) < 4 || s[0] != ':' {
		return "", "", false
	}
	j := strings.IndexByte(s[1:], ':') + 1
	if j < 3 || j > 4 {
		return "", "", false
	}
	tag = s[1:j]
	if tag == "NS" {
		return tag, s[j+1:], true
	}
	if tag[0] < '0' || tag[0] > '9' || tag[1] < '0' || tag[1] > '9' {
		return "", "", false
	}
	if len(tag) == 3 && (tag[2] < 'A' || tag[2] > 'Z') {
		return "", "", false
	}
	return tag, s[j+1:], true
}

// isMessageEnd says whether s ends a message: "-", "-}" (SWIFT block 4),
// or a bank's "-XXX".
func isMessageEnd(s string) bool {
	s = strings.TrimRight(s, " \t")
	if s == "" || s[0] != '-' {
		return false
	}
	if strings.HasPrefix(s, "-}") {
		return true
	}
	for i := 1; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

func (p *mt940Parser) run() error {
	for {
		raw, err := p.lines.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return p.fail(p.lines.line+1, "", err)
		}
		s, line := string(raw), p.lines.line
		if strings.HasPrefix(s, "{") {
			// SWIFT blocks {1:...}{2:...}{4: open a message's text;
			// {5:...} trailers close it.
			i := strings.Index(s, "{4:")
			if i < 0 {
				continue
			}
			if s = s[i+3:]; s == "" {
				continue
			}
		}
		if isMessageEnd(s) {
			if err := p.endMessage(); err != nil {
				return err
			}
			continue
		}
		tag, value, ok := mt940Tag(s)
		if !ok {
			if p.tag != "" {
				if p.valLen += len(s); p.valLen > maxRecord {
					return p.fail(p.tagLine, "field :"+p.tag+":", errorf(ErrMalformed,
						"a field longer than %d bytes (continued from line %d to line %d)", maxRecord, p.tagLine, line))
				}
				p.val = append(p.val, s)
			}
			continue
		}
		if err := p.endField(); err != nil {
			return err
		}
		if tag == "20" {
			if err := p.endMessage(); err != nil {
				return err
			}
			p.beginMessage(line)
		} else if !p.inMsg {
			return p.fail(line, "field :"+tag+":", errorf(ErrMalformed, "a field outside a message (no :20: before it)"))
		}
		p.tag, p.val, p.valLen, p.tagLine = tag, append(p.val[:0], value), len(value), line
	}
	if err := p.endMessage(); err != nil {
		return err
	}
	if p.messages == 0 {
		return p.fail(0, "", errorf(ErrMalformed, "no MT940 message (:20: ... :62F:)"))
	}
	return nil
}

func (p *mt940Parser) beginMessage(line int) {
	p.inMsg, p.msgLine = true, line
	p.messages++
	p.st = &Statement{}
	p.has25, p.has62 = false, false
	p.pending = nil
	p.sums = p.sums[:0]
}

func (p *mt940Parser) endMessage() error {
	if err := p.endField(); err != nil {
		return err
	}
	if !p.inMsg {
		return nil
	}
	p.inMsg = false
	if err := p.flushEntry(); err != nil {
		return err
	}
	missing := ""
	switch {
	case !p.has25:
		missing = "the account :25:"
	case p.st.Currency == "":
		missing = "the opening balance :60F:/:60M:"
	case !p.has62:
		missing = "the closing balance :62F:/:62M: (truncated?)"
	}
	if missing != "" {
		return p.fail(p.msgLine, "field :20:", errorf(ErrMalformed, "the message that starts here has no %s", missing))
	}
	st := p.st
	st.Balanced = p.sums.balanced(st.Currency, st.OpeningMinor, st.ClosingMinor)
	p.st = nil
	if p.h != nil {
		return p.h.EndStatement(st)
	}
	return nil
}

// endField handles the field just read.
func (p *mt940Parser) endField() error {
	tag := p.tag
	if tag == "" {
		return nil
	}
	p.tag = ""
	if err := p.field(tag); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return err
		}
		return p.fail(p.tagLine, "field :"+tag+":", err)
	}
	return nil
}

func (p *mt940Parser) field(tag string) error {
	first := strings.TrimSpace(p.val[0])
	switch tag {
	case "25":
		p.st.Account, p.has25 = first, true
	case "60F", "60M":
		if p.st.Currency != "" {
			return errorf(ErrMalformed, "a second opening balance")
		}
		cur, v, err := p.balance(first)
		if err != nil {
			return err
		}
		p.stCcy, p.st.Currency, p.st.OpeningMinor = cur, cur.Code, &v
	case "61":
		switch {
		case p.st.Currency == "":
			return errorf(ErrMalformed, "an entry before the opening balance :60F:/:60M:")
		case p.has62:
			return errorf(ErrMalformed, "an entry after the closing balance")
		}
		if err := p.flushEntry(); err != nil {
			return err
		}
		return p.statementLine(first)
	case "86":
		if p.pending != nil && !p.has86 {
			p.has86 = true
			p.information(strings.Join(p.val, ""))
		}
	case "62F", "62M":
		if err := p.flushEntry(); err != nil {
			return err
		}
		if p.has62 {
			return errorf(ErrMalformed, "a second closing balance")
		}
		if p.st.Currency == "" {
			return errorf(ErrMalformed, "a closing balance without an opening balance :60F:/:60M:")
		}
		cur, v, err := p.balance(first)
		if err != nil {
			return err
		}
		if cur.Code != p.st.Currency {
			return errorf(ErrMalformed, "closing balance in %s, opening in %s", cur.Code, p.st.Currency)
		}
		p.st.ClosingMinor, p.has62 = &v, true
	}
	return nil
}

// balance reads a :60a:/:62a: value: C or D, YYMMDD, currency, amount.
func (p *mt940Parser) balance(s string) (settlement.Currency, int64, error) {
	if len(s) < 11 || (s[0] != 'C' && s[0] != 'D') {
		return settlement.Currency{}, 0, errorf(ErrMalformed, "balance %q is not C|D YYMMDD CCY amount", s)
	}
	if _, err := shortDate(s[1:7]); err != nil {
		return settlement.Currency{}, 0, err
	}
	cur, err := p.cur.lookup(s[7:10])
	if err != nil {
		return settlement.Currency{}, 0, err
	}
	v, err := minorUnits(s[10:], ',', cur.Exponent, cur.Code)
	if err != nil {
		return settlement.Currency{}, 0, err
	}
	if s[0] == 'D' {
		v = -v
	}
	return cur, v, nil
}

// statementLine reads a :61: first line: value date YYMMDD, entry date
// MMDD (optional), C, D, RC or RD, an optional funds code letter, the
// amount, the transaction type (N/S/F and three characters), the
// customer reference, // and the bank's reference.
func (p *mt940Parser) statementLine(s string) error {
	bad := func(what string) error {
		return errorf(ErrMalformed, "statement line %q: %s", s, what)
	}
	if len(s) < 6 {
		return bad("too short")
	}
	value, err := shortDate(s[:6])
	if err != nil {
		return err
	}
	e := Entry{Currency: p.st.Currency, ValueOn: value.Format(time.DateOnly)}
	e.BookedOn = e.ValueOn
	i := 6
	if len(s) >= 10 && isDigits(s[6:10]) {
		booked, err := entryDate(value, s[6:10])
		if err != nil {
			return err
		}
		e.BookedOn = booked
		i = 10
	}
	switch {
	case strings.HasPrefix(s[i:], "RC"):
		e.Direction, e.Reversal = Debit, true // the reversal of a credit is a debit
		i += 2
	case strings.HasPrefix(s[i:], "RD"):
		e.Direction, e.Reversal = Credit, true
		i += 2
	case strings.HasPrefix(s[i:], "C"):
		e.Direction = Credit
		i++
	case strings.HasPrefix(s[i:], "D"):
		e.Direction = Debit
		i++
	default:
		return bad("no C, D, RC or RD mark")
	}
	if i < len(s) && s[i] >= 'A' && s[i] <= 'Z' {
		i++ // the funds code: the third letter of the currency code
	}
	j := i
	for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == ',') {
		j++
	}
	if e.AmountMinor, err = minorUnits(s[i:j], ',', p.stCcy.Exponent, p.stCcy.Code); err != nil {
		return err
	}
	if len(s) < j+4 {
		return bad("no transaction type after the amount")
	}
	p.pendingRTI = s[j+1:j+4] == "RTI"
	if k := strings.Index(s[j+4:], "//"); k >= 0 {
		e.EntryRef = noRef(s[j+4+k+2:])
	}
	amount := e.AmountMinor
	e.Transactions = []Transaction{{AmountMinor: &amount}}
	p.entry = e
	p.pending, p.has86 = &p.entry, false
	return nil
}

// entryDate places the :61: entry date MMDD in the year of the value date
// it lies closest to (a December value date booked in January is booked
// the next year).
func entryDate(value time.Time, mmdd string) (string, error) {
	year := value.Year()
	month := int(mmdd[0]-'0')*10 + int(mmdd[1]-'0')
	switch {
	case value.Month() == time.December && month == 1:
		year++
	case value.Month() == time.January && month == 12:
		year--
	}
	return isoDate(fmt.Sprintf("%04d-%s-%s", year, mmdd[:2], mmdd[2:]))
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// noRef trims a reference and drops the placeholders that mean none.
func noRef(s string) string {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "NONREF") || strings.EqualFold(s, "NOTPROVIDED") {
		return ""
	}
	return s
}

// sepaIDs are the identifiers of the German structured :86: purpose text
// (EREF+, KREF+, ...): a value runs up to the next of them.
var sepaIDs = []string{"EREF+", "KREF+", "MREF+", "CRED+", "DEBT+", "COAM+", "OAMT+", "SVWZ+", "ABWA+", "ABWE+", "IBAN+", "BIC+", "PURP+", "RTRN+"}

// information reads the :86: of the pending entry (its lines joined as
// they wrap): the end-to-end reference from the German ?20-?29 EREF+ or
// the Dutch /EREF/, and a return reason from /RTRN/.
func (p *mt940Parser) information(s string) {
	e := p.pending
	ref, reason, name, account := "", "", "", ""
	if len(s) >= 4 && isDigits(s[:3]) && (s[3] == '?' || s[3] == '>') {
		name = germanSubfields(s, s[3], func(code string) bool { return code == "32" || code == "33" })
		account = germanSubfields(s, s[3], func(code string) bool { return code == "31" })
		purpose := germanPurpose(s, s[3])
		if i := strings.Index(purpose, "EREF+"); i >= 0 {
			v := purpose[i+5:]
			end := len(v)
			for _, id := range sepaIDs {
				if k := strings.Index(v, id); k >= 0 && k < end {
					end = k
				}
			}
			ref = v[:end]
		}
	} else {
		ref = slashField(s, "/EREF/")
		reason = slashField(s, "/RTRN/")
		name = slashField(s, "/NAME/")
		account = slashField(s, "/IBAN/")
		// ING's /CNTP/account/BIC/name/city/ names the other party in
		// one field.
		if cntp := slashFields(s, "/CNTP/", 3); cntp != nil {
			if account == "" {
				account = cntp[0]
			}
			if name == "" {
				name = cntp[2]
			}
		}
	}
	if reason == "" && p.pendingRTI {
		reason = "RTI"
	}
	e.Transactions[0].Reference = noRef(ref)
	e.Transactions[0].Counterparty = strings.TrimSpace(name)
	e.Transactions[0].CounterpartyAccount = strings.ReplaceAll(strings.TrimSpace(account), " ", "")
	e.ReturnReason = strings.TrimSpace(reason)
	e.Transactions[0].ReturnReason = e.ReturnReason
}

// germanPurpose returns the purpose subfields ?20 to ?29 and ?60 to ?63
// of a German structured :86: (subfields start with sep and two digits),
// joined as written.
func germanPurpose(s string, sep byte) string {
	return germanSubfields(s, sep, func(code string) bool {
		return code[0] == '2' || (code[0] == '6' && code[1] <= '3')
	})
}

// germanSubfields returns the subfields of a German structured :86: whose
// two-digit code keep accepts, joined as written.
func germanSubfields(s string, sep byte, keep func(code string) bool) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, sep)
		if i < 0 {
			break
		}
		s = s[i+1:]
		if len(s) < 2 || !isDigits(s[:2]) {
			continue
		}
		code := s[:2]
		s = s[2:]
		end := len(s)
		for k := 0; k+2 < len(s); k++ {
			if s[k] == sep && isDigits(s[k+1:k+3]) {
				end = k
				break
			}
		}
		if keep(code) {
			b.WriteString(s[:end])
		}
		s = s[end:]
	}
	return b.String()
}

// slashField returns the value after key in a /KEY/value/ structure.
func slashField(s, key string) string {
	i := strings.Index(s, key)
	if i < 0 {
		return ""
	}
	v := s[i+len(key):]
	if j := strings.IndexByte(v, '/'); j >= 0 {
		v = v[:j]
	}
	return v
}

// slashFields returns the n values after key in a /KEY/v1/v2/…/
// structure, or nil when key is absent or is followed by fewer than n
// slashes.
func slashFields(s, key string, n int) []string {
	i := strings.Index(s, key)
	if i < 0 {
		return nil
	}
	v := strings.SplitN(s[i+len(key):], "/", n+1)
	if len(v) < n+1 {
		return nil
	}
	return v[:n]
}

// flushEntry hands the pending entry over.
func (p *mt940Parser) flushEntry() error {
	e := p.pending
	if e == nil {
		return nil
	}
	p.pending = nil
	if !p.has86 && p.pendingRTI {
		e.ReturnReason = "RTI"
		e.Transactions[0].ReturnReason = "RTI"
	}
	if err := p.sums.add(e); err != nil {
		return err
	}
	if p.h != nil {
		return p.h.Entry(p.st, *e)
	}
	return nil
}
