package statement

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
)

// sniffLen is how much of a file format detection looks at.
const sniffLen = 64 << 10

// Decoder reads one statement file in a streaming way. NewDecoder detects
// the format; Decode then hands the statements and entries to a Handler
// as they are read, so memory stays flat however large the file.
type Decoder struct {
	name   string
	format Format
	br     *bufio.Reader
	camt   *camtParser // set for XML: detection already read up to the message element
}

// NewDecoder detects the format of the file r from its content (never
// from name, which only names the file in errors) and returns a Decoder
// ready to read it. A file that is empty, a PDF, or in no format read
// here is refused with an *Error matching ErrNotStatement.
func NewDecoder(name string, r io.Reader) (*Decoder, error) {
	d := &Decoder{name: name, br: bufio.NewReaderSize(r, sniffLen)}
	head, err := d.br.Peek(sniffLen)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, &Error{File: name, Err: fmt.Errorf("error reading: %w", err)}
	}
	if bytes.HasPrefix(head, []byte("\xef\xbb\xbf")) {
		_, _ = d.br.Discard(3)
		head = head[3:]
	}
	refuse := func(format string, args ...any) (*Decoder, error) {
		return nil, &Error{File: name, Err: errorf(ErrNotStatement, format, args...)}
	}
	body := bytes.TrimLeft(head, " \t\r\n\f\v")
	switch {
	case len(head) == 0:
		return refuse("empty file")
	case len(body) == 0 && len(head) < sniffLen:
		return refuse("file holds only white space")
	case bytes.HasPrefix(head, []byte("\xfe\xff")), bytes.HasPrefix(head, []byte("\xff\xfe")):
		return refuse("UTF-16 text is not read (UTF-8, ASCII and ISO-8859-1 are)")
	case bytes.HasPrefix(body, []byte("%PDF")):
		return refuse("a PDF document")
	case bytes.HasPrefix(body, []byte("PK\x03\x04")):
		return refuse("a ZIP archive (unpack it first)")
	case bytes.HasPrefix(body, []byte("\x1f\x8b")):
		return refuse("a gzip file (unpack it first)")
	case body[0] == '<':
		d.camt = newCamtParser(name, d.br)
		if err := d.camt.run(nil, true); err != nil {
			return nil, err
		}
		d.format = d.camt.format
	case isBAI2Start(body):
		d.format = FormatBAI2
	case isMT940Start(body):
		d.format = FormatMT940
	default:
		n := min(len(body), 24)
		return refuse("it starts with %q", body[:n])
	}
	return d, nil
}

// Format is the detected format of the file.
func (d *Decoder) Format() Format { return d.format }

// Decode reads the whole file, calling h for every entry and at the end of
// every statement. It returns the first error: a malformed file as an
// *Error naming the file and its line or element, or what h returned.
// Whatever h was given before an error must be thrown away: a file is
// either read whole or refused.
func (d *Decoder) Decode(h Handler) error {
	g := &handlerGuard{h: h}
	var err error
	switch d.format {
	case FormatCamt053, FormatCamt054:
		err = d.camt.run(g, false)
	case FormatBAI2:
		err = (&bai2Parser{name: d.name, lines: newLineReader(d.br), h: g}).run()
	case FormatMT940:
		err = (&mt940Parser{name: d.name, lines: newLineReader(d.br), h: g}).run()
	default:
		err = &Error{File: d.name, Err: errorf(ErrNotStatement, "unknown format %q", d.format)}
	}
	if g.err != nil {
		return g.err // the handler's own error, as it returned it
	}
	return err
}

// handlerGuard remembers the error a Handler returned, so that Decode
// returns it unwrapped.
type handlerGuard struct {
	h   Handler
	err error
}

func (g *handlerGuard) Entry(st *Statement, e Entry) error {
	g.err = g.h.Entry(st, e)
	return g.err
}

func (g *handlerGuard) EndStatement(st *Statement) error {
	g.err = g.h.EndStatement(st)
	return g.err
}

// Parse reads the whole statement file r into memory; name names it in
// the result and in errors. For large files, use a Decoder with a Handler
// that does not keep every entry.
func Parse(name string, r io.Reader) (*File, error) {
	d, err := NewDecoder(name, r)
	if err != nil {
		return nil, err
	}
	c := &collector{file: &File{File: name, Format: d.Format(), Statements: []Statement{}}}
	if err := d.Decode(c); err != nil {
		return nil, err
	}
	return c.file, nil
}

// collector is the Handler of Parse: it keeps everything.
type collector struct {
	file    *File
	entries []Entry
}

func (c *collector) Entry(_ *Statement, e Entry) error {
	c.entries = append(c.entries, e)
	return nil
}

func (c *collector) EndStatement(st *Statement) error {
	s := *st
	s.Entries = c.entries
	if s.Entries == nil {
		s.Entries = []Entry{}
	}
	c.file.Statements = append(c.file.Statements, s)
	c.entries = nil
	return nil
}

// sums adds up a statement's entries per currency, to tell whether the
// balances agree with them.
type sums []currencySum

type currencySum struct {
	currency      string
	credit, debit int64
}

// add counts e, refusing sums that overflow int64.
func (s *sums) add(e *Entry) error {
	i := 0
	for i < len(*s) && (*s)[i].currency != e.Currency {
		i++
	}
	if i == len(*s) {
		*s = append(*s, currencySum{currency: e.Currency})
	}
	p := &(*s)[i].credit
	if e.Direction == Debit {
		p = &(*s)[i].debit
	}
	if *p > math.MaxInt64-e.AmountMinor {
		return errorf(ErrMalformed, "the %s entries add up to more than %d minor units", e.Currency, int64(math.MaxInt64))
	}
	*p += e.AmountMinor
	return nil
}

// balanced says whether opening + credits - debits == closing over the
// entries in currency; nil when a balance is missing.
func (s sums) balanced(currency string, opening, closing *int64) *bool {
	if opening == nil || closing == nil {
		return nil
	}
	var credit, debit int64
	for _, c := range s {
		if c.currency == currency {
			credit, debit = c.credit, c.debit
		}
	}
	// credit and debit are both in [0, MaxInt64], so net fits; opening +
	// net may not, and then it cannot equal closing.
	net := credit - debit
	overflows := (net > 0 && *opening > math.MaxInt64-net) || (net < 0 && *opening < math.MinInt64-net)
	ok := !overflows && *opening+net == *closing
	return &ok
}
