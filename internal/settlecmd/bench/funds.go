package bench

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/ledger"
)

// fundsAccounts is how many accounts the funds phase's payouts come from
// when they are spread.
const fundsAccounts = 1000

// fundedAccount is the id of the i-th account of the funds phase.
func fundedAccount(i int) string { return "funded-" + strconv.Itoa(i) }

// fund credits each of the first accounts accounts (one when accounts is
// not positive) with more than any run pays from it.
func fund(ctx context.Context, pool *pgxpool.Pool, accounts int, prefix string) error {
	for i := range max(accounts, 1) {
		if _, err := ledger.Credit(ctx, pool, ledger.CreditRequest{AccountID: fundedAccount(i), AmountMinor: 1 << 50, Currency: "EUR",
			Ref: prefix + ":" + fundedAccount(i)}); err != nil {
			return fmt.Errorf("error funding the benchmark's accounts: %w", err)
		}
	}
	return nil
}

// measureFunds measures e2e_per_s with --funds-check against the same
// without it: payouts from 1,000 accounts (each payout locks only its own
// account's row) and from one hot account (every intake and every
// confirmation queues on that one row), and the hot account without the
// check, which still takes and releases holds on it. The baseline is the
// mean of a run before and one after (A B C D A).
func measureFunds(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, r *Result) error {
	n := cfg.E2ESettlements
	runs := []struct {
		name  string
		o     e2eOptions
		store *float64
	}{
		{"e2e-nofunds", e2eOptions{prefix: "nofunds1", accounts: fundsAccounts}, nil},
		{"e2e-funds", e2eOptions{prefix: "funds", accounts: fundsAccounts, fundsCheck: true}, &r.E2EFundsPerS},
		{"e2e-funds-hot", e2eOptions{prefix: "fundshot", accounts: 1, fundsCheck: true}, &r.E2EFundsHotPerS},
		{"e2e-hot", e2eOptions{prefix: "hot", accounts: 1}, &r.E2EHotPerS},
		{"e2e-nofunds-again", e2eOptions{prefix: "nofunds2", accounts: fundsAccounts}, nil},
	}
	var base []float64
	for _, run := range runs {
		run.o.n, run.o.faults = n, fakebank.Faults{}
		got, err := runE2EWith(ctx, cfg, pool, dbURL, run.o)
		if err != nil {
			return fmt.Errorf("%s: %w", run.name, err)
		}
		r.WorkerPeakRSSMB = max(r.WorkerPeakRSSMB, got.rssMB)
		if run.store != nil {
			*run.store = got.perS
		} else {
			base = append(base, got.perS)
		}
		cfg.Logf("%s: %.1f settlements/s", run.name, got.perS)
		if err := truncate(ctx, pool); err != nil {
			return err
		}
	}
	r.E2ENoFundsPerS = (base[0] + base[1]) / 2
	cfg.Logf("e2e_funds_per_s %.1f / e2e_no_funds_per_s %.1f = %.2f; e2e_funds_hot_per_s %.1f, e2e_hot_per_s %.1f",
		r.E2EFundsPerS, r.E2ENoFundsPerS, r.E2EFundsPerS/r.E2ENoFundsPerS, r.E2EFundsHotPerS, r.E2EHotPerS)
	return nil
}
