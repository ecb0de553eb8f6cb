package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// startWorkerBin runs `settle worker` on db with the API token tok and
// returns its base URL; the worker is stopped gracefully when the test ends.
func startWorkerBin(t *testing.T, db *dbtest.DB, bankURL, tok string) string {
	t.Helper()
	w := workertest.StartT(t, "worker", db.URL, []string{"SETTLE_API_TOKEN=" + tok},
		"--listen", "127.0.0.1:0", "--bank-url", bankURL, "--log-format", "json")
	t.Cleanup(func() {
		if err := w.Stop(30 * time.Second); err != nil {
			t.Errorf("worker did not stop on SIGTERM: %v", err)
		}
	})
	return w.URL()
}

// TestSubmitAgainstAWorker submits a known NDJSON file with bad lines to a
// real worker and checks the JSON summary, the problem lines and the exit
// status; then with a wrong token, which cannot run at all.
func TestSubmitAgainstAWorker(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	db := dbtest.New(t)
	_, bankURL := fakebanktest.NewServer(t, fakebank.Options{})
	const tok = "tok-submit-0123456789"
	url := startWorkerBin(t, db, bankURL, tok)
	env := envWithout("DATABASE_URL", "SETTLE_")
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	out, code := runBinOut(t, bin, env, "submit", "--url", url, "--api-token-file", tokFile, "--concurrency", "1", "--json",
		"../../internal/settlecmd/submit/testdata/events.ndjson")
	if code != exitFindings {
		t.Errorf("exit %d, want %d (invalid lines and a conflict)\n%s", code, exitFindings, out)
	}
	var sum struct {
		Lines, Created, Replayed, Conflict, Invalid, Errors int
		Problems                                            []struct {
			Line    int
			Outcome string
		}
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("summary is not JSON: %v\n%s", err, out)
	}
	if sum.Lines != 10 || sum.Created != 3 || sum.Replayed != 2 || sum.Conflict != 1 || sum.Invalid != 4 || sum.Errors != 0 {
		t.Errorf("summary = %+v, want 10 lines: 3 created, 2 replayed, 1 conflict, 4 invalid, 0 errors", sum)
	}
	var got []string
	for _, p := range sum.Problems {
		got = append(got, strings.Join([]string{itoa(p.Line), p.Outcome}, ":"))
	}
	if want := "4:invalid 5:invalid 6:conflict 9:invalid 11:invalid"; strings.Join(got, " ") != want {
		t.Errorf("problems = %q, want %q", strings.Join(got, " "), want)
	}

	// Everything again: only replays now, and the same invalid lines.
	out, code = runBinOut(t, bin, append(env, "SETTLE_API_TOKEN="+tok), "submit", "--url", url, "../../internal/settlecmd/submit/testdata/events.ndjson")
	if code != exitFindings || !strings.Contains(out, "10 lines: 0 created, 5 replayed, 1 conflict, 4 invalid, 0 errors") ||
		!strings.Contains(out, "line 4: invalid: line is not valid JSON") {
		t.Errorf("second run: exit %d\n%s", code, out)
	}

	out, code = runBinOut(t, bin, env, "submit", "--url", url, "--api-token", "wrong", "../../internal/settlecmd/submit/testdata/events.ndjson")
	if code != exitError || !strings.Contains(out, "refused the token") {
		t.Errorf("wrong token: exit %d, want %d\n%s", code, exitError, out)
	}
}

// runBinOut runs bin and returns its stdout only (stderr is logged) and
// its exit status.
func runBinOut(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if stderr.Len() > 0 {
		t.Logf("settle %s stderr:\n%s", args[0], stderr.String())
	}
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("settle %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return string(out) + stderr.String(), code
}

// envWithout is the environment minus the variables with these prefixes.
func envWithout(prefixes ...string) []string {
	var env []string
next:
	for _, kv := range environ() {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// environ is os.Environ, here so tests can read it in one place.
var environ = os.Environ
