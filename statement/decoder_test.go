package statement

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// recorder is a Handler that notes what it is given.
type recorder struct {
	events  []string
	current *Statement
	stopAt  int // return errStop at this entry (1-based); 0 never
	entries int
}

var errStop = errors.New("stop")

func (r *recorder) Entry(st *Statement, e Entry) error {
	r.entries++
	if r.current != nil && r.current != st {
		return fmt.Errorf("entry %d: a new statement began without EndStatement", r.entries)
	}
	r.current = st
	if st.Entries != nil {
		return fmt.Errorf("the decoder filled in Entries")
	}
	opening := "-"
	if st.OpeningMinor != nil {
		opening = fmt.Sprint(*st.OpeningMinor)
	}
	r.events = append(r.events, fmt.Sprintf("entry %s %s opening=%s %s %d", st.Account, st.Currency, opening, e.Direction, e.AmountMinor))
	if r.entries == r.stopAt {
		return errStop
	}
	return nil
}

func (r *recorder) EndStatement(st *Statement) error {
	if r.current != nil && r.current != st {
		return fmt.Errorf("EndStatement of another statement")
	}
	r.current = nil
	r.events = append(r.events, fmt.Sprintf("end %s balanced=%v", st.Account, show(st.Balanced)))
	return nil
}

func decodeFixture(t *testing.T, name string, h Handler) error {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := NewDecoder(name, f)
	if err != nil {
		t.Fatal(err)
	}
	return d.Decode(h)
}

func TestDecoderStreams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"camt053_v02.xml", []string{
			"entry NL91ABNA0417164300 EUR opening=-10000 credit 150025",
			"entry NL91ABNA0417164300 EUR opening=-10000 debit 30000",
			"entry NL91ABNA0417164300 EUR opening=-10000 debit 5000",
			"end NL91ABNA0417164300 balanced=true",
		}},
		{"bai2_terminated.bai", []string{
			"entry 1001 USD opening=100000 credit 100000",
			"entry 1001 USD opening=100000 credit 50000",
			"entry 1001 USD opening=100000 debit 2500",
			"entry 1001 USD opening=100000 debit 250000",
			"end 1001 balanced=true",
			"entry 2002 JPY opening=5000 debit 1000",
			"end 2002 balanced=true",
			"entry 3003 EUR opening=0 credit 12345",
			"entry 3003 EUR opening=0 credit 100",
			"end 3003 balanced=null",
		}},
		{"mt940_dutch.sta", []string{
			"entry NL91ABNA0417164300 EUR opening=-1000 credit 11000",
			"entry NL91ABNA0417164300 EUR opening=-1000 debit 5000",
			"entry NL91ABNA0417164300 EUR opening=-1000 debit 500",
			"end NL91ABNA0417164300 balanced=true",
			"end NL91ABNA0417164300 balanced=true",
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			r := &recorder{}
			if err := decodeFixture(t, tc.file, r); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.events, tc.want) {
				t.Errorf("events:\n%q\nwant\n%q", r.events, tc.want)
			}
		})
	}
}

// TestDecoderHandlerError checks that an error of the handler stops the
// decoding at once and comes back as it was.
func TestDecoderHandlerError(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"camt053_v02.xml", "bai2_unterminated.bai", "mt940_german.sta"} {
		r := &recorder{stopAt: 2}
		err := decodeFixture(t, file, r)
		if err != errStop { //nolint:errorlint // returned as is, not wrapped
			t.Errorf("%s: Decode = %v, want the handler's error", file, err)
		}
		if r.entries != 2 {
			t.Errorf("%s: the handler saw %d entries after its error", file, r.entries)
		}
	}
}

// show is *p, or "null".
func show[T any](p *T) any {
	if p == nil {
		return "null"
	}
	return *p
}
