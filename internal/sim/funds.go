package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/settle/settle/ledger"
)

// setFunds decides whether the run's intake checks funds (Config.Funds, or
// a third of the seeds) and, if so, credits each paying account in each
// currency with between a third and all of what its payouts ask, so that
// some are accepted and some refused. Its draws come from a generator of
// their own, so a seed's schedule is the same whether or not it checks
// funds.
func (r *run) setFunds(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0xf0d5))
	r.funds = r.cfg.Funds || rng.IntN(3) == 0
	if !r.funds {
		return nil
	}
	type key struct{ account, currency string }
	asked := map[key]int64{}
	for _, p := range r.events {
		asked[key{p.orig.AccountID, p.orig.Currency}] += p.orig.AmountCents
	}
	keys := make([]key, 0, len(asked))
	for k := range asked {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].account < keys[j].account || (keys[i].account == keys[j].account && keys[i].currency < keys[j].currency)
	})
	for _, k := range keys {
		amount := asked[k] * int64(1+rng.IntN(3)) / 3
		if _, err := ledger.Credit(ctx, r.pool, ledger.CreditRequest{AccountID: k.account, AmountMinor: amount, Currency: k.currency,
			Ref: fmt.Sprintf("sim-%s-%s", k.account, k.currency), At: r.clock.Now()}); err != nil {
			return fmt.Errorf("error crediting %s: %w", k.account, err)
		}
		r.tracef("funds: %s credited %d %s of the %d its payouts ask", k.account, amount, k.currency, asked[k])
	}
	return nil
}

// fundsChecks, in a run that checks funds, says where a paying account
// was spent beyond its money: an available balance (posted minus held)
// below zero.
func (r *run) fundsChecks(ctx context.Context) ([]string, error) {
	if !r.funds {
		return nil, nil
	}
	bs, err := ledger.Balances(ctx, r.pool, "")
	if err != nil {
		return nil, err
	}
	var v []string
	for _, b := range bs {
		if b.Kind == ledger.KindCustomer && b.Available < 0 {
			v = append(v, fmt.Sprintf("funds: %s is spent beyond its money: %d %s available (%d posted, %d held)",
				b.AccountID, b.Available, b.Currency, b.Posted, b.Held))
		}
	}
	return v, nil
}
