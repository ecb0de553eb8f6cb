package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/bintest"
)

// TestStatementImportBoundToDeclaredAccounts: a file whose statement is for
// an account the operator did not declare is refused, naming the file, the
// statement and the account, and nothing of it is stored; without any
// declared account nothing is imported; accounts come from repeated
// --statement-account flags or from SETTLE_STATEMENT_ACCOUNT.
func TestStatementImportBoundToDeclaredAccounts(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	other := b.file(t, "other.xml", strings.Replace(importCamt("other"), "<Id>acc-1</Id>", "<Id>acc-2</Id>", 1))
	code, _, errOut := b.runImportAs(t, []string{"acc-1"}, other)
	if code != exitError || !strings.Contains(errOut, "other.xml") || !strings.Contains(errOut, "statement 1") ||
		!strings.Contains(errOut, `"acc-2"`) || !strings.Contains(errOut, "--statement-account") {
		t.Fatalf("a file of another account: exit %d, want 2 with an error naming file, statement and account:\n%s", code, errOut)
	}
	if got := b.stored(t); got != "0 files, 0 statements, 0 lines" {
		t.Fatalf("a refused file stored %s", got)
	}
	day := b.file(t, "day.xml", importCamt("day"))
	if code, _, errOut := b.runImportAs(t, nil, day); code != exitError || !strings.Contains(errOut, "--statement-account") {
		t.Fatalf("no account declared: exit %d, want 2 saying --statement-account:\n%s", code, errOut)
	}
	if got := b.stored(t); got != "0 files, 0 statements, 0 lines" {
		t.Fatalf("an import without declared accounts stored %s", got)
	}
	if code, out, errOut := b.runImportAs(t, []string{"acc-9", "acc-1"}, day); code != exitFindings || !strings.Contains(out, "day.xml: imported") {
		t.Fatalf("two declared accounts: exit %d\n%s\n%s", code, out, errOut)
	}

	bin := bintest.Build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "statement", "import", other)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+b.db.URL, "SETTLE_STATEMENT_ACCOUNT=acc-9, acc-2")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitFindings {
			t.Fatalf("SETTLE_STATEMENT_ACCOUNT: %v\n%s", err, out.String())
		}
	}
	if !strings.Contains(out.String(), "other.xml: imported") {
		t.Fatalf("SETTLE_STATEMENT_ACCOUNT did not declare acc-2:\n%s", out.String())
	}
}

// brokenWriter is a standard output that cannot be written (a closed
// pipe, a full disk).
type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) {
	return 0, errors.New("write /dev/stdout: broken pipe")
}

// TestReconcileOutputFailsExitTwo: every form of settle reconcile whose
// output cannot be written exits 2 (could not run) and says so, with
// --json and without.
func TestReconcileOutputFailsExitTwo(t *testing.T) {
	t.Parallel()
	b := setupImport(t)
	if code, _, errOut := b.runImport(t, "", b.file(t, "day.xml", importCamt("day"))); code != exitFindings {
		t.Fatalf("import: exit %d\n%s", code, errOut)
	}
	for _, args := range [][]string{
		{}, {"summary"}, {"list", "--state", "confirmed"}, {"show", "c-1"}, {"conflicts"}, {"bank", "--statements"},
	} {
		for _, form := range [][]string{args, append(append([]string{}, args...), "--json")} {
			var errb bytes.Buffer
			c := &reconcileCmd{s: Stdio{In: strings.NewReader(""), Out: brokenWriter{}, Err: &errb}, dbURL: b.db.URL, now: time.Now}
			if code := c.run(context.Background(), form); code != exitError || !strings.Contains(errb.String(), "broken pipe") {
				t.Errorf("settle reconcile %s with stdout broken: exit %d, want 2 saying why\n%s", strings.Join(form, " "), code, errb.String())
			}
		}
	}
}
