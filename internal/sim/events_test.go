package sim

import (
	"context"
	"strings"
	"testing"

	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestEventChecks: a schedule's outcome events reach the model receiver
// complete and in order (duplicates ignored), and the check catches a
// settlement whose events arrived out of order or with one missing.
func TestEventChecks(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	r, err := simulate(ctx, db.Pool, Config{Seed: 7, Settlements: 4, Steps: 40})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.res.Violations) > 0 || r.res.Stats.Events < 4 {
		t.Fatalf("events %d, violations %q", r.res.Stats.Events, r.res.Violations)
	}
	var id string
	for sid, ns := range r.rcv.order {
		if len(ns) >= 2 {
			id = sid
			r.rcv.order[sid] = append([]int{ns[1], ns[0]}, ns[2:]...)
			break
		}
	}
	if id == "" {
		t.Fatalf("no settlement with two events: %v", r.rcv.order)
	}
	v, err := r.eventChecks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 1 || !strings.Contains(v[0], id+" reached the receiver as") {
		t.Fatalf("out of order: %q", v)
	}
	r.rcv.order[id] = r.rcv.order[id][1:]
	if v, err := r.eventChecks(ctx); err != nil || len(v) != 1 {
		t.Fatalf("one missing: %q, %v", v, err)
	}
}
