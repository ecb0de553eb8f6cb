package source

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/settle/settle/intake"
)

// items builds n items; id and account name each one's settlement and
// account, and bad marks the ones that are not events.
func items(n int, id, account func(int) string, bad func(int) bool) []item {
	out := make([]item, n)
	for i := range out {
		out[i].msg = Message{TransportID: strconv.Itoa(i)}
		if bad != nil && bad(i) {
			out[i].err = errors.New("not an event")
			continue
		}
		out[i].ev = intake.Event{SettlementID: id(i), AccountID: account(i)}
	}
	return out
}

// checkParts checks that parts hold every item of all exactly once, each
// part in stream order, and returns the part of each transport id.
func checkParts(t *testing.T, all []item, parts [][]item) map[string]int {
	t.Helper()
	where := map[string]int{}
	for p, part := range parts {
		if len(part) == 0 {
			t.Errorf("part %d is empty", p)
		}
		last := -1
		for _, it := range part {
			i, _ := strconv.Atoi(it.msg.TransportID)
			if i <= last {
				t.Errorf("part %d: item %d after item %d, not in stream order", p, i, last)
			}
			last = i
			if _, dup := where[it.msg.TransportID]; dup {
				t.Errorf("item %s is in two parts", it.msg.TransportID)
			}
			where[it.msg.TransportID] = p
		}
	}
	if len(where) != len(all) {
		t.Errorf("the parts hold %d items, the batch %d", len(where), len(all))
	}
	return where
}

func TestSplitSpreadsIndependentEvents(t *testing.T) {
	all := items(1000, func(i int) string { return fmt.Sprint("s-", i) }, func(i int) string { return "acc" }, nil)
	parts := split(all, 4, false)
	checkParts(t, all, parts)
	if len(parts) != 4 {
		t.Fatalf("%d parts, want 4", len(parts))
	}
	for p, part := range parts {
		if len(part) != 250 {
			t.Errorf("part %d holds %d items, want 250", p, len(part))
		}
	}
}

func TestSplitKeepsASettlementTogether(t *testing.T) {
	// Every settlement_id three times, far apart in the stream, and a few
	// messages that are not events.
	all := items(900, func(i int) string { return fmt.Sprint("s-", i%300) }, func(i int) string { return fmt.Sprint("a-", i) },
		func(i int) bool { return i%97 == 0 })
	parts := split(all, 4, false)
	where := checkParts(t, all, parts)
	if len(parts) < 2 {
		t.Fatalf("%d parts: independent settlements were not spread", len(parts))
	}
	first := map[string]int{}
	for _, it := range all {
		if it.err != nil {
			continue
		}
		p := where[it.msg.TransportID]
		if q, ok := first[it.ev.SettlementID]; ok && q != p {
			t.Errorf("settlement %s is in parts %d and %d", it.ev.SettlementID, q, p)
		}
		first[it.ev.SettlementID] = p
	}
}

func TestSplitKeepsAnAccountTogetherWhenFundsAreChecked(t *testing.T) {
	account := func(i int) string { return fmt.Sprint("a-", i%7) }
	all := items(800, func(i int) string { return fmt.Sprint("s-", i) }, account, nil)
	for _, byAccount := range []bool{true, false} {
		parts := split(all, 4, byAccount)
		where := checkParts(t, all, parts)
		spread := false
		first := map[string]int{}
		for _, it := range all {
			p := where[it.msg.TransportID]
			if q, ok := first[it.ev.AccountID]; ok && q != p {
				spread = true
			}
			first[it.ev.AccountID] = p
		}
		if spread == byAccount {
			t.Errorf("byAccount %v: an account's payouts spread over parts: %v", byAccount, spread)
		}
		if len(parts) < 2 {
			t.Errorf("byAccount %v: %d parts", byAccount, len(parts))
		}
	}
	// One account: one component, one transaction.
	one := items(800, func(i int) string { return fmt.Sprint("s-", i) }, func(int) string { return "acc" }, nil)
	if parts := split(one, 4, true); len(parts) != 1 {
		t.Errorf("one account's payouts in %d parts", len(parts))
	}
}

func TestSplitLeavesASmallBatchWhole(t *testing.T) {
	for _, n := range []int{1, 99, 199} {
		all := items(n, func(i int) string { return fmt.Sprint("s-", i) }, func(i int) string { return fmt.Sprint("a-", i) }, nil)
		if parts := split(all, 4, false); len(parts) != 1 || len(parts[0]) != n {
			t.Errorf("%d items: %d parts", n, len(parts))
		}
	}
	all := items(1000, func(i int) string { return fmt.Sprint("s-", i) }, func(i int) string { return fmt.Sprint("a-", i) }, nil)
	if parts := split(all, 1, false); len(parts) != 1 {
		t.Errorf("Parallel 1: %d parts", len(parts))
	}
}
