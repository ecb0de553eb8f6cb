package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
	_ "github.com/settle/settle/bankclient/stripe" // routed to, not served
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/settlecmd/worker"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
)

// TestConsoleShowsEachSettlementsBank: the list has a bank column and a
// bank filter, and the story of a settlement whose bank no worker serves
// says it waits for one.
func TestConsoleShowsEachSettlementsBank(t *testing.T) {
	t.Parallel()
	b := setup(t, "", fakebank.Faults{}, func(c *worker.Config) {
		c.Routes = intake.Routes{ByCurrency: map[string]string{"USD": "stripe"}}
		c.Connectors = bankclient.Connectors{settle.Connector, stripe.Connector}
	})
	b.submit(t, "mine", "acc-1", 100)
	ev := `{"settlement_id":"theirs","account_id":"acc-1","amount_cents":200,"currency":"USD","beneficiary":"ba_1Console"}`
	if code, body := settletest.Do(t, http.MethodPost, b.base+"/v1/settlements", b.auth(), ev); code != http.StatusCreated {
		t.Fatalf("POST = %d %s", code, body)
	}
	b.waitState(t, "mine", settlement.Confirmed)

	all := b.request(t, http.MethodGet, "/console/settlements", nil, nil)
	if all.code != http.StatusOK || !strings.Contains(all.body, "Paid through") || !strings.Contains(all.body, `href="/console/settlements?bank=stripe"`) {
		t.Fatalf("list: %d\n%.2000s", all.code, all.body)
	}
	stripe := b.request(t, http.MethodGet, "/console/settlements?bank=stripe", nil, nil)
	if !strings.Contains(stripe.body, ">theirs<") || strings.Contains(stripe.body, ">mine<") {
		t.Fatalf("filtered by bank stripe:\n%.2000s", stripe.body)
	}
	story := b.request(t, http.MethodGet, "/console/settlement?id=theirs", nil, nil)
	if !strings.Contains(story.body, "waiting for a worker of bank stripe") || !strings.Contains(story.body, `id="bank">stripe<`) {
		t.Fatalf("story of theirs:\n%.3000s", story.body)
	}
	if mine := b.request(t, http.MethodGet, "/console/settlement?id=mine", nil, nil); strings.Contains(mine.body, "waiting for a worker") {
		t.Fatal("a paid settlement waits for a worker")
	}
	// The same event naming a bank is another payload: a conflict whose
	// differing field is the bank.
	named := `{"settlement_id":"mine","account_id":"acc-1","amount_cents":100,"currency":"EUR","beneficiary":"DE89370400440532013000","bank":"settle"}`
	if code, body := settletest.Do(t, http.MethodPost, b.base+"/v1/settlements", b.auth(), named); code != http.StatusConflict {
		t.Fatalf("a redelivery naming a bank: %d %s, want 409", code, body)
	}
	if c := b.request(t, http.MethodGet, "/console/settlement?id=mine", nil, nil); !strings.Contains(c.body, "(none; bound to settle by the routes)") {
		t.Fatalf("the conflict does not show the bank:\n%.4000s", c.body)
	}
	if bad := b.request(t, http.MethodGet, "/console/settlements?bank=No%20Such", nil, nil); bad.code != http.StatusBadRequest || !strings.Contains(bad.body, "bank") {
		t.Fatalf("a malformed bank filter: %d", bad.code)
	}
}
