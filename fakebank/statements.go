package fakebank

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/settle/settle/settlement"
)

// StatementFormat is a file format the bank renders its books in.
type StatementFormat string

// The statement formats of GET /v1/statements/{date} (DESIGN section 14).
const (
	FormatCamt053 StatementFormat = "camt.053"
	FormatCamt054 StatementFormat = "camt.054"
	FormatBAI2    StatementFormat = "bai2"
	FormatMT940   StatementFormat = "mt940"
)

// StatementFormats lists the formats in the order of their media types.
var StatementFormats = []StatementFormat{FormatCamt053, FormatCamt054, FormatBAI2, FormatMT940}

// MediaType is the Content-Type the bank answers a format with, and the
// Accept value that asks for it.
func (f StatementFormat) MediaType() string {
	switch f {
	case FormatCamt053:
		return "application/vnd.iso20022.camt.053+xml"
	case FormatCamt054:
		return "application/vnd.iso20022.camt.054+xml"
	case FormatBAI2:
		return "application/vnd.bai2"
	case FormatMT940:
		return "application/vnd.swift.mt940"
	}
	return ""
}

// Statement options.
const (
	// DefaultStatementBatch is how many payments of a day a camt entry
	// books together at most (a batch booking, Btch/NbOfTxs).
	DefaultStatementBatch = 10
	// MaxStatementBatch bounds ?batch=.
	MaxStatementBatch = 1000
)

// ErrNoStatement: no account has bookings on or before the day asked for,
// or the day has not begun.
var ErrNoStatement = errors.New("no statement for that day")

// booking is one movement of money on an account: a settled payment going
// out, or a returned one coming back.
type booking struct {
	at     time.Time
	p      *payment
	credit bool // a return
}

// accountDay is what one account in one currency did on one day.
type accountDay struct {
	account, currency string
	exponent          int
	opening, closing  int64
	bookings          []booking
}

// statementEntry is one entry of a rendered statement: one booking, or a
// batch of settled payments booked together.
type statementEntry struct {
	ref      string
	credit   bool
	amount   int64
	bookings []booking
}

// entries groups the day's bookings into entries: returns one by one,
// settled payments in batches of up to batch (one entry each when batch
// is 1), in booking order.
func (d *accountDay) entries(batch int) []statementEntry {
	var out []statementEntry
	open := -1 // the batch being filled, an index in out
	for _, bk := range d.bookings {
		if bk.credit {
			out = append(out, statementEntry{ref: returnRef(bk.p), credit: true, amount: bk.p.Request.AmountCents, bookings: []booking{bk}})
			open = -1
			continue
		}
		if open < 0 || len(out[open].bookings) >= batch {
			out = append(out, statementEntry{})
			open = len(out) - 1
		}
		out[open].bookings = append(out[open].bookings, bk)
		out[open].amount += bk.p.Request.AmountCents
	}
	for i := range out {
		e := &out[i]
		if e.credit {
			continue
		}
		e.ref = e.bookings[0].p.ID
		if len(e.bookings) > 1 {
			e.ref = fmt.Sprintf("btc_%012d_%d", e.bookings[0].p.Seq, len(e.bookings))
		}
	}
	return out
}

// returnRef is the bank's reference of the entry that returns p.
func returnRef(p *payment) string { return fmt.Sprintf("rtn_%012d", p.Seq) }

// statementDay computes, from the books as they stand at now, every
// account's day: its opening balance (every booking before day, from
// zero), its bookings on day (those that happened by now) and its closing
// balance. Accounts with no booking on or before day are left out, and so
// are payments in a currency ISO 4217 does not know (no statement can say
// their amount).
func (bk *books) statementDay(day, now time.Time) []*accountDay {
	end := day.AddDate(0, 0, 1)
	byKey := map[[2]string]*accountDay{}
	var days []*accountDay
	add := func(b booking) {
		if !b.at.Before(end) {
			return
		}
		k := [2]string{b.p.Request.DebtorAccount, b.p.Request.Currency}
		d := byKey[k]
		if d == nil {
			cur, err := settlement.LookupCurrency(b.p.Request.Currency)
			if err != nil {
				return
			}
			d = &accountDay{account: k[0], currency: k[1], exponent: cur.Exponent}
			byKey[k] = d
			days = append(days, d)
		}
		amount := b.p.Request.AmountCents
		if !b.credit {
			amount = -amount
		}
		if b.at.Before(day) {
			d.opening += amount
		} else {
			d.bookings = append(d.bookings, b)
		}
		d.closing += amount
	}
	for _, p := range bk.payments {
		if !p.settledAt(now) {
			continue
		}
		add(booking{at: p.DueAt.UTC(), p: p})
		if p.returnedAt(now) {
			add(booking{at: p.ReturnAt.UTC(), p: p, credit: true})
		}
	}
	sort.Slice(days, func(i, j int) bool {
		if days[i].account != days[j].account {
			return days[i].account < days[j].account
		}
		return days[i].currency < days[j].currency
	})
	for _, d := range days {
		sort.SliceStable(d.bookings, func(i, j int) bool {
			a, b := d.bookings[i], d.bookings[j]
			if !a.at.Equal(b.at) {
				return a.at.Before(b.at)
			}
			return a.p.Seq < b.p.Seq
		})
	}
	return days
}

// RenderStatement renders the bank's books for day (its UTC date) in
// format, as they stand now: one statement per account and currency
// (every account with a booking on or before day), settled payments as
// debits in batch bookings of up to batch payments (camt only: BAI2 and
// MT940 book each payment on its own), returned ones booked back as
// credits with their return reason on the day they came back. It fails
// with ErrNoStatement when no account has a booking by then or day has not
// begun.
func (b *Bank) RenderStatement(day time.Time, format StatementFormat, batch int) ([]byte, error) {
	if batch <= 0 {
		batch = DefaultStatementBatch
	}
	day = time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	b.mu.Lock()
	now := b.now().UTC()
	if day.After(now) {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: %s has not begun", ErrNoStatement, day.Format(time.DateOnly))
	}
	days := b.books.statementDay(day, now)
	b.mu.Unlock()
	if len(days) == 0 {
		return nil, fmt.Errorf("%w: no account has a booking on or before %s", ErrNoStatement, day.Format(time.DateOnly))
	}
	w := statementWriter{day: day, now: now, batch: batch}
	switch format {
	case FormatCamt053, FormatCamt054:
		w.camt(format, days)
	case FormatBAI2:
		w.bai2(days)
	case FormatMT940:
		w.mt940(days)
	default:
		return nil, fmt.Errorf("unknown statement format %q", format)
	}
	return w.buf.Bytes(), nil
}

// statementWriter writes one statement file.
type statementWriter struct {
	buf      bytes.Buffer
	day, now time.Time
	batch    int
}

func (w *statementWriter) printf(format string, args ...any) { fmt.Fprintf(&w.buf, format, args...) }

// decimal writes a non-negative amount in minor units with its
// currency's exponent and sep as the decimal separator (MT940 writes
// "12,50", and "5," for a currency without minor units).
func decimal(minor int64, exponent int, sep string, trailingSep bool) string {
	s := strconv.FormatInt(minor, 10)
	if exponent == 0 {
		if trailingSep {
			return s + sep
		}
		return s
	}
	if len(s) <= exponent {
		s = strings.Repeat("0", exponent-len(s)+1) + s
	}
	return s[:len(s)-exponent] + sep + s[len(s)-exponent:]
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// statementFormat decides the format of a request: ?format= if given,
// else the Accept header (a format's media type; application/xml or
// anything else: camt.053).
func statementFormat(r *http.Request) (StatementFormat, int, error) {
	if f := r.URL.Query().Get("format"); f != "" {
		for _, x := range StatementFormats {
			if strings.EqualFold(f, string(x)) {
				return x, 0, nil
			}
		}
		return "", http.StatusBadRequest, fmt.Errorf("format must be one of camt.053, camt.054, bai2, mt940; got %q", f)
	}
	accept := r.Header.Get("Accept")
	if accept == "" {
		return FormatCamt053, 0, nil
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" {
			continue
		}
		for _, x := range StatementFormats {
			if mt == x.MediaType() {
				return x, 0, nil
			}
		}
		switch mt {
		case "application/xml", "text/xml", "*/*", "application/*":
			return FormatCamt053, 0, nil
		}
	}
	return "", http.StatusNotAcceptable, fmt.Errorf("no statement format in Accept %q (want %s, %s, %s or %s, or ?format=)",
		accept, FormatCamt053.MediaType(), FormatCamt054.MediaType(), FormatBAI2.MediaType(), FormatMT940.MediaType())
}

// handleStatements is GET /v1/statements/{date}[?format=F][&batch=N].
func (b *Bank) handleStatements(w http.ResponseWriter, r *http.Request) {
	day, err := time.Parse(time.DateOnly, r.PathValue("date"))
	if err != nil {
		writeError(w, http.StatusBadRequest, errorCodeBadRequest, fmt.Sprintf("date %q is not a date YYYY-MM-DD", r.PathValue("date")))
		return
	}
	format, status, err := statementFormat(r)
	if err != nil {
		writeError(w, status, errorCodeBadRequest, err.Error())
		return
	}
	batch := DefaultStatementBatch
	if s := r.URL.Query().Get("batch"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxStatementBatch {
			writeError(w, http.StatusBadRequest, errorCodeBadRequest, fmt.Sprintf("batch must be an integer from 1 to %d", MaxStatementBatch))
			return
		}
		batch = n
	}
	body, err := b.RenderStatement(day, format, batch)
	if errors.Is(err, ErrNoStatement) {
		writeError(w, http.StatusNotFound, errorCodeNotFound, err.Error())
		return
	}
	if err != nil {
		b.log.Error("fakebank: error rendering a statement", "error", err)
		writeError(w, http.StatusInternalServerError, errorCodeInternal, "could not render the statement")
		return
	}
	w.Header().Set("Content-Type", format.MediaType())
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="statement-%s.%s"`, day.Format("20060102"), extension(format)))
	_, _ = w.Write(body) //nolint:gosec // G705: a statement file (XML escaped, nosniff, attachment), never HTML

}

func extension(f StatementFormat) string {
	switch f {
	case FormatCamt053, FormatCamt054:
		return string(f) + ".xml"
	case FormatBAI2:
		return "bai"
	}
	return "sta"
}
