package intake

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/settlement"
)

// RouteDefault is the key of the default rule of Routes (--route
// default=BANK).
const RouteDefault = "default"

// Routes are a worker's routing rules (--route CURRENCY=BANK, --route
// default=BANK, repeatable; SETTLE_ROUTE comma-separated): an event that
// names no bank is bound to its currency's bank, else to the default one.
// It is a flag.Value.
type Routes struct {
	// ByCurrency maps an ISO 4217 code to a bank name.
	ByCurrency map[string]string
	// Default is the bank of a currency with no rule of its own; empty:
	// none (then a worker that serves a single bank takes it).
	Default string
}

// String lists the rules as Set reads them, in a stable order.
func (r *Routes) String() string {
	if r == nil {
		return ""
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(r.ByCurrency)) {
		parts = append(parts, c+"="+r.ByCurrency[c])
	}
	if r.Default != "" {
		parts = append(parts, RouteDefault+"="+r.Default)
	}
	return strings.Join(parts, ",")
}

// Set adds the rules of v, one CURRENCY=BANK or default=BANK or a
// comma-separated list of them. A currency given two banks is refused.
func (r *Routes) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, bank, ok := strings.Cut(part, "=")
		key, bank = strings.TrimSpace(key), strings.TrimSpace(bank)
		if !ok || key == "" {
			return fmt.Errorf("route %q: want CURRENCY=BANK or default=BANK", part)
		}
		if err := settlement.CheckBankName(bank); err != nil {
			return fmt.Errorf("route %q: %w", part, err)
		}
		if key == RouteDefault {
			if r.Default != "" && r.Default != bank {
				return fmt.Errorf("route %q: the default bank is already %s", part, r.Default)
			}
			r.Default = bank
			continue
		}
		if _, err := settlement.PayoutCurrency(key); err != nil {
			return fmt.Errorf("route %q: %s is not a currency a payout can be made in", part, key)
		}
		if prev, dup := r.ByCurrency[key]; dup && prev != bank {
			return fmt.Errorf("route %q: %s already goes to %s", part, key, prev)
		}
		if r.ByCurrency == nil {
			r.ByCurrency = map[string]string{}
		}
		r.ByCurrency[key] = bank
	}
	return nil
}

// Banks lists the banks the rules name, sorted.
func (r Routes) Banks() []string {
	set := map[string]bool{}
	for _, b := range r.ByCurrency {
		set[b] = true
	}
	if r.Default != "" {
		set[r.Default] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// router binds events to banks: the event's own bank field, else the
// rules, else the one bank served.
type router struct {
	// banks are the banks an event may be bound to, by name: those the
	// worker serves and those its rules name.
	banks  map[string]bankclient.Connector
	names  string
	routes Routes
	def    string
}

// newRouter returns the router of a worker serving served (at least one)
// with rules routes. A bank the rules name that is neither served nor one
// of known is an error.
func newRouter(served []bankclient.Connector, known bankclient.Connectors, routes Routes) (*router, error) {
	if len(served) == 0 {
		return nil, errors.New("no bank configured")
	}
	r := &router{banks: map[string]bankclient.Connector{}, routes: routes, def: routes.Default}
	for _, c := range served {
		r.banks[c.Name] = c
	}
	for _, name := range routes.Banks() {
		if _, ok := r.banks[name]; ok {
			continue
		}
		c, err := slices.Concat(bankclient.Connectors(served), known).Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("--route names bank %q: %w", name, err)
		}
		r.banks[name] = c
	}
	if r.def == "" && len(served) == 1 {
		r.def = served[0].Name
	}
	names := slices.Collect(maps.Keys(r.banks))
	sort.Strings(names)
	r.names = strings.Join(names, ", ")
	return r, nil
}

// route returns the bank ev is bound to, or an *InvalidError naming the
// field bank (422) when no configured bank can take it.
func (r *router) route(ev Event) (bankclient.Connector, error) {
	if ev.Bank != "" {
		c, ok := r.banks[ev.Bank]
		if !ok {
			return bankclient.Connector{}, invalid(fieldBank, fmt.Sprintf("names bank %s, which is not configured here (configured: %s)", ev.Bank, r.names))
		}
		return c, nil
	}
	name, ok := r.routes.ByCurrency[ev.Currency]
	if !ok {
		name = r.def
	}
	if name == "" {
		return bankclient.Connector{}, invalid(fieldBank, fmt.Sprintf("is missing and no route takes %s: name one of %s, or configure --route %s=BANK or --route default=BANK",
			ev.Currency, r.names, ev.Currency))
	}
	return r.banks[name], nil
}
