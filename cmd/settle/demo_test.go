package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/settle/settle/internal/bintest"
)

// TestDemoFromNothing runs `settle demo` as a newcomer would, with no
// database configured: it creates the embedded cluster in a fresh
// SETTLE_HOME, runs everything against a flaky bank and must exit 0 with
// a clean report.
func TestDemoFromNothing(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)

	out, code := runBin(t, bin, env, "demo", "--events", "60", "--faults", "flaky")
	if code != exitOK {
		t.Fatalf("settle demo exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		"60 payout events for 48 settlements (11 redeliveries, 1 conflicting)",
		"submitted 60 events through the API: 48 created, 11 replayed, 1 conflict, 0 invalid, 0 without an answer",
		"uncertain 0",
		"conflicts 1",
		"needs investigation 0",
		"missing_in_ledger 0", "missing_at_bank 0", "amount_mismatch 0", "status_mismatch 0", "duplicate_at_bank 0", "unresolved 0",
		"max_payments_per_reference",
		"settle statement import (the bank's camt.053 of",
		".camt.053.xml: imported,",
		"0 unmatched, 0 returns, 0 statements that do not balance",
		"returned 0  unresolved 0  unmatched_entries 0  balance_breaks 0",
		"settle demo: OK, every invariant holds",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Every settlement is terminal and each confirmed one has one movement.
	m := regexp.MustCompile(`confirmed (\d+)  failed (\d+)`).FindStringSubmatch(out)
	mv := regexp.MustCompile(`movements (\d+)`).FindStringSubmatch(out)
	if m == nil || mv == nil || m[1] != mv[1] {
		t.Errorf("confirmed %v vs movements %v", m, mv)
	}
	// It started the embedded cluster only for itself: it stops it, says so
	// last, and the cluster is stopped afterwards.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "stopped the embedded PostgreSQL cluster") {
		t.Errorf("last line %q does not say the cluster was stopped", last)
	}
	if status, code := runBin(t, bin, env, "db", "status"); code != exitFindings || !strings.Contains(status, "stopped") {
		t.Errorf("settle db status after the demo exited %d:\n%s", code, status)
	}
	if t.Failed() {
		t.Log(out)
	}
}

func TestDemoRefusesBadFlags(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	out, code := runBin(t, bin, envWithout("DATABASE_URL", "SETTLE_"), "demo", "--faults", "apocalyptic")
	if code != exitError || !strings.Contains(out, "none, flaky or hostile") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// TestDemoOnStripe runs the whole demo through the Stripe connector and
// the fakebank's stripe profile: payouts, lost answers resolved by replay,
// by payout id or by the list, every invariant held.
func TestDemoOnStripe(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)
	out, code := runBin(t, bin, env, "demo", "--bank", "stripe", "--events", "80", "--faults", "hostile")
	if code != exitOK {
		t.Fatalf("settle demo --bank stripe exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		"uncertain 0", "needs investigation 0",
		"missing_in_ledger 0", "missing_at_bank 0", "amount_mismatch 0", "status_mismatch 0", "duplicate_at_bank 0", "unresolved 0",
		"(Asked: a replay under the same key while the bank keeps it, then by the bank's id, or its list after the key window.)",
		"settle demo: OK, every invariant holds",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}
