package intake

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/settle/settle/settlement"
)

// MaxAmounts are an operator's own ceilings on one payout, by currency, in
// minor units (settle worker --max-amount CCY=N, repeatable; the
// environment's SETTLE_MAX_AMOUNT takes the same list comma-separated).
// Intake refuses an event over its currency's ceiling with 422 naming
// amount_cents, as it refuses one over the connector's own limit; a
// currency without a ceiling keeps the connector's limit alone, and a
// ceiling never raises that limit. *MaxAmounts is a flag.Value.
type MaxAmounts map[string]int64

// String lists the ceilings as Set takes them, sorted by currency.
func (m MaxAmounts) String() string {
	codes := make([]string, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = c + "=" + strconv.FormatInt(m[c], 10)
	}
	return strings.Join(parts, ",")
}

// Set adds the ceilings of v, "CCY=N[,CCY=N…]": CCY a currency a payout can
// be made in (settlement.PayoutCurrency), N a positive integer of minor
// units (2500000 EUR is 25,000.00 euros; 2500000 JPY is 2,500,000 yen).
// A currency given twice, here or in an earlier Set, is an error: two
// ceilings for one currency are a mistake, not a choice.
func (m *MaxAmounts) Set(v string) error {
	if *m == nil {
		*m = MaxAmounts{}
	}
	add := MaxAmounts{}
	for item := range strings.SplitSeq(v, ",") {
		code, n, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return fmt.Errorf("%q: want CCY=N (minor units), for example EUR=2500000", item)
		}
		if _, err := settlement.PayoutCurrency(code); err != nil {
			return fmt.Errorf("%q: %w", item, err)
		}
		amount, err := parseAmount(n)
		if err != nil {
			return fmt.Errorf("%q: the ceiling %w", item, err)
		}
		if _, dup := (*m)[code]; dup {
			return fmt.Errorf("%q: %w", item, errCeilingTwice)
		}
		if _, dup := add[code]; dup {
			return fmt.Errorf("%q: %w", item, errCeilingTwice)
		}
		add[code] = amount
	}
	for c, n := range add {
		(*m)[c] = n
	}
	return nil
}

var errCeilingTwice = errors.New("a ceiling for this currency is already set")

// checkCeiling refuses an amount over the operator's ceiling for its
// currency, naming amount_cents.
func (m MaxAmounts) checkCeiling(ev Event) error {
	if lim, ok := m[ev.Currency]; ok && ev.AmountCents > lim {
		return invalid(fieldAmountCents, fmt.Sprintf("is over this operator's ceiling (--max-amount) of %d minor units of %s a payment", lim, ev.Currency))
	}
	return nil
}
