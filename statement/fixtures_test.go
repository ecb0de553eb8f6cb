package statement

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden .json files of testdata from the parser's output")

// TestFixtures parses every valid fixture of testdata and compares the
// contract JSON with its golden file (testdata/NAME.json, checked by
// hand; go test -run TestFixtures -update rewrites them).
func TestFixtures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file   string
		format Format
	}{
		{"camt053_v02.xml", FormatCamt053},
		{"camt053_v08_prefixed.xml", FormatCamt053},
		{"camt053_nonamespace.xml", FormatCamt053},
		{"camt053_latin1.xml", FormatCamt053},
		{"camt054_bank_namespace.xml", FormatCamt054},
		{"bai2_terminated.bai", FormatBAI2},
		{"bai2_unterminated.bai", FormatBAI2},
		// An 03 padded with empty fields before its '/', its summaries
		// continued on 88 records, as banks write them (issue 33).
		{"bai2_padded.bai", FormatBAI2},
		{"mt940_german.sta", FormatMT940},
		{"mt940_dutch.sta", FormatMT940},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			got := parseFixture(t, tc.file)
			if got.Format != tc.format {
				t.Errorf("format %q, want %q", got.Format, tc.format)
			}
			data, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, '\n')
			golden := filepath.Join("testdata", strings.TrimSuffix(tc.file, filepath.Ext(tc.file))+".json")
			if *update {
				if err := os.WriteFile(golden, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, want) {
				t.Errorf("%s differs from %s:\n%s", tc.file, golden, data)
			}
			// What MarshalJSON writes, UnmarshalJSON reads back.
			var back File
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			again, _ := json.MarshalIndent(&back, "", "  ")
			if !bytes.Equal(append(again, '\n'), data) {
				t.Errorf("JSON does not survive a round trip:\n%s", again)
			}
		})
	}
}

func parseFixture(t *testing.T, name string) *File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := Parse(name, f)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return got
}
