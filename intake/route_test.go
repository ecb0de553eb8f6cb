package intake_test

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/jobs"
)

// twoBanks is a worker serving settle and stripe, USD routed to stripe and
// nothing else routed.
func twoBanks(t *testing.T) *testBundle {
	t.Helper()
	var routes intake.Routes
	if err := routes.Set("USD=stripe"); err != nil {
		t.Fatal(err)
	}
	return setup(t, setupOpts{banks: []bankclient.Connector{settle.Connector, stripe.Connector}, routes: routes})
}

func storedBank(t *testing.T, b *testBundle, id string) (bank, ref string) {
	t.Helper()
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT bank, coalesce(bank_reference, settlement_id) FROM settlements WHERE settlement_id = $1", id).
		Scan(&bank, &ref); err != nil {
		t.Fatal(err)
	}
	return bank, ref
}

// TestRouteExplicitBankWins: the event's bank field binds it whatever the
// rules say; without it the currency's rule does.
func TestRouteExplicitBankWins(t *testing.T) {
	t.Parallel()
	b := twoBanks(t)
	// USD goes to stripe by rule, but this one names settle.
	ev := eventFields("explicit-settle")
	ev["currency"], ev["bank"] = "USD", "settle"
	if r := b.post(t, mustJSON(t, ev)); r.status != http.StatusCreated || r.body["bank"] != "settle" {
		t.Fatalf("explicit bank: %d %s", r.status, r.raw)
	}
	// By rule: stripe, its reference derived by stripe's rules.
	long := strings.Repeat("r", 60)
	ev = eventFields(long)
	ev["currency"], ev["beneficiary"] = "USD", "ba_1Route"
	if r := b.post(t, mustJSON(t, ev)); r.status != http.StatusCreated || r.body["bank"] != "stripe" {
		t.Fatalf("routed: %d %s", r.status, r.raw)
	}
	if bank, ref := storedBank(t, b, long); bank != "stripe" || ref != stripe.Connector.Capabilities.Reference(long) {
		t.Fatalf("routed settlement: bank %s, reference %s", bank, ref)
	}
	// EUR has no rule and there are two banks: the event must say.
	ev = eventFields("explicit-stripe")
	ev["bank"], ev["beneficiary"] = "stripe", "ba_1Eur"
	if r := b.post(t, mustJSON(t, ev)); r.status != http.StatusCreated || r.body["bank"] != "stripe" {
		t.Fatalf("explicit stripe: %d %s", r.status, r.raw)
	}
	var n int
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM river_job WHERE kind = 'send_instruction'").Scan(&n); err != nil || n != 3 {
		t.Fatalf("send jobs: %d, %v", n, err)
	}
}

// TestRouteUnroutable: an event no configured bank can take is a 422
// naming the field bank, and nothing is stored.
func TestRouteUnroutable(t *testing.T) {
	t.Parallel()
	b := twoBanks(t)
	cases := map[string]func(map[string]any){
		"no rule for EUR":       func(ev map[string]any) {},
		"a bank not configured": func(ev map[string]any) { ev["bank"] = "obie" },
		"not a bank name":       func(ev map[string]any) { ev["bank"] = "Stripe; DROP TABLE" },
		"not a string":          func(ev map[string]any) { ev["bank"] = 7 },
		"empty":                 func(ev map[string]any) { ev["bank"] = "" },
	}
	for name, change := range cases {
		ev := eventFields("unroutable")
		change(ev)
		r := b.post(t, mustJSON(t, ev))
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.raw), `"bank"`) {
			t.Errorf("%s: %d %s, want 422 naming bank", name, r.status, r.raw)
		}
	}
	// The bank's own checks apply to the bank bound: stripe takes no IBAN.
	ev := eventFields("wrong-beneficiary")
	ev["bank"] = "stripe"
	if r := b.post(t, mustJSON(t, ev)); r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.raw), "beneficiary") {
		t.Errorf("stripe with an IBAN: %d %s", r.status, r.raw)
	}
	wantCounts(t, b.db, map[string]int{})
}

// TestRouteHash: a named bank is part of the payload hash (a replay naming
// another bank is a conflict); an event naming none hashes as before banks.
func TestRouteHash(t *testing.T) {
	t.Parallel()
	b := twoBanks(t)
	plain := eventFields("hash-1")
	plain["currency"], plain["beneficiary"] = "USD", "ba_1Hash"
	first := b.post(t, mustJSON(t, plain))
	if first.status != http.StatusCreated || first.body["bank"] != "stripe" {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	ev, err := intake.DecodeEvent([]byte(mustJSON(t, plain)))
	if err != nil {
		t.Fatal(err)
	}
	noBank := ev
	noBank.Bank = ""
	if ev.Bank != "" || first.body["payload_hash"] != intake.CanonicalHash(noBank) {
		t.Fatal("the hash of an event without a bank changed")
	}
	if r := b.post(t, mustJSON(t, plain)); r.status != http.StatusOK || r.body["replayed"] != true {
		t.Fatalf("replay without a bank: %d %s", r.status, r.raw)
	}
	// The same event naming its bank, even the one it was bound to, is
	// another payload.
	named := maps.Clone(plain)
	named["bank"] = "stripe"
	if r := b.post(t, mustJSON(t, named)); r.status != http.StatusConflict {
		t.Fatalf("replay naming a bank: %d %s, want 409", r.status, r.raw)
	}
	// Named from the start: replays name the same bank; another is a conflict.
	two := eventFields("hash-2")
	two["bank"], two["beneficiary"] = "settle", "ba_1Both"
	if r := b.post(t, mustJSON(t, two)); r.status != http.StatusCreated {
		t.Fatalf("named: %d %s", r.status, r.raw)
	}
	if r := b.post(t, mustJSON(t, two)); r.status != http.StatusOK || r.body["replayed"] != true {
		t.Fatalf("replay: %d %s", r.status, r.raw)
	}
	other := maps.Clone(two)
	other["bank"] = "stripe"
	if r := b.post(t, mustJSON(t, other)); r.status != http.StatusConflict {
		t.Fatalf("replay naming another bank: %d %s, want 409", r.status, r.raw)
	}
	var bank string
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT bank FROM settlements WHERE settlement_id = 'hash-2'").Scan(&bank); err != nil || bank != "settle" {
		t.Fatalf("hash-2 bound to %q (%v)", bank, err)
	}
	var conflicts int
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM receipt_conflicts").Scan(&conflicts); err != nil || conflicts != 2 {
		t.Fatalf("conflicts recorded: %d (%v), want 2", conflicts, err)
	}
}

// TestRoutesFlag: the rules as --route and SETTLE_ROUTE give them.
func TestRoutesFlag(t *testing.T) {
	t.Parallel()
	var r intake.Routes
	if err := r.Set("GBP=obie, USD=stripe"); err != nil {
		t.Fatal(err)
	}
	if err := r.Set("default=settle"); err != nil {
		t.Fatal(err)
	}
	if got := r.String(); got != "GBP=obie,USD=stripe,default=settle" {
		t.Fatalf("String = %q", got)
	}
	for _, bad := range []string{"USD", "USD=", "=stripe", "usd=stripe", "XXX=stripe", "USD=Stripe", "USD=settle", "default=obie"} {
		if err := r.Set(bad); err == nil {
			t.Errorf("Set(%q) took it", bad)
		}
	}
	// A rule may name a bank the worker does not serve (its settlements
	// wait for a worker of it), but it must be a connector.
	cfg := intake.Config{DB: (*pgxpool.Pool)(nil), Jobs: jobs.Inserter{}, Bank: obie.NewConnector(obie.Config{}),
		Connectors: bankclient.Connectors{settle.Connector, stripe.Connector}}
	if _, err := intake.NewService(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Routes = intake.Routes{Default: "nosuch"}
	if _, err := intake.NewService(cfg); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("a route to no connector: %v", err)
	}
}
