package statement

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, head string
		want       Format
	}{
		{"camt.053", `<?xml version="1.0"?><Document><BkToCstmrStmt>`, FormatCamt053},
		{"camt.053 with a BOM", "\xef\xbb\xbf<Document><BkToCstmrStmt>", FormatCamt053},
		{"camt.054 prefixed", `<a:Document xmlns:a="x"><a:BkToCstmrDbtCdtNtfctn>`, FormatCamt054},
		{"camt.053 in an envelope", `<Envelope><Header/><Body><Document><BkToCstmrStmt>`, FormatCamt053},
		{"bai2", "01,122099999,123456789,040621,0200,1,65,,2/", FormatBAI2},
		{"bai2 after blank lines", "\r\n\r\n01,1,2,040621,0200,1,,,2/", FormatBAI2},
		{"mt940", ":20:STARTUMSE\r\n:25:1/2\r\n", FormatMT940},
		{"mt940 with bank headers", "0000 01INGBNL2AXXXX00001\n940 00\n:20:MPBZ\n", FormatMT940},
		{"mt940 :940: first", ":940:\n:20:940S130101\n", FormatMT940},
		{"mt940 swift blocks", "{1:F01BANKBEBBAXXX0000000000}{2:I940BANKBEBBXXXXN}{4:\r\n:20:X\r\n", FormatMT940},
	} {
		d, err := NewDecoder(tc.name, strings.NewReader(tc.head))
		if err != nil {
			t.Errorf("%s: NewDecoder: %v", tc.name, err)
			continue
		}
		if d.Format() != tc.want {
			t.Errorf("%s: format %q, want %q", tc.name, d.Format(), tc.want)
		}
	}
}

func TestSplitLines(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"a\nb\n":         {"a", "b"},
		"a\r\nb":         {"a", "b"},
		"a\rb\r":         {"a", "b"},
		"a\n\nb":         {"a", "", "b"},
		"a\r\n\r\nb\r\n": {"a", "", "b"},
		"":               nil,
	} {
		sc := bufio.NewScanner(strings.NewReader(in))
		sc.Split(splitLines)
		var got []string
		for sc.Scan() {
			got = append(got, sc.Text())
		}
		if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
			t.Errorf("lines of %q = %q, want %q", in, got, want)
		}
	}
	// A \r at the end of the scanner's buffer waits for a \n after it.
	sc := bufio.NewScanner(&oneByteReader{s: "ab\r\ncd"})
	sc.Split(splitLines)
	var got []string
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	if strings.Join(got, "|") != "ab|cd" {
		t.Errorf("byte by byte: %q", got)
	}
}

type oneByteReader struct{ s string }

func (r *oneByteReader) Read(b []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	b[0] = r.s[0]
	r.s = r.s[1:]
	return 1, nil
}

func TestMT940Tag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, tag, value string
		ok             bool
	}{
		{":20:STARTUMSE", "20", "STARTUMSE", true},
		{":60F:C231229EUR1,00", "60F", "C231229EUR1,00", true},
		{":28C:00001/001", "28C", "00001/001", true},
		{":NS:22JOHN", "NS", "22JOHN", true},
		{":86:", "86", "", true},
		{":940:", "", "", false},
		{":6F:x", "", "", false},
		{":60f:x", "", "", false},
		{"20:x", "", "", false},
		{"/EREF/x:y:", "", "", false},
	} {
		tag, value, ok := mt940Tag(tc.in)
		if tag != tc.tag || value != tc.value || ok != tc.ok {
			t.Errorf("mt940Tag(%q) = %q, %q, %v", tc.in, tag, value, ok)
		}
	}
	for in, want := range map[string]bool{
		"-": true, "-XXX": true, "-}": true, "-}{5:{CHK:1}}": true, "- ": true,
		"-5,00": false, "--": false, "- text": false, "": false, "x-": false,
	} {
		if got := isMessageEnd(in); got != want {
			t.Errorf("isMessageEnd(%q) = %v", in, got)
		}
	}
}

func TestMT940Information(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, ref, reason string
		rti                   bool
	}{
		{"german across subfields", "166?00GUTSCHRIFT?20EREF+ABC?21DEF?22SVWZ+x", "ABCDEF", "", false},
		{"german ends at KREF", "109?20EREF+R-1KREF+K?21SVWZ+x", "R-1", "", false},
		{"german ?6x continues", "105?20EREF+X?60Y?30BIC", "XY", "", false},
		{"german other subfields not read", "166?00EREF+NO?20SVWZ+text", "", "", false},
		{"german with >", "000>20EREF+T1>21>22SVWZ+a", "T1", "", false},
		{"german NOTPROVIDED", "166?20EREF+NOTPROVIDED?21SVWZ+a", "", "", false},
		{"dutch", "/TRTP/X/EREF/E-1/REMI/r", "E-1", "", false},
		{"dutch at the end", "/EREF/E-2", "E-2", "", false},
		{"dutch NONREF", "/EREF/NONREF/", "", "", false},
		{"dutch return", "/RTRN/AC04/EREF/E-3/", "E-3", "AC04", false},
		{"text only", "RC AFREKENING BETALINGSVERKEER", "", "", false},
		{"returned item", "text", "", "RTI", true},
	} {
		p := &mt940Parser{pendingRTI: tc.rti}
		p.entry = Entry{Transactions: []Transaction{{}}}
		p.pending = &p.entry
		p.information(tc.in)
		if p.entry.Transactions[0].Reference != tc.ref || p.entry.ReturnReason != tc.reason || p.entry.Transactions[0].ReturnReason != tc.reason {
			t.Errorf("%s: reference %q, reason %q; want %q, %q", tc.name, p.entry.Transactions[0].Reference, p.entry.ReturnReason, tc.ref, tc.reason)
		}
	}
}

func TestBAI2Terminator(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{
		"16,1,2/":                 6,
		"16,1,2/   ":              6,
		"16,1,2/ 16,3,4/":         6,
		"16,1,a/b text/":          13,
		"16,1,a/b text":           -1,
		"49,1,2/03,4,5/":          6,
		"88,x/ 12,345 not a code": -1,
	} {
		if got := bai2Terminator(in); got != want {
			t.Errorf("bai2Terminator(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestCharsetReader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ label, in, want string }{
		{"ISO-8859-1", "M\xfcller \xc4 \x80", "Müller Ä \u0080"},
		{"windows-1252", "\x80 \x9c \x81 \xe9", "€ œ \u0081 é"},
		{"US-ASCII", "plain", "plain"},
	} {
		r, err := charsetReader(tc.label, &oneByteReader{s: tc.in})
		if err != nil {
			t.Fatalf("%s: %v", tc.label, err)
		}
		got, err := io.ReadAll(r)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.label, got, err, tc.want)
		}
	}
	if _, err := charsetReader("EBCDIC", nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("EBCDIC: %v", err)
	}
}
