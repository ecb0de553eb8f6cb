package statement

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/settle/settle/settlement"
)

// Limits that keep a hostile XML file from growing memory: the XML
// decoder holds a whole token (a text, a tag with its attributes) and the
// element stack in memory.
const (
	maxXMLDepth = 64      // camt nests about 15 deep
	maxXMLRun   = 1 << 20 // bytes between two '<': a text or one tag
)

// field says what a captured element's text is for.
type field int

const (
	fNone        field = iota // only an amount to check (it has a Ccy)
	fAcctCcy                  // Stmt/Acct/Ccy
	fIBAN                     // Stmt/Acct/Id/IBAN
	fOthrID                   // Stmt/Acct/Id/Othr/Id
	fBalType                  // Bal/Tp/CdOrPrtry/Cd
	fBalAmt                   // Bal/Amt
	fBalCdtDbt                // Bal/CdtDbtInd
	fNtryAmt                  // Ntry/Amt
	fNtryCdtDbt               // Ntry/CdtDbtInd
	fRvslInd                  // Ntry/RvslInd
	fNtryRef                  // Ntry/NtryRef
	fAcctSvcrRef              // Ntry/AcctSvcrRef
	fBookgDt                  // Ntry/BookgDt/Dt or DtTm
	fValDt                    // Ntry/ValDt/Dt or DtTm
	fEndToEndID               // TxDtls/Refs/EndToEndId
	fRtrCd                    // TxDtls/RtrInf/Rsn/Cd
	fRtrPrtry                 // TxDtls/RtrInf/Rsn/Prtry
	fCdtrNm                   // TxDtls/RltdPties/Cdtr/Nm (Cdtr/Pty/Nm from .08)
	fDbtrNm                   // TxDtls/RltdPties/Dbtr/Nm (Dbtr/Pty/Nm from .08)
	fCdtrAcct                 // TxDtls/RltdPties/CdtrAcct/Id/IBAN or Id/Othr/Id
	fDbtrAcct                 // TxDtls/RltdPties/DbtrAcct/Id/IBAN or Id/Othr/Id
	fTxAmt                    // TxDtls/Amt, then AmtDtls/TxAmt, CntrValAmt, InstdAmt /Amt (fTxAmt+i)
)

// txAmounts is how many amounts of a TxDtls are candidates for its amount,
// in order of preference.
const txAmounts = 4

// camtAmount is an amount read from the file, with its currency.
type camtAmount struct {
	minor    int64
	currency string
	set      bool
}

// camtBalance is a Bal being read.
type camtBalance struct {
	typ  string
	amt  camtAmount
	sign string // CRDT or DBIT
}

// camtParser reads camt.053 and camt.054 by local element names, whatever
// the namespace, token by token.
type camtParser struct {
	name   string
	d      *xml.Decoder
	cur    currencyCache
	h      Handler
	format Format
	stack  []string
	// refusal is why classify refused an element.
	refusal error

	msgDepth int // depth of BkToCstmrStmt or BkToCstmrDbtCdtNtfctn; 0 outside

	// The statement being read.
	st             *Statement
	stDepth, stNum int
	acctCcy        string
	iban, othrID   string
	balCcy         string
	balCcyMixed    bool
	opbd, prcd     *int64
	clbd           *int64
	sums           sums
	bal            *camtBalance // the Bal being read, or nil; points at balBuf
	balBuf         camtBalance
	balDepth       int

	// The entry being read.
	inNtry             bool
	ntryDepth, ntryNum int
	e                  Entry
	eAmt               camtAmount
	eCdtDbt            string
	ntryRef, svcrRef   string

	// The transaction details being read.
	inTx     bool
	txDepth  int
	tx       Transaction
	txAmt    [txAmounts]camtAmount
	returned bool
	rtrCd    string
	rtrPrtry string
	cdtrNm   string
	dbtrNm   string
	cdtrAcct string
	dbtrAcct string
	// parties holds each TxDtls's creditor and debtor (names and
	// accounts) until the entry's direction says which is the
	// counterparty.
	parties [][2]party

	// The element whose text is being captured.
	capturing bool
	capDepth  int
	capField  field
	capCcy    string
	text      []byte
}

func newCamtParser(name string, r io.Reader) *camtParser {
	g := &markupGuard{r: r}
	d := xml.NewDecoder(g)
	d.CharsetReader = charsetReader
	return &camtParser{name: name, d: d, stack: make([]string, 0, 32)}
}

// fail returns the error e at the current position and element.
func (p *camtParser) fail(err error) error {
	line, _ := p.d.InputPos()
	return &Error{File: p.name, Line: line, Element: p.path(), Err: err}
}

// path names the current element from the message element down, with the
// statement's and the entry's numbers: BkToCstmrStmt/Stmt[2]/Ntry[7]/Amt.
func (p *camtParser) path() string {
	from := p.msgDepth - 1
	if from < 0 {
		from = 0
	}
	var b strings.Builder
	for i := from; i < len(p.stack); i++ {
		if i > from {
			b.WriteByte('/')
		}
		b.WriteString(p.stack[i])
		switch {
		case p.st != nil && i == p.stDepth-1:
			b.WriteString("[" + strconv.Itoa(p.stNum) + "]")
		case p.inNtry && i == p.ntryDepth-1:
			b.WriteString("[" + strconv.Itoa(p.ntryNum) + "]")
		}
	}
	return b.String()
}

// run reads tokens, calling h, until the end of the document, or with
// untilMessage only until the message element is found (format detection).
func (p *camtParser) run(h Handler, untilMessage bool) error {
	p.h = h
	for {
		if untilMessage && p.msgDepth > 0 {
			return nil
		}
		tok, err := p.d.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return p.end()
			}
			return p.readError(err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if err := p.start(t); err != nil {
				return err
			}
		case xml.EndElement:
			if err := p.endElement(); err != nil {
				return err
			}
		case xml.CharData:
			if p.capturing {
				// A text cut into pieces (by comments, CDATA sections)
				// is bounded as a whole.
				if len(p.text)+len(t) > maxXMLRun {
					return p.fail(errorf(ErrMalformed, "more than %d bytes of text in one element", maxXMLRun))
				}
				p.text = append(p.text, t...)
			}
		case xml.Directive:
			return p.fail(errorf(ErrMalformed, "a DOCTYPE or other <!...> declaration: refused (no DTDs, entity definitions or external entities)"))
		}
	}
}

func (p *camtParser) readError(err error) error {
	var se *xml.SyntaxError
	var ge *guardError
	switch {
	case errors.As(err, &ge):
		return &Error{File: p.name, Line: ge.line, Err: errorf(ErrMalformed, "%s", ge.msg)}
	case errors.As(err, &se):
		msg := se.Msg
		if msg == "unexpected EOF" {
			msg = "unexpected end of file (truncated?)"
		}
		return &Error{File: p.name, Line: se.Line, Element: p.path(), Err: errorf(ErrMalformed, "XML: %s", msg)}
	}
	line, _ := p.d.InputPos()
	if errors.Is(err, ErrMalformed) { // an encoding that is not read
		return &Error{File: p.name, Line: line, Err: err}
	}
	return &Error{File: p.name, Line: line, Err: fmt.Errorf("error reading: %w", err)}
}

// end checks, at the end of the document, that it held a camt message.
func (p *camtParser) end() error {
	if p.format == "" {
		return &Error{File: p.name, Err: errorf(ErrNotStatement, "an XML document without a camt.053 BkToCstmrStmt or camt.054 BkToCstmrDbtCdtNtfctn")}
	}
	return nil
}

func (p *camtParser) start(t xml.StartElement) error {
	n := t.Name.Local
	p.stack = append(p.stack, n)
	depth := len(p.stack)
	if depth > maxXMLDepth {
		return p.fail(errorf(ErrMalformed, "elements nested more than %d deep", maxXMLDepth))
	}
	p.capturing = false
	ccy := ""
	for _, a := range t.Attr {
		if a.Name.Local == "Ccy" {
			ccy = a.Value
		}
	}
	f, capture := p.classify(n, depth)
	if f < 0 {
		return p.fail(p.refusal)
	}
	if capture || ccy != "" {
		p.capturing, p.capDepth, p.capField, p.capCcy = true, depth, f, ccy
		p.text = p.text[:0]
	}
	return nil
}

// parent returns the name of the element k levels above the current one
// (1: its parent), or "".
func (p *camtParser) parent(k int) string {
	i := len(p.stack) - 1 - k
	if i < 0 {
		return ""
	}
	return p.stack[i]
}

// classify decides what the element n at depth is: which field it
// carries (capture true), or what structure it opens. It returns -1 for a
// message type that is refused.
func (p *camtParser) classify(n string, depth int) (field, bool) {
	switch {
	case p.inTx:
		switch depth - p.txDepth {
		case 1:
			switch n {
			case "Amt":
				return fTxAmt, true
			case "RtrInf":
				p.returned = true
			}
		case 2:
			if n == "EndToEndId" && p.parent(1) == "Refs" {
				return fEndToEndID, true
			}
		case 3:
			if n == "Amt" && p.parent(2) == "AmtDtls" {
				switch p.parent(1) {
				case "TxAmt":
					return fTxAmt + 1, true
				case "CntrValAmt":
					return fTxAmt + 2, true
				case "InstdAmt":
					return fTxAmt + 3, true
				}
			}
			if p.parent(2) == "RtrInf" && p.parent(1) == "Rsn" {
				switch n {
				case "Cd":
					return fRtrCd, true
				case "Prtry":
					return fRtrPrtry, true
				}
			}
			if n == "Nm" && p.parent(2) == "RltdPties" {
				if f, ok := partyName(p.parent(1)); ok {
					return f, true
				}
			}
		case 4:
			if n == "Nm" && p.parent(1) == "Pty" && p.parent(3) == "RltdPties" {
				if f, ok := partyName(p.parent(2)); ok {
					return f, true
				}
			}
			if n == "IBAN" && p.parent(1) == "Id" && p.parent(3) == "RltdPties" {
				if f, ok := partyAccount(p.parent(2)); ok {
					return f, true
				}
			}
		case 5:
			if n == "Id" && p.parent(1) == "Othr" && p.parent(2) == "Id" && p.parent(4) == "RltdPties" {
				if f, ok := partyAccount(p.parent(3)); ok {
					return f, true
				}
			}
		}
	case p.inNtry:
		switch depth - p.ntryDepth {
		case 1:
			switch n {
			case "Amt":
				return fNtryAmt, true
			case "CdtDbtInd":
				return fNtryCdtDbt, true
			case "RvslInd":
				return fRvslInd, true
			case "NtryRef":
				return fNtryRef, true
			case "AcctSvcrRef":
				return fAcctSvcrRef, true
			}
		case 2:
			if n == "Dt" || n == "DtTm" {
				switch p.parent(1) {
				case "BookgDt":
					return fBookgDt, true
				case "ValDt":
					return fValDt, true
				}
			}
			if n == "TxDtls" && p.parent(1) == "NtryDtls" {
				p.inTx, p.txDepth = true, depth
				p.tx = Transaction{}
				p.txAmt = [txAmounts]camtAmount{}
				p.returned, p.rtrCd, p.rtrPrtry = false, "", ""
				p.cdtrNm, p.dbtrNm, p.cdtrAcct, p.dbtrAcct = "", "", "", ""
			}
		}
	case p.bal != nil:
		switch depth - p.balDepth {
		case 1:
			switch n {
			case "Amt":
				return fBalAmt, true
			case "CdtDbtInd":
				return fBalCdtDbt, true
			}
		case 3:
			if n == "Cd" && p.parent(1) == "CdOrPrtry" && p.parent(2) == "Tp" {
				return fBalType, true
			}
		}
	case p.st != nil:
		switch depth - p.stDepth {
		case 1:
			switch n {
			case "Bal":
				p.balBuf = camtBalance{}
				p.bal, p.balDepth = &p.balBuf, depth
			case "Ntry":
				p.inNtry, p.ntryDepth = true, depth
				p.ntryNum++
				p.e = Entry{}
				p.eAmt, p.eCdtDbt, p.ntryRef, p.svcrRef = camtAmount{}, "", "", ""
				p.parties = p.parties[:0]
			}
		case 2:
			if n == "Ccy" && p.parent(1) == "Acct" {
				return fAcctCcy, true
			}
		case 3:
			if n == "IBAN" && p.parent(1) == "Id" && p.parent(2) == "Acct" {
				return fIBAN, true
			}
		case 4:
			if n == "Id" && p.parent(1) == "Othr" && p.parent(2) == "Id" && p.parent(3) == "Acct" {
				return fOthrID, true
			}
		}
	case p.msgDepth > 0:
		if depth == p.msgDepth+1 && (n == "Stmt" || n == "Ntfctn" || n == "Rpt") {
			p.beginStatement(depth)
		}
	default:
		switch n {
		case "BkToCstmrStmt", "BkToCstmrDbtCdtNtfctn":
			f := FormatCamt053
			if n == "BkToCstmrDbtCdtNtfctn" {
				f = FormatCamt054
			}
			if p.format != "" && p.format != f {
				p.refusal = errorf(ErrMalformed, "a %s message after a %s message in one file", f, p.format)
				return -1, false
			}
			p.format, p.msgDepth = f, depth
		case "BkToCstmrAcctRpt":
			p.refusal = errorf(ErrNotStatement, "a camt.052 account report; only camt.053 and camt.054 are read")
			return -1, false
		}
	}
	return fNone, false
}

func (p *camtParser) beginStatement(depth int) {
	p.st = &Statement{}
	p.stDepth = depth
	p.stNum++
	p.ntryNum = 0
	p.acctCcy, p.iban, p.othrID, p.balCcy, p.balCcyMixed = "", "", "", "", false
	p.opbd, p.prcd, p.clbd = nil, nil, nil
	p.sums = p.sums[:0]
}

func (p *camtParser) endElement() error {
	depth := len(p.stack)
	if p.capturing && depth == p.capDepth {
		p.capturing = false
		if err := p.captured(); err != nil {
			return p.fail(err)
		}
	}
	// The structure ends only after a failure is reported, so that the
	// error's path still numbers the statement and the entry.
	var err error
	switch {
	case p.inTx && depth == p.txDepth:
		p.endTx()
		p.inTx = false
	case p.inNtry && depth == p.ntryDepth:
		if err = p.endNtry(); err == nil {
			p.inNtry = false
		}
	case p.bal != nil && depth == p.balDepth:
		if err = p.endBal(); err == nil {
			p.bal = nil
		}
	case p.st != nil && depth == p.stDepth:
		if err = p.endStatement(); err == nil {
			p.st = nil
		}
	case depth == p.msgDepth:
		p.msgDepth = 0
	}
	if err != nil {
		return p.fail(err)
	}
	p.stack = p.stack[:depth-1]
	return nil
}

// captured handles the text of a captured element.
func (p *camtParser) captured() error {
	var amt camtAmount
	if p.capCcy != "" || p.capField == fNtryAmt || p.capField == fBalAmt || p.capField >= fTxAmt {
		var err error
		amt, err = p.amount()
		// An amount in a currency that is not ISO 4217 refuses the file
		// only where the entry or a balance depends on it.
		optional := p.capField == fNone || p.capField >= fTxAmt
		if err != nil && (!optional || !errors.Is(err, settlement.ErrUnknownCurrency)) {
			return err
		}
	}
	s := strings.TrimSpace(string(p.text))
	switch f := p.capField; f {
	case fAcctCcy:
		p.acctCcy = s
	case fIBAN:
		p.iban = s
	case fOthrID:
		p.othrID = s
	case fBalType:
		p.bal.typ = s
	case fBalAmt:
		p.bal.amt = amt
		switch {
		case p.balCcy == "":
			p.balCcy = amt.currency
		case p.balCcy != amt.currency:
			p.balCcyMixed = true
		}
	case fBalCdtDbt:
		p.bal.sign = s
	case fNtryAmt:
		p.eAmt = amt
	case fNtryCdtDbt:
		p.eCdtDbt = s
	case fRvslInd:
		switch s {
		case "true", "1":
			p.e.Reversal = true
		case "false", "0":
		default:
			return errorf(ErrMalformed, "RvslInd %q is not true or false", s)
		}
	case fNtryRef:
		p.ntryRef = s
	case fAcctSvcrRef:
		p.svcrRef = s
	case fBookgDt, fValDt:
		d, err := camtDate(s, p.stack[len(p.stack)-1] == "DtTm")
		if err != nil {
			return err
		}
		if f == fBookgDt {
			p.e.BookedOn = d
		} else {
			p.e.ValueOn = d
		}
	case fEndToEndID:
		if !strings.EqualFold(s, "NOTPROVIDED") {
			p.tx.Reference = s
		}
	case fRtrCd:
		p.rtrCd = s
	case fRtrPrtry:
		p.rtrPrtry = s
	case fCdtrNm:
		p.cdtrNm = s
	case fDbtrNm:
		p.dbtrNm = s
	case fCdtrAcct:
		if p.cdtrAcct == "" { // an IBAN comes before Othr in the schema
			p.cdtrAcct = s
		}
	case fDbtrAcct:
		if p.dbtrAcct == "" {
			p.dbtrAcct = s
		}
	default:
		if f >= fTxAmt {
			p.txAmt[f-fTxAmt] = amt
		}
	}
	return nil
}

// amount reads the captured text as an amount in the captured Ccy.
func (p *camtParser) amount() (camtAmount, error) {
	if p.capCcy == "" {
		return camtAmount{}, errorf(ErrMalformed, "amount without a Ccy attribute")
	}
	cur, err := p.cur.lookup(p.capCcy)
	if err != nil {
		return camtAmount{}, err
	}
	v, err := minorUnits(string(bytes.TrimSpace(p.text)), '.', cur.Exponent, cur.Code)
	if err != nil {
		return camtAmount{}, err
	}
	return camtAmount{minor: v, currency: cur.Code, set: true}, nil
}

// camtDate returns the date of an ISODate, or of an ISODateTime
// (2014-01-03T10:00:00+01:00: the date as the bank wrote it).
func camtDate(s string, dateTime bool) (string, error) {
	if dateTime {
		if len(s) < 11 || s[10] != 'T' {
			return "", errorf(ErrMalformed, "date-time %q is not YYYY-MM-DDThh:mm:ss", s)
		}
		s = s[:10]
	}
	return isoDate(s)
}

func (p *camtParser) endTx() {
	for _, a := range p.txAmt {
		if a.set && a.currency == p.eAmt.currency {
			v := a.minor
			p.tx.AmountMinor = &v
			break
		}
	}
	if p.returned {
		switch {
		case p.rtrCd != "":
			p.tx.ReturnReason = p.rtrCd
		case p.rtrPrtry != "":
			p.tx.ReturnReason = p.rtrPrtry
		default:
			p.tx.ReturnReason = "NARR"
		}
	}
	p.e.Transactions = append(p.e.Transactions, p.tx)
	p.parties = append(p.parties, [2]party{{p.cdtrNm, p.cdtrAcct}, {p.dbtrNm, p.dbtrAcct}})
}

// partyName is the field of a related party's name: the creditor's or the
// debtor's.
func partyName(party string) (field, bool) {
	switch party {
	case "Cdtr":
		return fCdtrNm, true
	case "Dbtr":
		return fDbtrNm, true
	}
	return fNone, false
}

// partyAccount is the field of a related party's account: the
// creditor's or the debtor's.
func partyAccount(acct string) (field, bool) {
	switch acct {
	case "CdtrAcct":
		return fCdtrAcct, true
	case "DbtrAcct":
		return fDbtrAcct, true
	}
	return fNone, false
}

// party is a related party of a transaction as a file names it.
type party struct{ name, account string }

func (p *camtParser) endNtry() error {
	e := &p.e
	if !p.eAmt.set {
		return errorf(ErrMalformed, "entry without Amt")
	}
	e.AmountMinor, e.Currency = p.eAmt.minor, p.eAmt.currency
	switch p.eCdtDbt {
	case "CRDT":
		e.Direction = Credit
	case "DBIT":
		e.Direction = Debit
	default:
		return errorf(ErrMalformed, "entry CdtDbtInd %q is not CRDT or DBIT", p.eCdtDbt)
	}
	e.EntryRef = p.svcrRef
	if e.EntryRef == "" {
		e.EntryRef = p.ntryRef
	}
	// The counterparty is the creditor of a debit, the debtor of a credit.
	for i := range e.Transactions {
		other := p.parties[i][0]
		if e.Direction == Credit {
			other = p.parties[i][1]
		}
		e.Transactions[i].Counterparty = other.name
		e.Transactions[i].CounterpartyAccount = strings.ReplaceAll(other.account, " ", "")
	}
	if len(e.Transactions) == 1 && e.Transactions[0].AmountMinor == nil {
		v := e.AmountMinor
		e.Transactions[0].AmountMinor = &v
	}
	for _, t := range e.Transactions {
		if t.ReturnReason != "" {
			e.ReturnReason = t.ReturnReason
			break
		}
	}
	if err := p.sums.add(e); err != nil {
		return err
	}
	p.flushHeader()
	if p.h != nil {
		if err := p.h.Entry(p.st, p.e); err != nil {
			return err
		}
	}
	p.e = Entry{}
	return nil
}

func (p *camtParser) endBal() error {
	b := p.bal
	var dst **int64
	switch b.typ {
	case "OPBD":
		dst = &p.opbd
	case "PRCD":
		dst = &p.prcd
	case "CLBD":
		dst = &p.clbd
	default:
		return nil
	}
	if *dst != nil {
		return nil // the first of its kind counts
	}
	if !b.amt.set {
		return errorf(ErrMalformed, "%s balance without Amt", b.typ)
	}
	v := b.amt.minor
	switch b.sign {
	case "CRDT":
	case "DBIT":
		v = -v
	default:
		return errorf(ErrMalformed, "%s balance CdtDbtInd %q is not CRDT or DBIT", b.typ, b.sign)
	}
	*dst = &v
	return nil
}

// flushHeader fills in the statement's header from what has been read.
func (p *camtParser) flushHeader() {
	st := p.st
	st.Account = p.iban
	if st.Account == "" {
		st.Account = p.othrID
	}
	st.Currency = p.acctCcy
	if st.Currency == "" && !p.balCcyMixed {
		st.Currency = p.balCcy
	}
	st.OpeningMinor = p.opbd
	if st.OpeningMinor == nil {
		st.OpeningMinor = p.prcd
	}
	st.ClosingMinor = p.clbd
}

func (p *camtParser) endStatement() error {
	p.flushHeader()
	st := p.st
	ccy := p.balCcy
	if p.balCcyMixed {
		ccy = st.Currency
	}
	st.Balanced = p.sums.balanced(ccy, st.OpeningMinor, st.ClosingMinor)
	if p.balCcyMixed && st.Balanced != nil && st.Currency == "" {
		st.Balanced = nil
	}
	if p.h != nil {
		return p.h.EndStatement(st)
	}
	return nil
}

// markupGuard passes a reader through, refusing any construct of more
// than maxXMLRun bytes: a text, a tag with its attributes, a comment, a
// CDATA section, a processing instruction or a declaration. The XML
// decoder holds one whole construct in memory, so none may be longer (a
// 50 MB text is refused, not read). A text or a tag ends at the next '<'
// (neither may hold one); a comment, a CDATA section or a processing
// instruction may hold '<' and ends only at its own end ("-->", "]]>",
// "?>"), so the guard follows the markup as the decoder does.
type markupGuard struct {
	r     io.Reader
	line  int // newlines read so far
	state guardState
	run   int    // bytes of the current construct so far
	start int    // the line the current construct started on (0-based)
	open  []byte // the bytes after '<' while telling what it opens
	tail  [2]byte
	depth int // '<' nesting inside a declaration
}

type guardState int

const (
	inText    guardState = iota // a text, or a tag: up to the next '<'
	inOpen                      // just after '<': what does it open?
	inComment                   // <!-- … -->
	inCDATA                     // <![CDATA[ … ]]>
	inPI                        // <? … ?>
	inDecl                      // <!DOCTYPE …> and other declarations
)

type guardError struct {
	line int
	msg  string
}

func (e *guardError) Error() string { return e.msg }

func (g *markupGuard) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	if gerr := g.scan(b[:n]); gerr != nil {
		return 0, gerr
	}
	return n, err
}

// scan follows the markup over chunk.
func (g *markupGuard) scan(chunk []byte) error {
	for i := 0; i < len(chunk); i++ {
		c := chunk[i]
		if g.state == inText {
			// Fast path: a text or a tag runs to the next '<'.
			j := bytes.IndexByte(chunk[i:], '<')
			end := len(chunk)
			if j >= 0 {
				end = i + j
			}
			g.line += bytes.Count(chunk[i:end], []byte{'\n'})
			g.run += end - i
			if g.run > maxXMLRun {
				return g.tooLong()
			}
			if j < 0 {
				return nil
			}
			i = end
			g.state, g.run, g.start, g.open = inOpen, 1, g.line, g.open[:0]
			continue
		}
		if c == '\n' {
			g.line++
		}
		g.run++
		switch g.state {
		case inOpen:
			g.open = append(g.open, c)
			switch {
			case g.open[0] == '?':
				g.state = inPI
			case g.open[0] != '!':
				g.state = inText // a tag
				if c == '<' {
					g.state, g.run, g.start, g.open = inOpen, 1, g.line, g.open[:0]
				}
			case string(g.open) == "!--":
				g.state = inComment
			case string(g.open) == "![CDATA[":
				g.state = inCDATA
			case !bytes.HasPrefix([]byte("!--"), g.open) && !bytes.HasPrefix([]byte("![CDATA["), g.open):
				g.state, g.depth = inDecl, 1
				switch c {
				case '<':
					g.depth++
				case '>':
					g.depth--
				}
			}
			g.tail = [2]byte{g.tail[1], c}
		case inComment, inCDATA, inPI:
			ends := c == '>' && ((g.state == inComment && g.tail == [2]byte{'-', '-'} && g.run >= len("<!---->")) ||
				(g.state == inCDATA && g.tail == [2]byte{']', ']'} && g.run >= len("<![CDATA[]]>")) ||
				(g.state == inPI && g.tail[1] == '?' && g.run >= len("<??>")))
			g.tail = [2]byte{g.tail[1], c}
			if ends {
				g.state, g.run = inText, 0
				continue
			}
		case inDecl:
			switch c {
			case '<':
				g.depth++
			case '>':
				g.depth--
			}
		}
		if g.state == inDecl && g.depth == 0 {
			g.state, g.run = inText, 0
			continue
		}
		if g.run > maxXMLRun {
			return g.tooLong()
		}
	}
	return nil
}

func (g *markupGuard) tooLong() error {
	what := map[guardState]string{inComment: "one comment", inCDATA: "one CDATA section", inPI: "one processing instruction",
		inDecl: "one declaration"}[g.state]
	if what == "" {
		what = "text or of one tag (no '<')"
	}
	return &guardError{line: g.start + 1, msg: fmt.Sprintf("more than %d bytes of %s, from line %d on", maxXMLRun, what, g.start+1)}
}

// charsetReader lets the XML decoder read the single-byte encodings banks
// declare besides UTF-8.
func charsetReader(label string, r io.Reader) (io.Reader, error) {
	switch strings.ToLower(label) {
	case "iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "iso_8859-1", "us-ascii", "ascii":
		return &latin1Reader{r: r}, nil
	case "windows-1252", "cp1252":
		return &latin1Reader{r: r, cp1252: true}, nil
	}
	return nil, errorf(ErrMalformed, "encoding %q is not read (UTF-8, ASCII, ISO-8859-1 and windows-1252 are)", label)
}

// latin1Reader converts ISO-8859-1 (or windows-1252) to UTF-8.
type latin1Reader struct {
	r      io.Reader
	cp1252 bool
	buf    []byte
	store  []byte
	out    []byte
}

// cp1252High maps windows-1252 bytes 0x80-0x9F; 0 where it has none.
var cp1252High = [32]rune{
	0x20AC, 0, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0, 0x017D, 0,
	0, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0, 0x017E, 0x0178,
}

func (l *latin1Reader) Read(b []byte) (int, error) {
	for len(l.out) == 0 {
		if l.buf == nil {
			l.buf = make([]byte, 4096)
			l.store = make([]byte, 0, 2*4096)
		}
		n, err := l.r.Read(l.buf)
		l.out = l.store[:0]
		for _, c := range l.buf[:n] {
			r := rune(c)
			if l.cp1252 && c >= 0x80 && c < 0xA0 && cp1252High[c-0x80] != 0 {
				r = cp1252High[c-0x80]
			}
			l.out = utf8.AppendRune(l.out, r)
		}
		if len(l.out) == 0 && err != nil {
			return 0, err
		}
	}
	n := copy(b, l.out)
	l.out = l.out[n:]
	return n, nil
}
