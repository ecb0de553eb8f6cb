package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// statementFixture is a file of the statement package's own test data.
func statementFixture(name string) string {
	return filepath.Join("..", "..", "statement", "testdata", name)
}

func runStatement(t *testing.T, stdin string, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), append([]string{"statement"}, args...), Stdio{In: strings.NewReader(stdin), Out: &o, Err: &e})
	return code, o.String(), e.String()
}

// statementJSONKeys returns the keys of the JSON object v, sorted.
func statementJSONKeys(t *testing.T, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v is not a JSON object", v)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestStatementParseJSON checks the contract's shape (DESIGN section 14):
// exactly these keys at every level, null where the file says nothing.
func TestStatementParseJSON(t *testing.T) {
	t.Parallel()
	file := statementFixture("camt054_bank_namespace.xml")
	code, out, errOut := runStatement(t, "", "parse", file, "--json")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var doc any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got := statementJSONKeys(t, doc); !slices.Equal(got, []string{"files"}) {
		t.Fatalf("top-level keys %v", got)
	}
	files := doc.(map[string]any)["files"].([]any)
	if len(files) != 1 {
		t.Fatalf("%d files", len(files))
	}
	f := files[0].(map[string]any)
	if got := statementJSONKeys(t, f); !slices.Equal(got, []string{"file", "format", "statements"}) {
		t.Errorf("file keys %v", got)
	}
	if f["file"] != file || f["format"] != "camt.054" {
		t.Errorf("file %v, format %v", f["file"], f["format"])
	}
	st := f["statements"].([]any)[0].(map[string]any)
	if got := statementJSONKeys(t, st); !slices.Equal(got, []string{"account", "balanced", "closing_minor", "currency", "entries", "opening_minor"}) {
		t.Errorf("statement keys %v", got)
	}
	if st["balanced"] != nil || st["opening_minor"] != nil || st["currency"] != nil {
		t.Errorf("a notification without balances or Acct/Ccy: %v", st)
	}
	entries := st["entries"].([]any)
	if len(entries) != 3 {
		t.Fatalf("%d entries", len(entries))
	}
	e := entries[0].(map[string]any)
	if got := statementJSONKeys(t, e); !slices.Equal(got, []string{"amount_minor", "booked_on", "currency", "direction", "entry_ref", "return_reason", "reversal", "transactions", "value_on"}) {
		t.Errorf("entry keys %v", got)
	}
	if e["amount_minor"] != 10000.0 || e["direction"] != "debit" || e["reversal"] != true || e["return_reason"] != "MD06" || e["booked_on"] != "2024-05-02" {
		t.Errorf("entry %v", e)
	}
	tx := e["transactions"].([]any)[0].(map[string]any)
	if got := statementJSONKeys(t, tx); !slices.Equal(got, []string{"amount_minor", "reference", "return_reason"}) {
		t.Errorf("transaction keys %v", got)
	}
	if tx["reference"] != "settle-0100" || tx["amount_minor"] != 10000.0 {
		t.Errorf("transaction %v", tx)
	}
	// The batch of CHF details under a SEK entry: no amount in SEK.
	last := entries[2].(map[string]any)["transactions"].([]any)[0].(map[string]any)
	if v, ok := last["amount_minor"]; !ok || v != nil {
		t.Errorf("foreign-currency detail: amount_minor %v (present %v), want null", v, ok)
	}
}

func TestStatementParseExitCodes(t *testing.T) {
	t.Parallel()
	unbalanced := filepath.Join(t.TempDir(), "unbalanced.sta")
	if err := os.WriteFile(unbalanced, []byte(":20:R\n:25:A\n:60F:C240101EUR1,00\n:61:240101C1,00NTRFNONREF\n:62F:C240101EUR3,00\n-\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inexact := ":20:R\n:25:A\n:60F:C240101EUR1,001\n:62F:C240101EUR1,00\n"
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		out   []string
		err   []string
	}{
		{"balanced", "", []string{"parse", statementFixture("bai2_terminated.bai"), statementFixture("mt940_german.sta")}, exitOK,
			[]string{"bai2, 3 statement(s)", "balanced yes", "2500.00\tUSD\tBREF-4", "return 555", "settle-20231229-0001", "reversal"}, nil},
		{"unbalanced", "", []string{"parse", unbalanced}, exitFindings, []string{"balanced NO"}, nil},
		{"unbalanced as JSON", "", []string{"parse", "--json", unbalanced}, exitFindings, []string{`"balanced":false`}, nil},
		{"stdin", ":20:R\n:25:A\n:60F:C240101JPY5\n:62F:C240101JPY5\n", []string{"parse", "-"}, exitOK, []string{"-: mt940", "opening 5,"}, nil},
		{"missing file", "", []string{"parse", "no-such-file.xml"}, exitError, nil, []string{"no-such-file.xml"}},
		{"refused file", inexact, []string{"parse", "-"}, exitError, nil, []string{"-: line 3: field :60F:", "1,001"}},
		{"one bad file of two", inexact, []string{"parse", "--json", statementFixture("camt053_v02.xml"), "-"}, exitError,
			[]string{`"format":"camt.053"`}, []string{"-: line 3"}},
		{"no file", "", []string{"parse"}, exitError, nil, []string{"no FILE"}},
		{"import without a file", "", []string{"import"}, exitError, nil, []string{"no FILE"}},
		{"unknown form", "", []string{"frobnicate"}, exitError, nil, []string{`unknown form "frobnicate"`}},
		{"help", "", []string{"parse", "--help"}, exitOK, []string{"Usage: settle statement parse", "-json"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runStatement(t, tc.stdin, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stdout %s; stderr %s", code, tc.code, out, errOut)
			}
			for _, s := range tc.out {
				if !strings.Contains(out, s) {
					t.Errorf("stdout does not say %q:\n%s", s, out)
				}
			}
			for _, s := range tc.err {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr does not say %q:\n%s", s, errOut)
				}
			}
		})
	}
}
