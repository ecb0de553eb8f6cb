package sim

import (
	"context"
	"strings"
	"testing"

	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestFundsRuns: schedules whose intake checks funds (every paying
// account credited with a third to all of what its payouts ask) refuse
// some payouts and keep every invariant, the ledger's and the funds' own
// (no account spent beyond its money) included; with the check planted
// off, the same schedules spend money the accounts do not have, and the
// funds check says so.
func TestFundsRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	refused, caught := 0, 0
	for seed := uint64(1); seed <= 8; seed++ {
		for _, plant := range []string{"", "funds-check-off"} {
			if err := truncate(ctx, db.Pool); err != nil {
				t.Fatal(err)
			}
			res, err := Run(ctx, db.Pool, Config{Seed: seed, Funds: true, Plant: plant})
			if err != nil {
				t.Fatalf("seed %d %s: harness error: %v", seed, plant, err)
			}
			if res.Stats.FundsRuns != 1 {
				t.Fatalf("seed %d: the run did not check funds", seed)
			}
			overspent := false
			for _, v := range res.Violations {
				overspent = overspent || strings.Contains(v, "spent beyond its money")
			}
			switch {
			case plant == "" && len(res.Violations) > 0:
				t.Errorf("seed %d: %s", seed, res.Report())
			case plant == "":
				refused += res.Stats.Refused
			case overspent:
				caught++
			}
		}
	}
	t.Logf("8 schedules: %d payouts refused with the check; the check off caught in %d", refused, caught)
	if refused == 0 {
		t.Error("no payout was refused for insufficient funds in 8 schedules")
	}
	if caught < 4 {
		t.Errorf("the funds check caught intake without the check in %d of 8 schedules, want most", caught)
	}
}
