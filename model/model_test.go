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
	live   bool // caught by the liveness run only: the safety run must pass it
}

var mutants = []mutant{
	{1, "settle", "resend after the key window: a used key resent while merely younger than the TTL (the rule before the fix)", false},
	{2, "settle", "claim not committed before the bank call: first_attempt_at recorded with the answer", false},
	{3, "settle", "movement before confirmation: the payout written when the bank accepted", false},
	{4, "settle", "a returned settlement without its reversal", false},
	{5, "settle", "a credit without return information booked as a return", false},
	{6, "intake", "ack before commit: the queue message acknowledged before the intake transaction", false},
	{7, "intake", "the relay sends a settlement's newest event first", false},
	{8, "settle", "the sweep loads an uncertain settlement and never asks the bank again (it polls for ever, nothing deadlocks)", true},
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

// The two verifiers of a configuration. The safety run checks the
// assertions and end states (settle.pml's claim safe accepts nothing). The
// liveness run searches for acceptance cycles of settle.pml's claim done
// under weak fairness (every settlement ends terminal or flagged; in intake,
// the event taken and every event delivered), with one worker: with two,
// the fair product takes 20 to 110 s per configuration on two cores, and
// what the second worker adds (races, lost claims) is the safety run's.
var (
	safety   = run{name: "safety", args: []string{"-N", "safe"}, cflags: []string{"-O1", "-DSAFETY"}}
	liveness = run{name: "liveness", args: []string{"-a", "-f", "-N", "done"}, defines: []string{"-DNW=1"},
		cflags: []string{"-O0", "-DNFAIR=8"}}
)

// run is one kind of check: how its verifier is built and run.
type run struct {
	name    string
	defines []string // spin's, after the configuration's
	cflags  []string // gcc's
	args    []string // pan's
}

// build generates and compiles the verifier of c for r in a directory of
// its own: once per configuration and run, whatever is then checked with
// it.
func build(t *testing.T, c config, r run) string {
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
	exe := func(name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	exe("spin", append(append(append([]string{}, c.defines...), r.defines...), "-a", "settle.pml")...)
	// -O1 compiles in a third of -O2's time and runs nearly as fast; the
	// liveness run's few states need no optimiser (-O0 compiles in a
	// quarter of -O1's time).
	exe("gcc", append(append([]string{}, r.cflags...), "-DMEMLIM=4096", "-o", "pan", "pan.c")...)
	return dir
}

// check runs the verifier in dir with SETTLE_MUTANT=mutant (0: the model
// as it is) and the arguments of r.
func check(t *testing.T, dir string, mutant int, r run) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./pan", append([]string{"-m100000"}, r.args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SETTLE_MUTANT="+strconv.Itoa(mutant))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("pan: %v\n%s", err, out.String())
	}
	res := result{out: out.String(), elapsed: time.Since(start)}
	for _, bad := range []string{"max search depth too small", "NFAIR"} {
		if strings.Contains(res.out, bad) {
			t.Fatalf("pan: the search was cut short (%s):\n%s", bad, res.out)
		}
	}
	m := errorsRe.FindStringSubmatch(res.out)
	if m == nil {
		t.Fatalf("pan printed no error count:\n%s", res.out)
	}
	res.errors, _ = strconv.Atoi(m[1])
	if m := statesRe.FindStringSubmatch(res.out); m != nil {
		res.states, _ = strconv.Atoi(m[1])
	}
	if m := failRe.FindStringSubmatch(res.out); m != nil {
		res.violated = m[1]
	}
	return res
}

// trail replays the counterexample pan wrote in dir (spin -t), for the
// failure message.
func trail(t *testing.T, dir string, c config, r run) string {
	cmd := exec.CommandContext(t.Context(), "spin", append(append(append([]string{"-t", "-p"}, c.defines...), r.defines...), "settle.pml")...)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	lines := strings.Split(string(out), "\n")
	if len(lines) > 80 {
		lines = append([]string{"…"}, lines[len(lines)-80:]...)
	}
	return strings.Join(lines, "\n")
}

// TestModel checks every configuration of the model exhaustively, for
// safety and for liveness, then runs the mutants of that configuration with
// the same verifiers, each of which must be caught (a liveness mutant by the
// liveness run, and not by the safety run). In the model itself no
// assertion fails (the bank pays each settlement at most once; one payout
// and at most one reversal, each only when the bank settled or returned the
// payment; only allowed transitions; at quiescence every settlement is
// terminal or flagged and the ledger agrees with the bank; no event is lost
// or delivered out of order), no end state is invalid, and under weak
// fairness every settlement ends terminal or flagged (in intake: the event
// is taken and every event delivered).
func TestModel(t *testing.T) {
	t.Parallel()
	tools(t)
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, r := range []run{safety, liveness} {
				dir := build(t, c, r)
				res := check(t, dir, 0, r)
				if res.errors != 0 {
					t.Fatalf("Spin found a counterexample in configuration %s (%s run): %s\n(replay it: spin -t -p %s settle.pml in a copy of model/ with the trail)\n%s\n%s",
						c.name, r.name, res.violated, strings.Join(append(append([]string{}, c.defines...), r.defines...), " "), res.out, trail(t, dir, c, r))
				}
				t.Logf("%s %s: %d states, no errors, %.1fs", c.name, r.name, res.states, res.elapsed.Seconds())
				for _, m := range mutants {
					if m.config != c.name {
						continue
					}
					if m.live != (r.name == liveness.name) {
						if m.live {
							// a liveness mutant is no safety bug: the
							// safety run must pass it
							if res := check(t, dir, m.id, r); res.errors != 0 {
								t.Errorf("mutant %d (%s) caught by the %s run (%s): it should break liveness only", m.id, m.name, r.name, res.violated)
							}
						}
						continue
					}
					res := check(t, dir, m.id, r)
					if res.errors == 0 {
						t.Errorf("mutant %d (%s) not caught: Spin explored %d states of %s (%s run) and found no counterexample; the model no longer checks what it should",
							m.id, m.name, res.states, c.name, r.name)
						continue
					}
					t.Logf("mutant %d caught by the %s run (%s): %s", m.id, r.name, m.name, res.violated)
				}
			}
		})
	}
}
