package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/settle/settle/internal/testsupport/bintest"
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
		"0 unmatched, ",
		" returns, 0 statements that do not balance",
		"returned 0  unresolved 0  unmatched_entries 0  balance_breaks 0",
		"/steady: ", "/flaky: ", " events received, ", "every signature verified",
		"Each settlement's sequence is complete at each sink: 48 of 48 settlements received <id>:1 … <id>:n in order.",
		"settle demo: OK, every invariant holds",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	checkDemoReturns(t, out)
	if t.Failed() {
		t.Log(out)
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
}

// checkDemoReturns checks that the demo's report accounts for every
// settlement and movement, that the bank returned at least a few payments,
// and that the explanation says what became of them: returned, each with
// one reversal (or failed, when one came back before settle saw it
// settle), and agreed with the bank and its statement.
func checkDemoReturns(t *testing.T, out string) {
	t.Helper()
	atoi := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	st := regexp.MustCompile(`confirmed (\d+)  failed (\d+)  returned (\d+)`).FindStringSubmatch(out)
	mv := regexp.MustCompile(`movements (\d+)`).FindStringSubmatch(out)
	back := regexp.MustCompile(`(\d+) paid payments came back afterwards`).FindStringSubmatch(out)
	found := regexp.MustCompile(`found (\d+) by asking the bank again (?:during the return watch|\(at its webhook, or in the return watch\)) and (\d+) in the imported statement`).FindStringSubmatch(out)
	moved := regexp.MustCompile(`those (\d+) settlements moved confirmed → returned, with one reversal movement`).FindStringSubmatch(out)
	rev := regexp.MustCompile(`\((\d+) reversals; settle reconcile show ID tells each story\)`).FindStringSubmatch(out)
	if st == nil || mv == nil || back == nil || found == nil || moved == nil || rev == nil {
		t.Fatalf("the report does not account for the returns: states %v, movements %v, came back %v, found %v, moved %v, reversals %v",
			st, mv, back, found, moved, rev)
	}
	confirmed, returned := atoi(st[1]), atoi(st[3])
	if atoi(mv[1]) != confirmed+2*returned {
		t.Errorf("%s movements for %d confirmed and %d returned settlements", mv[1], confirmed, returned)
	}
	early := 0
	if m := regexp.MustCompile(`(\d+) came back before settle had seen them settle: failed`).FindStringSubmatch(out); m != nil {
		early = atoi(m[1])
	}
	if atoi(back[1]) < 3 || atoi(back[1]) != returned+early {
		t.Errorf("%s payments came back (at least 3 expected), %d settlements returned, %d failed for it", back[1], returned, early)
	}
	if atoi(found[1])+atoi(found[2]) != returned || atoi(moved[1]) != returned || atoi(rev[1]) != returned {
		t.Errorf("returned %d, but found %s + %s, moved %s, reversals %s", returned, found[1], found[2], moved[1], rev[1])
	}
	// Both reconciliations, or the statement's alone at a bank without a
	// list of payments.
	reports := 2
	if strings.Contains(out, "the bank has no list of payments") {
		reports = 1
	}
	if want := fmt.Sprintf("returned_agreed %d", returned); strings.Count(out, want) != reports {
		t.Errorf("the %d reconciliations do not all say %q", reports, want)
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
	demoOn(t, "stripe",
		"(Asked: a replay under the same key while the bank keeps it, then by the bank's id, or its list after the key window.)")
}

// TestDemoOnOBIE: `settle demo --bank obie` runs end to end through the UK
// Open Banking connector and the fakebank's obie profile: a signed consent
// per settlement, authorised after the customer's delay, then the signed
// payment; the bank has no list of payments, so the ledger is reconciled
// against its statement, which also brings the returns.
func TestDemoOnOBIE(t *testing.T) {
	t.Parallel()
	demoOn(t, "obie",
		"the bank has no list of payments (Open Banking)",
		"Each payment needed the customer's consent first",
		"(Asked: a replay under the same key while the bank keeps it, then by the bank's id, or its statement after the key window.)")
}

// demoOn runs `settle demo --bank bank --faults hostile` and checks that
// it ends OK with nothing unresolved, every return accounted for, and the
// output holding each of want.
func demoOn(t *testing.T, bank string, want ...string) {
	t.Helper()
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)
	out, code := runBin(t, bin, env, "demo", "--bank", bank, "--events", "80", "--faults", "hostile")
	if code != exitOK {
		t.Fatalf("settle demo --bank %s exited %d:\n%s", bank, code, out)
	}
	for _, w := range append([]string{
		"uncertain 0", "needs investigation 0",
		"missing_in_ledger 0", "missing_at_bank 0", "amount_mismatch 0", "status_mismatch 0", "duplicate_at_bank 0", "unresolved 0",
		"settle demo: OK, every invariant holds",
	}, want...) {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	checkDemoReturns(t, out)
	if t.Failed() {
		t.Log(out)
	}
}

// TestDemoTwoBanks: `settle demo --bank settle,stripe` runs one worker
// serving both banks, binds each settlement to its bank (by the default
// route or the event's bank field), pays each exactly once at its own bank
// and shows each settlement's bank.
func TestDemoTwoBanks(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)
	out, code := runBin(t, bin, env, "demo", "--bank", "settle,stripe", "--events", "60", "--faults", "hostile")
	if code != exitOK {
		t.Fatalf("settle demo exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		"60 payout events for 48 settlements at 2 banks at once",
		"settle worker --bank settle,stripe",
		"events name no bank: --route default=settle",
		"bank stripe  ",
		"bank settle  ",
		"every settlement paid exactly once, at its own bank",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 8 && (f[0] == "settle" || f[0] == "stripe") && f[7] != "0" {
			t.Errorf("discrepancies at a bank: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestDemoFundsCheck: `settle demo --funds-check` funds every account with
// exactly its payouts, pays them all with the worker's --funds-check on,
// then shows a payout over its account's balance refused with 422
// insufficient-funds, and its redelivery refused the same way; the ledger
// balances and every invariant holds.
func TestDemoFundsCheck(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)
	out, code := runBin(t, bin, env, "demo", "--funds-check", "--events", "60", "--faults", "flaky")
	if code != exitOK {
		t.Fatalf("settle demo --funds-check exited %d:\n%s", code, out)
	}
	for _, w := range []string{
		"submitted 60 events through the API: 48 created, 11 replayed, 1 conflict, 0 invalid, 0 without an answer",
		"Funds check (settle worker --funds-check)",
		"answered 422 urn:settle:problem:insufficient-funds, nothing held; its redelivery: 422 urn:settle:problem:insufficient-funds",
		"the ledger balances: true, 0 mismatch(es)",
		"settle demo: OK, every invariant holds",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Log(out)
	}
}
