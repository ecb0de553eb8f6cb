package statement

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzSeeds adds the fixtures (and the shared corpus, when present) whose
// names end in one of exts, and the extra seeds.
func fuzzSeeds(f *testing.F, exts []string, extra ...string) {
	for _, dir := range []string{"testdata", corpusDir} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			for _, ext := range exts {
				if strings.HasSuffix(e.Name(), ext) {
					data, err := os.ReadFile(filepath.Join(dir, e.Name()))
					if err != nil {
						f.Fatal(err)
					}
					f.Add(data)
				}
			}
		}
	}
	for _, s := range extra {
		f.Add([]byte(s))
	}
}

// checkParse parses data and checks what must hold whatever the input:
// no panic; an error is an *Error naming the file and matching one of
// the kinds; a result has positive amounts, known directions, real dates
// and one transaction per entry in the line formats.
func checkParse(t *testing.T, data []byte) {
	got, err := Parse("fuzz", bytes.NewReader(data))
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.File != "fuzz" {
			t.Fatalf("error %q is not an *Error naming the file", err)
		}
		return
	}
	for _, st := range got.Statements {
		if st.Balanced != nil && (st.OpeningMinor == nil || st.ClosingMinor == nil) {
			t.Fatalf("balanced without both balances: %+v", st)
		}
		for _, e := range st.Entries {
			if e.AmountMinor < 0 {
				t.Fatalf("negative amount %d", e.AmountMinor)
			}
			if e.Direction != Credit && e.Direction != Debit {
				t.Fatalf("direction %q", e.Direction)
			}
			for _, d := range []string{e.BookedOn, e.ValueOn} {
				if d != "" {
					if _, err := isoDate(d); err != nil {
						t.Fatalf("date %q: %v", d, err)
					}
				}
			}
			if (got.Format == FormatBAI2 || got.Format == FormatMT940) && len(e.Transactions) != 1 {
				t.Fatalf("%s entry with %d transactions", got.Format, len(e.Transactions))
			}
			for _, tx := range e.Transactions {
				if tx.AmountMinor != nil && *tx.AmountMinor < 0 {
					t.Fatalf("negative transaction amount %d", *tx.AmountMinor)
				}
			}
		}
	}
	if _, err := json.Marshal(got); err != nil {
		t.Fatalf("JSON: %v", err)
	}
}

func FuzzCamt(f *testing.F) {
	fuzzSeeds(f, []string{".xml"},
		camtDoc(ntry("1.00", "EUR", "")),
		`<Document><BkToCstmrDbtCdtNtfctn><Ntfctn><Ntry><Amt Ccy="JPY">1</Amt><CdtDbtInd>DBIT</CdtDbtInd></Ntry></Ntfctn></BkToCstmrDbtCdtNtfctn></Document>`,
		`<!DOCTYPE x [<!ENTITY a "b">]><Document/>`)
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, data) })
}

func FuzzBAI2(f *testing.F) {
	fuzzSeeds(f, []string{".bai", ".txt"},
		bai2Head+"16,195,100,V,240101,,B,C,text/\n88,more/\n49,200,4/\n98,200,1,6/\n99,200,1,8/\n",
		"01,S,R,240101,0000,1,,,2/ 02,R,B,1,240101,,JPY,2/ 03,1,,010,5,,,015,4,,/ 16,451,1,D,1,0,1,B,,x/ 49,9,3/ 98,9,1,5/ 99,9,1,7/",
		// Padding before '/' and summaries continued on 88 records.
		"01,S,R,240101,0000,1,,,2/ 02,R,B,1,240101,,USD,2/ 03,1,,040,1,,,/ 88,010,5,2,0,015,4,,,/ 16,451,1,0,B,,x/ 49,9,3/ 98,9,1,5/ 99,9,1,7/")
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, data) })
}

func FuzzMT940(f *testing.F) {
	fuzzSeeds(f, []string{".sta"},
		mt940Head+":61:2401010101RCR1,00NTRFX//B\n:86:166?20EREF+A?21B\n:62F:C240101EUR99,00\n-\n",
		":20:A\r\n:25:B\r\n:60M:D991231JPY0,\r\n:61:991231D5NRTI\r\n:86:/EREF/X/RTRN/AC01/\r\n:62M:D991231JPY5\r\n")
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, data) })
}
