package model

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// config is one configuration of the model: the spin defines that select
// it.
type config struct {
	name    string
	defines []string
}

// configs are the configurations TestModel checks: one per capability set
// of decisions.pml, and the intake path (queue, ack, outbox relay).
var configs = []config{
	{"settle", []string{"-DBANK=BANK_SETTLE"}},
	{"stripe", []string{"-DBANK=BANK_STRIPE"}},
	{"obie", []string{"-DBANK=BANK_OBIE"}},
	{"listonly", []string{"-DBANK=BANK_LISTONLY"}},
	{"byid", []string{"-DBANK=BANK_BYID"}},
	{"intake", []string{"-DINTAKE"}},
}

// mutant is a deliberately broken variant of the model (settle.pml's M_*
// constants, chosen at run time by SETTLE_MUTANT so that a configuration is
// compiled once): Spin must find a counterexample to each.
type mutant struct {
	id     int
	config string
	name   string
}

var mutants = []mutant{
	{1, "settle", "resend after the key window: a used key resent while merely younger than the TTL (the rule before the fix)"},
	{2, "settle", "claim not committed before the bank call: first_attempt_at recorded with the answer"},
	{3, "settle", "movement before confirmation: the payout written when the bank accepted"},
	{4, "settle", "a returned settlement without its reversal"},
	{5, "settle", "a credit without return information booked as a return"},
	{6, "intake", "ack before commit: the queue message acknowledged before the intake transaction"},
	{7, "intake", "the relay sends a settlement's newest event first"},
}

// result is what one pan run reports.
type result struct {
	out      string
	errors   int
	states   int
	violated string // the first failed assertion or other error, if any
	elapsed  time.Duration
}

var (
	errorsRe = regexp.MustCompile(`errors: (\d+)`)
	statesRe = regexp.MustCompile(`(\d+) states, stored`)
	failRe   = regexp.MustCompile(`pan:\d+: (.*)`)
)

// tools returns spin's and gcc's paths. Without them the test fails in CI
// (CI set: .ci/run installs them) and is skipped elsewhere.
func tools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("%s not found: the model needs Spin and a C compiler (Debian: apt-get install spin gcc libc6-dev)", tool)
			if os.Getenv("CI") != "" {
				t.Fatal(msg + "; .ci/run installs them")
			}
			t.Skip(msg)
		}
	}
}

// build generates and compiles the verifier of c in a directory of its
// own: once per configuration, whatever is then checked with it.
func build(t *testing.T, c config) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"settle.pml", "decisions.pml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("spin", append(append([]string{}, c.defines...), "-a", "settle.pml")...)
	// -DSAFETY: assertions and end states; -O1 compiles in a third of
	// -O2's time and runs nearly as fast.
	run("gcc", "-O1", "-DSAFETY", "-DMEMLIM=4096", "-o", "pan", "pan.c")
	return dir
}

// check runs the verifier in dir with SETTLE_MUTANT=mutant (0: the model
// as it is).
func check(t *testing.T, dir string, mutant int) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./pan", "-m100000")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SETTLE_MUTANT="+strconv.Itoa(mutant))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("pan: %v\n%s", err, out.String())
	}
	r := result{out: out.String(), elapsed: time.Since(start)}
	if strings.Contains(r.out, "max search depth too small") {
		t.Fatalf("pan: the search was cut short (raise -m):\n%s", r.out)
	}
	m := errorsRe.FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("pan printed no error count:\n%s", r.out)
	}
	r.errors, _ = strconv.Atoi(m[1])
	if m := statesRe.FindStringSubmatch(r.out); m != nil {
		r.states, _ = strconv.Atoi(m[1])
	}
	if m := failRe.FindStringSubmatch(r.out); m != nil {
		r.violated = m[1]
	}
	return r
}

// trail replays the counterexample pan wrote in dir (spin -t), for the
// failure message.
func trail(t *testing.T, dir string, c config) string {
	cmd := exec.CommandContext(t.Context(), "spin", append(append([]string{"-t", "-p"}, c.defines...), "settle.pml")...)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	lines := strings.Split(string(out), "\n")
	if len(lines) > 80 {
		lines = append([]string{"…"}, lines[len(lines)-80:]...)
	}
	return strings.Join(lines, "\n")
}

// TestModel checks every configuration of the model exhaustively, then
// runs the mutants of that configuration with the same verifier, each of
// which must be caught. In the model itself no
// assertion fails (the bank pays each settlement at most once; one payout
// and at most one reversal, each only when the bank settled or returned the
// payment; only allowed transitions; at quiescence every settlement is
// terminal or flagged and the ledger agrees with the bank; no event is lost
// or delivered out of order) and no end state is invalid.
func TestModel(t *testing.T) {
	t.Parallel()
	tools(t)
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := build(t, c)
			r := check(t, dir, 0)
			if r.errors != 0 {
				t.Fatalf("Spin found a counterexample in configuration %s: %s\n(replay it: spin -t -p %s settle.pml in a copy of model/ with the trail)\n%s\n%s",
					c.name, r.violated, strings.Join(c.defines, " "), r.out, trail(t, dir, c))
			}
			t.Logf("%s: %d states, no errors, %.1fs", c.name, r.states, r.elapsed.Seconds())
			for _, m := range mutants {
				if m.config != c.name {
					continue
				}
				r := check(t, dir, m.id)
				if r.errors == 0 {
					t.Errorf("mutant %d (%s) not caught: Spin explored %d states of %s and found no counterexample; the model no longer checks what it should",
						m.id, m.name, r.states, c.name)
					continue
				}
				t.Logf("mutant %d caught (%s): %s", m.id, m.name, r.violated)
			}
		})
	}
}
