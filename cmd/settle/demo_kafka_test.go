package main

import (
	"strings"
	"testing"

	"github.com/settle/settle/internal/testsupport/bintest"
)

// TestDemoThroughKafka runs `settle demo --source kafka`: the events go to
// kfake, the in-process stand-in for Kafka the demo starts (and says so),
// with a worker killed before committing its offsets, and every invariant
// holds.
func TestDemoThroughKafka(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)
	out, code := runBin(t, bin, env, "demo", "--source", "kafka", "--events", "60", "--faults", "flaky")
	if code != exitOK {
		t.Fatalf("settle demo --source kafka exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		"60 payout events for 48 settlements (11 redeliveries, 1 conflicting)",
		"kfake, an in-process stand-in for Kafka, not Kafka",
		"produced 48 first deliveries",
		"was killed (SIGKILL) before committing its offsets",
		"The events came through Kafka's protocol, to kfake",
		"the group ends with 0 records",
		"conflicts 1",
		"needs investigation 0",
		"missing_in_ledger 0", "missing_at_bank 0", "duplicate_at_bank 0", "unresolved 0",
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
