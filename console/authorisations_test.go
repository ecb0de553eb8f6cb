package console_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/fakebank/obietest"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/browsertest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// TestBrowserAuthorisation is the account holder's authorisation of an
// Open Banking payment, in a browser: the operator finds the payment on
// the Authorisations page with its link; the account holder (no console
// credentials) opens it, sees the payment on their bank's page, approves,
// and lands on the console's page saying so; the payment is made with
// their token; the link leaves the list. A redirect with a state the
// console never issued is refused.
func TestBrowserAuthorisation(t *testing.T) {
	t.Parallel()
	const token = "console-authorisation-token"
	db := dbtest.New(t)
	// The bank's page waits for the account holder's click.
	bank, bankURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 1, Profile: "obie", ManualAuthorisation: true,
		Faults: fakebank.Faults{SettleDelayMS: 200}})
	base := obieWorker(t, db.URL, bankURL, token)
	submitPayout(t, base, token, "auth-br-1", 4321)

	br := &browser{Browser: browsertest.New(t, browsertest.Options{}), t: t, base: base}
	br.signIn("alice", token)
	var link string
	settletest.Wait(t, "the payment listed for its account holder", func() (bool, string) {
		if st := br.open("/console/authorisations"); st != http.StatusOK {
			return false, "status " + http.StatusText(int(st))
		}
		link = eval[string](br, `(document.querySelector('tr[data-settlement="auth-br-1"] a.authorise-link') || {href: ""}).href`)
		return link != "", br.text("main")
	})
	br.clean("the authorisations page")
	lu, err := url.Parse(link)
	if err != nil || !strings.HasPrefix(link, bankURL+"/authorize?") || lu.Query().Get("redirect_uri") != base+"/console/authorise/callback" ||
		lu.Query().Get("code_challenge_method") != "S256" {
		t.Fatalf("the link %q: want the bank's /authorize with PKCE, sending the account holder back to the console", link)
	}
	if st := bank.Stats(); st.Payments != 0 {
		t.Fatalf("bank %+v: a payment before the account holder authorised", st)
	}

	// The account holder has no console credentials.
	br.signIn("", "")
	if st := br.open(link); st != http.StatusOK {
		t.Fatalf("the bank's page: %d", st)
	}
	if amount := br.text("#amount"); amount != "43.21 GBP" {
		t.Errorf("the bank's page shows the amount %q, want 43.21 GBP", amount)
	}
	if st := br.click("approve"); st != http.StatusOK {
		t.Fatalf("back on the console after approving: %d (%s)", st, br.text("body"))
	}
	if title := br.text("#title"); title != "Payment authorised" {
		t.Fatalf("the console's page after approving reads %q: %s", title, br.text("body"))
	}
	br.clean("the console's redirect page")

	settletest.Wait(t, "the payment made with the account holder's token", func() (bool, string) {
		st := bank.Stats()
		return st.Payments == 1, ""
	})
	if st := bank.Stats(); st.MaxPaymentsPerReference != 1 {
		t.Errorf("bank %+v: want one payment", st)
	}

	// The same redirect again, and one the console never issued.
	if st := br.open(base + "/console/authorise/callback?state=forged-state&code=x"); st != http.StatusBadRequest {
		t.Errorf("a forged state: %d, want 400", st)
	}
	if title := br.text("#title"); title != "Unknown authorisation" {
		t.Errorf("a forged state reads %q", title)
	}
	br.expectProblem("authorise/callback") // the browser logs the 400

	br.signIn("alice", token)
	settletest.Wait(t, "the link off the list", func() (bool, string) {
		br.open("/console/authorisations")
		return br.text("#empty") != "", br.text("main")
	})
	br.clean("the authorisations page, emptied")
}

// TestAuthorisationLinkUsesPublicURL: with --public-url the link sends
// the account holder back to that address (the redirect URI registered
// with the bank), not to the address the operator's request came to.
func TestAuthorisationLinkUsesPublicURL(t *testing.T) {
	t.Parallel()
	const token = "console-public-url-token"
	db := dbtest.New(t)
	_, bankURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 2, Profile: "obie", ManualAuthorisation: true})
	base := obieWorker(t, db.URL, bankURL, token, "--public-url", "http://localhost/pay")
	submitPayout(t, base, token, "auth-pub-1", 1234)
	linkRE := regexp.MustCompile(`class="authorise-link" href="([^"]+)"`)
	var link string
	settletest.Wait(t, "the payment listed for its account holder", func() (bool, string) {
		req, _ := http.NewRequest(http.MethodGet, base+"/console/authorisations", nil)
		req.SetBasicAuth("alice", token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer res.Body.Close()
		page, _ := io.ReadAll(res.Body)
		if m := linkRE.FindSubmatch(page); m != nil {
			link = html.UnescapeString(string(m[1]))
		}
		return link != "", fmt.Sprintf("status %d", res.StatusCode)
	})
	lu, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	if got := lu.Query().Get("redirect_uri"); got != "http://localhost/pay/console/authorise/callback" {
		t.Errorf("redirect_uri %q, want the --public-url's callback", got)
	}
}

// obieWorker starts a worker process on the obie bank at bankURL, with the
// API token token and the extra flags, and returns its URL.
func obieWorker(t *testing.T, dbURL, bankURL, token string, flags ...string) string {
	t.Helper()
	_, keyPath, _ := obietest.SigningKey(t)
	env := []string{bankclient.EnvSigningKeyFile + "=" + keyPath, bankclient.EnvToken + "=tpp-token",
		obie.EnvTokenKey + "=Y29uc29sZS1icm93c2VyLXRlc3QtdG9rZW4ta2V5ISE="}
	args := append(workerproc.FastFlags(bankURL), "--bank", "obie", "--api-token", token)
	return workertest.StartT(t, "w", dbURL, env, append(args, flags...)...).URL()
}

// submitPayout posts a sterling payout of amount to a sort-code account and
// fails t unless it was created.
func submitPayout(t *testing.T, base, token, id string, amount int64) {
	t.Helper()
	body, _ := json.Marshal(intake.Event{SettlementID: id, AccountID: "acc-1", AmountCents: amount, Currency: "GBP",
		Beneficiary: "SortCodeAccountNumber:08080021325698:ACME Ltd"})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/settlements", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("intake: %d", res.StatusCode)
	}
}
