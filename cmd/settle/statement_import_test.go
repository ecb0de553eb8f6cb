package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/testsupport/bintest"
)

// importCamt is a camt.053 of one statement: a batch paying c-1 and c-2,
// and a line whose reference no settlement has.
func importCamt(id string) string {
	day := time.Now().UTC().Format(time.DateOnly)
	return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt>
<GrpHdr><MsgId>%s</MsgId><CreDtTm>%sT06:00:00Z</CreDtTm></GrpHdr>
<Stmt><Id>%s</Id><Acct><Id><Othr><Id>acc-1</Id></Othr></Id><Ccy>EUR</Ccy></Acct>
<Bal><Tp><CdOrPrtry><Cd>OPBD</Cd></CdOrPrtry></Tp><Amt Ccy="EUR">10.00</Amt><CdtDbtInd>CRDT</CdtDbtInd><Dt><Dt>%s</Dt></Dt></Bal>
<Bal><Tp><CdOrPrtry><Cd>CLBD</Cd></CdOrPrtry></Tp><Amt Ccy="EUR">7.00</Amt><CdtDbtInd>CRDT</CdtDbtInd><Dt><Dt>%s</Dt></Dt></Bal>
<Ntry><Amt Ccy="EUR">2.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>%s</Dt></BookgDt><AcctSvcrRef>B1</AcctSvcrRef>
<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>DMCT</SubFmlyCd></Fmly></Domn></BkTxCd>
<NtryDtls><Btch><NbOfTxs>2</NbOfTxs></Btch>
<TxDtls><Refs><EndToEndId>c-1</EndToEndId></Refs><Amt Ccy="EUR">1.00</Amt><CdtDbtInd>DBIT</CdtDbtInd></TxDtls>
<TxDtls><Refs><EndToEndId>c-2</EndToEndId></Refs><Amt Ccy="EUR">1.00</Amt><CdtDbtInd>DBIT</CdtDbtInd></TxDtls>
</NtryDtls></Ntry>
<Ntry><Amt Ccy="EUR">1.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>%s</Dt></BookgDt><AcctSvcrRef>E2</AcctSvcrRef>
<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>DMCT</SubFmlyCd></Fmly></Domn></BkTxCd>
<NtryDtls><TxDtls><Refs><EndToEndId>somebody-else</EndToEndId></Refs></TxDtls></NtryDtls></Ntry>
</Stmt></BkToCstmrStmt></Document>
`, id, day, id, day, day, day, day)
}

// importBundle is a reconcile bundle (database, bank) and a directory for
// statement files.
type importBundle struct {
	*reconcileBundle
	dir string
}

func setupImport(t *testing.T) *importBundle {
	t.Helper()
	b := &importBundle{reconcileBundle: setupReconcile(t), dir: t.TempDir()}
	b.seed(t, "c-1", 100, "confirmed", true, false)
	b.seed(t, "c-2", 100, "confirmed", true, false)
	return b
}

// file writes a statement file and returns its path.
func (b *importBundle) file(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(b.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runImport runs `settle statement import args…` in-process, the
// statements' account acc-1 declared.
func (b *importBundle) runImport(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return b.runImportIn(t, stdin, append([]string{"--statement-account", "acc-1"}, args...)...)
}

// runImportAs runs `settle statement import files…` in-process with each of
// accounts declared by --statement-account.
func (b *importBundle) runImportAs(t *testing.T, accounts []string, files ...string) (int, string, string) {
	t.Helper()
	var args []string
	for _, a := range accounts {
		args = append(args, "--statement-account", a)
	}
	return b.runImportIn(t, "", append(args, files...)...)
}

func (b *importBundle) runImportIn(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &importCmd{s: Stdio{In: strings.NewReader(stdin), Out: &out, Err: &errb}, dbURL: b.db.URL}
	code := c.run(context.Background(), args)
	return code, out.String(), errb.String()
}

// stored counts the rows of the statement tables.
func (b *importBundle) stored(t *testing.T) string {
	t.Helper()
	var f, s, l int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM bank_statement_files),
		(SELECT count(*) FROM bank_statements), (SELECT count(*) FROM bank_statement_entries)`).Scan(&f, &s, &l); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d files, %d statements, %d lines", f, s, l)
}

func TestStatementImportOnceAndAgain(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	path := b.file(t, "day.xml", importCamt("day"))

	code, out, errOut := b.runImport(t, "", path)
	if code != exitFindings || !strings.Contains(out, "day.xml: imported, camt.053") ||
		!strings.Contains(out, "3 lines: 2 matched, 1 unmatched") || !strings.Contains(out, "somebody-else") {
		t.Fatalf("first import: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := b.stored(t); got != "1 files, 1 statements, 3 lines" {
		t.Fatalf("stored %s", got)
	}
	code, out, _ = b.runImport(t, "", path, "--json")
	if code != exitFindings {
		t.Fatalf("second import: exit %d", code)
	}
	var doc struct {
		Files []struct {
			File, Digest, Format, ImportedAs string
			Imported                         bool
			Lines, Matched, Unmatched        int
			UnmatchedEntries                 []map[string]any `json:"unmatched_entries"`
		}
		Refused []any
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(doc.Files) != 1 || doc.Files[0].Imported || doc.Files[0].Lines != 3 || doc.Files[0].Matched != 2 ||
		len(doc.Files[0].UnmatchedEntries) != 1 || doc.Refused == nil {
		t.Fatalf("second import: %s", out)
	}
	if l := doc.Files[0].UnmatchedEntries[0]; l["settlement_id"] != nil || l["end_to_end_id"] != "somebody-else" || l["entry_ref"] != "E2" {
		t.Errorf("unmatched line %v", l)
	}
	if got := b.stored(t); got != "1 files, 1 statements, 3 lines" {
		t.Fatalf("import again stored more: %s", got)
	}
	// The same bytes on standard input are the same file.
	if code, out, errOut := b.runImport(t, importCamt("day"), "-"); code != exitFindings || !strings.Contains(out, "already imported") {
		t.Fatalf("stdin: exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestStatementImportRefusesAndGoesOn(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	bad := b.file(t, "bad.xml", strings.Replace(importCamt("bad"), "1.00", "1.001", 1))
	pdf := b.file(t, "scan.pdf", "%PDF-1.4\n")
	good := b.file(t, "good.xml", importCamt("good"))
	code, out, errOut := b.runImport(t, "", bad, pdf, good, "--json")
	if code != exitError {
		t.Fatalf("exit %d, want 2\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "bad.xml") || !strings.Contains(errOut, "Ntry[1]") || !strings.Contains(errOut, "scan.pdf: not a bank statement") {
		t.Errorf("errors do not name file and element:\n%s", errOut)
	}
	var doc struct {
		Files   []map[string]any
		Refused []struct{ File, Error string }
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Files) != 1 || len(doc.Refused) != 2 {
		t.Fatalf("json %v\n%s", err, out)
	}
	if got := b.stored(t); got != "1 files, 1 statements, 3 lines" {
		t.Fatalf("stored %s: the refused files left something", got)
	}
}

// TestStatementImportCrash kills `settle statement import` (SIGKILL, through
// SETTLE_CRASH_AT) just before its transaction commits: nothing of the
// file is stored, and the next import stores it whole. Killed just after
// the commit, the file is stored, and importing it again changes nothing.
func TestStatementImportCrash(t *testing.T) {
	t.Parallel()
	for _, point := range []string{crash.StatementBeforeCommit, crash.StatementAfterCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			b := setupImport(t)
			bin := bintest.Build(t)
			path := b.file(t, "day.xml", importCamt("crash"))
			run := func(env ...string) (int, string, bool) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, "statement", "import", "--statement-account", "acc-1", path)
				cmd.Env = append(os.Environ(), append(env, "DATABASE_URL="+b.db.URL)...)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				var ee *exec.ExitError
				if err == nil {
					return 0, out.String(), false
				}
				if !errors.As(err, &ee) {
					t.Fatalf("run: %v", err)
				}
				ws, _ := ee.Sys().(syscall.WaitStatus)
				return ee.ExitCode(), out.String(), ws.Signaled() && ws.Signal() == syscall.SIGKILL
			}
			if _, out, killed := run("SETTLE_CRASH_AT=" + point); !killed {
				t.Fatalf("not killed at %s:\n%s", point, out)
			}
			after := b.stored(t)
			want := "0 files, 0 statements, 0 lines"
			if point == crash.StatementAfterCommit {
				want = "1 files, 1 statements, 3 lines"
			}
			if after != want {
				t.Fatalf("after a crash at %s: %s, want %s", point, after, want)
			}
			code, out, killed := run()
			if killed || code != exitFindings {
				t.Fatalf("import after the crash: exit %d\n%s", code, out)
			}
			if again := strings.Contains(out, "already imported"); again != (point == crash.StatementAfterCommit) {
				t.Errorf("import after a crash at %s says already imported: %v\n%s", point, again, out)
			}
			if got := b.stored(t); got != "1 files, 1 statements, 3 lines" {
				t.Fatalf("after the second import: %s", got)
			}
		})
	}
}

func TestReconcileBankStatements(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	if code, _, errOut := b.run(t, "bank", "--statements"); code != exitError || !strings.Contains(errOut, "no bank statement imported") {
		t.Fatalf("before any import: exit %d, %s", code, errOut)
	}
	if code, _, errOut := b.runImport(t, "", b.file(t, "day.xml", importCamt("day"))); code != exitFindings {
		t.Fatalf("import: exit %d\n%s", code, errOut)
	}
	code, out, errOut := b.run(t, "bank", "--statements")
	if code != exitFindings || !strings.Contains(out, "ledger vs imported statements") ||
		!strings.Contains(out, "unmatched_entries (1)") || !strings.Contains(out, "somebody-else") ||
		!strings.Contains(out, "matched            2") {
		t.Fatalf("table: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = b.run(t, "bank", "--statements", "--json")
	m := decodeObject(t, out)
	if code != exitFindings || m["matched"] != 2.0 || m["discrepancies"] != 1.0 {
		t.Fatalf("json: exit %d\n%s", code, out)
	}
	for _, k := range []string{"returned", "unmatched_entries", "balance_breaks", "missing_at_bank"} {
		if _, ok := m[k].([]any); !ok {
			t.Errorf("%s missing: %s", k, out)
		}
	}
}
