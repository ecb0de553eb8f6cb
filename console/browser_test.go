package console_test

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/settlecmd/worker"
	"github.com/settle/settle/internal/testsupport/browsertest"
	"github.com/settle/settle/settlement"
)

// browser is a headless Chromium on the console of one worker.
type browser struct {
	*browsertest.Browser
	t    *testing.T
	base string
}

// stepTimeout bounds one browser step: far beyond what it takes, it only
// ends a step that would hang.
const stepTimeout = time.Minute

func newBrowser(t *testing.T, b *testBundle, o browsertest.Options) *browser {
	t.Helper()
	br := &browser{Browser: browsertest.New(t, o), t: t, base: b.base}
	if b.token != "" {
		br.signIn("alice", b.token)
	}
	return br
}

func (br *browser) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(br.Ctx, stepTimeout)
}

// signIn makes every request carry Basic credentials, as a browser does
// once its user has answered the sign-in prompt; signIn("", "") signs out.
func (br *browser) signIn(user, password string) {
	br.t.Helper()
	h := map[string]string{}
	if user != "" {
		h["Authorization"] = browsertest.BasicAuth(user, password)
	}
	br.SetHeaders(h)
}

// open loads a console path (or a full URL) and returns the HTTP status.
func (br *browser) open(path string) int64 {
	br.t.Helper()
	url := path
	if strings.HasPrefix(path, "/") {
		url = br.base + path
	}
	ctx, cancel := br.ctx()
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	if err != nil {
		br.t.Fatalf("open %s: %v", url, err)
	}
	return resp.Status
}

// click clicks the element with this id, waits for the page it leads to,
// and returns that page's HTTP status (after redirects).
func (br *browser) click(id string) int64 {
	br.t.Helper()
	ctx, cancel := br.ctx()
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID(id)))
	if err != nil {
		br.t.Fatalf("click #%s: %v", id, err)
	}
	return resp.Status
}

// do runs actions that return nothing.
func (br *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	br.t.Helper()
	ctx, cancel := br.ctx()
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		br.t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page (through the
// DevTools protocol: the console's pages run no script of their own).
func eval[T any](br *browser, expr string) T {
	br.t.Helper()
	ctx, cancel := br.ctx()
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		br.t.Fatalf("eval %s: %v", expr, err)
	}
	return v
}

// texts returns the text of every element matching a CSS selector.
func (br *browser) texts(sel string) []string {
	br.t.Helper()
	return eval[[]string](br, fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(e => e.innerText.trim())`, sel))
}

// text returns the text of the first element matching sel, "" if none.
func (br *browser) text(sel string) string {
	br.t.Helper()
	if ts := br.texts(sel); len(ts) > 0 {
		return ts[0]
	}
	return ""
}

// clean fails the test if a page logged an error or threw since the last
// call.
func (br *browser) clean(what string) {
	br.t.Helper()
	if p := br.Problems(); len(p) > 0 {
		br.t.Errorf("%s: console errors:\n%s", what, strings.Join(p, "\n"))
	}
}

// expectProblem waits until the tab has logged a problem naming part (the
// browser reports console messages as events that may come after the
// load), drops it, and fails the test on any other problem.
func (br *browser) expectProblem(part string) {
	br.t.Helper()
	deadline := time.Now().Add(time.Minute)
	var others []string
	for {
		found := false
		for _, p := range br.Problems() {
			if strings.Contains(p, part) {
				found = true
			} else {
				others = append(others, p)
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			br.t.Errorf("no problem naming %s was logged", part)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(others) > 0 {
		br.t.Errorf("console errors beside the expected one:\n%s", strings.Join(others, "\n"))
	}
}

// fits fails the test if the page is wider than the viewport.
func (br *browser) fits(what string) {
	br.t.Helper()
	if w := eval[[]int](br, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
		br.t.Errorf("%s: the page is %d px wide in a %d px viewport", what, w[0], w[1])
	}
}

// TestBrowserStoryOfALostAnswer follows one settlement through a lost
// answer (the bank executed the payment, its answer never came), a
// redelivery, a conflicting event and the confirmation the engine found by
// asking the bank's status API, adds an operator's note through the page,
// and checks that the story shows all of it.
func TestBrowserStoryOfALostAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, secretToken, fakebank.Faults{DropResponseRate: 1}, nil)
	if code := b.submit(t, "payout-7781", "acc-acme-eur", 1_234_500); code != http.StatusCreated {
		t.Fatalf("first delivery = %d", code)
	}
	b.waitState(t, "payout-7781", settlement.Confirmed)
	if code := b.submit(t, "payout-7781", "acc-acme-eur", 1_234_500); code != http.StatusOK {
		t.Fatalf("redelivery = %d, want 200", code)
	}
	if code := b.submit(t, "payout-7781", "acc-acme-eur", 1_243_500); code != http.StatusConflict {
		t.Fatalf("conflicting event = %d, want 409", code)
	}

	br := newBrowser(t, b, browsertest.Options{Width: 1280, Height: 1000})
	if code := br.open("/console/settlement?id=payout-7781"); code != http.StatusOK {
		t.Fatalf("story = %d", code)
	}
	br.do(chromedp.SendKeys(chromedp.ID("note"), "Answer lost at the bank's gateway; the status API says settled. Nothing to do."))
	if code := br.click("add-note"); code != http.StatusOK {
		t.Fatalf("add note = %d", code)
	}
	br.clean("story")
	events := br.texts(".timeline .ev")
	has := func(kind string, words ...string) {
		t.Helper()
		for _, e := range events {
			if !strings.Contains(strings.ToLower(e), kind) {
				continue
			}
			if ok := !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(e, w) }); ok {
				return
			}
		}
		t.Errorf("no %s event with %q in the timeline:\n%s", kind, words, strings.Join(events, "\n"))
	}
	has("receipt", "received")
	has("replay", "1 replays")
	has("bank_send", "ambiguous")
	has("transition", "pending → uncertain")
	has("bank_status", "settled")
	has("transition", "uncertain → confirmed")
	has("movement", "payout 1234500 EUR", "acc-acme-eur")
	has("conflict", "amount_cents 1234500 → 1243500")
	has("operator", "alice noted: Answer lost")
	if got := br.text("#state"); got != "confirmed" {
		t.Errorf("state = %q", got)
	}
	if diff := br.texts("#conflicts tr.differs"); len(diff) != 1 || !strings.Contains(diff[0], "1234500") || !strings.Contains(diff[0], "1243500") {
		t.Errorf("conflict side by side: differing rows %q", diff)
	}
	if ops := br.texts("#operator-actions tbody tr"); len(ops) != 1 || !strings.Contains(ops[0], "alice") {
		t.Errorf("operator actions = %q", ops)
	}
	path := br.Screenshot(screenshotDir, "story")
	saveDocs(t, path, "console-story.png")
}

// TestBrowserConsole drives the console as an operator would on a worker
// with real traffic: the overview, the lists and their filters and pages,
// "resolve now" on an uncertain settlement, a note, the conflicts; then a
// cross-site form that tries to act, the pages without credentials, and
// the pages on a 375 px wide phone.
func TestBrowserConsole(t *testing.T) {
	t.Parallel()
	// Lost answers, and no check of its own for an hour: what is uncertain
	// stays so until an operator acts. The engine's key TTL is a
	// millisecond, so a key the bank forgot cannot be resent.
	b := setup(t, secretToken, fakebank.Faults{DropResponseRate: 1}, func(c *worker.Config) {
		c.CheckInterval, c.MaxCheckInterval, c.SweepInterval, c.Lease = time.Hour, time.Hour, time.Hour, 2*time.Hour
		c.BankKeyTTL = time.Millisecond
	})
	accounts := []string{"acc-north", "acc-south"}
	var uncertain, confirmed []string
	for i := range 12 {
		id := fmt.Sprintf("po-u%02d", i)
		b.submit(t, id, accounts[i%2], int64(10_000+i))
		uncertain = append(uncertain, id)
	}
	for _, id := range uncertain {
		b.waitState(t, id, settlement.Uncertain)
	}
	if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
		t.Fatal(err)
	}
	for i := range 55 {
		id := fmt.Sprintf("po-c%02d", i)
		b.submit(t, id, "acc-east", int64(20_000+i))
		confirmed = append(confirmed, id)
	}
	for _, id := range confirmed {
		b.waitState(t, id, settlement.Confirmed)
	}
	// One the bank will have forgotten by the time anyone asks.
	if err := b.bank.SetFaults(fakebank.Faults{DropResponseRate: 1, KeyTTLMS: 1}); err != nil {
		t.Fatal(err)
	}
	b.submit(t, "po-forgotten", "acc-north", 99_900)
	b.waitState(t, "po-forgotten", settlement.Uncertain)
	if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
		t.Fatal(err)
	}
	b.submit(t, "po-u01", "acc-south", 10_001) // a redelivery
	b.submit(t, "po-u02", "acc-south", 55_555) // a conflict
	all := append(append(slices.Clone(uncertain), confirmed...), "po-forgotten")

	br := newBrowser(t, b, browsertest.Options{Width: 1280, Height: 900})

	// Resolve now on the one the bank forgot: it stays uncertain, flagged.
	br.open("/console/settlement?id=po-forgotten")
	if code := br.click("resolve-now"); code != http.StatusOK {
		t.Fatalf("resolve now = %d", code)
	}
	if done := br.text("#done"); !strings.Contains(done, "stays uncertain") || !strings.Contains(done, "needs investigation") {
		t.Errorf("resolve now on a forgotten key: %q", done)
	}
	br.clean("resolve now (forgotten)")

	// The overview.
	if code := br.open("/console/"); code != http.StatusOK {
		t.Fatalf("overview = %d", code)
	}
	br.clean("overview")
	if got := br.text("#card-investigation .value"); got != "1" {
		t.Errorf("needs investigation = %q, want 1", got)
	}
	if got := br.text("#card-conflicts .value"); got != "1" {
		t.Errorf("conflicts = %q, want 1", got)
	}
	if rows := br.texts("#open-states tbody tr"); len(rows) != 3 || !strings.Contains(rows[2], "13") || !strings.Contains(rows[2], "po-u00") {
		t.Errorf("open states = %q", rows)
	}
	path := br.Screenshot(screenshotDir, "overview")
	saveDocs(t, path, "console-overview.png")

	// Every settlement, a page at a time (the overview's state links go to
	// the same list).
	ids := func() []string { return br.texts("#settlements a.id") }
	br.open("/console/settlements")
	br.clean("list")
	page1 := ids()
	if len(page1) != 50 {
		t.Fatalf("first page has %d rows, want 50", len(page1))
	}
	if code := br.click("next-page"); code != http.StatusOK {
		t.Fatalf("next page = %d", code)
	}
	br.clean("list page 2")
	page2 := ids()
	if got := append(slices.Clone(page1), page2...); !sameSet(got, all) {
		t.Errorf("the pages hold %d ids, want each of %d once: %v", len(got), len(all), got)
	}
	if eval[bool](br, `document.getElementById('next-page') !== null`) {
		t.Error("the last page has a next page")
	}

	// The filters, through the form.
	filter := func(state, account, older string, flagged bool) []string {
		t.Helper()
		br.open("/console/settlements")
		for id, v := range map[string]string{"f-state": state, "f-account": account, "f-older": older} {
			if v != "" { // the form starts empty
				br.do(chromedp.SetValue(chromedp.ID(id), v))
			}
		}
		if flagged {
			br.do(chromedp.Click(chromedp.ID("f-flagged")))
		}
		if code := br.click("f-apply"); code != http.StatusOK {
			t.Fatalf("filter %s/%s/%s/%v = %d: %s", state, account, older, flagged, code, br.text("#filter-error"))
		}
		br.clean("filter")
		return ids()
	}
	if got := filter("uncertain", "", "", false); !sameSet(got, append(slices.Clone(uncertain), "po-forgotten")) {
		t.Errorf("uncertain = %v", got)
	}
	if got := filter("", "acc-north", "", false); !sameSet(got, []string{"po-u00", "po-u02", "po-u04", "po-u06", "po-u08", "po-u10", "po-forgotten"}) {
		t.Errorf("acc-north = %v", got)
	}
	if got := filter("uncertain", "", "", true); !sameSet(got, []string{"po-forgotten"}) {
		t.Errorf("needs investigation = %v", got)
	}
	if got := filter("confirmed", "acc-east", "1h", false); len(got) != 0 || br.text("#empty") == "" {
		t.Errorf("confirmed for over an hour = %v", got)
	}
	if got := filter("confirmed", "acc-east", "1ms", false); len(got) != 50 {
		t.Errorf("confirmed for over 1ms, first page = %d rows", len(got))
	}

	// Resolve now on an uncertain settlement: the bank is asked and it
	// settled, so it is confirmed.
	br.open("/console/settlement?id=po-u03")
	if got := br.text("#state"); got != "uncertain" {
		t.Fatalf("po-u03 is %q", got)
	}
	if code := br.click("resolve-now"); code != http.StatusOK {
		t.Fatalf("resolve now = %d", code)
	}
	br.clean("resolve now")
	if got, done := br.text("#state"), br.text("#done"); got != "confirmed" || !strings.Contains(done, "uncertain → confirmed") {
		t.Errorf("after resolve now: state %q, %q", got, done)
	}
	if v := b.view(t, "po-u03"); v.Settlement.State != settlement.Confirmed || v.Movement == nil {
		t.Errorf("po-u03 in the database: %+v", v)
	}
	br.do(chromedp.SendKeys(chromedp.ID("note"), "resolved by hand after the gateway incident"))
	if code := br.click("add-note"); code != http.StatusOK {
		t.Fatalf("note = %d", code)
	}
	if ops := br.texts("#operator-actions tbody tr"); len(ops) != 2 || !strings.Contains(ops[0], "resolve now") || !strings.Contains(ops[1], "gateway incident") {
		t.Errorf("operator actions = %q", ops)
	}
	br.clean("note")

	// The conflicts.
	br.open("/console/conflicts")
	br.clean("conflicts")
	if rows := br.texts("#conflicts tbody tr"); len(rows) != 1 || !strings.Contains(rows[0], "po-u02") || !strings.Contains(rows[0], "55555") {
		t.Errorf("conflicts = %q", rows)
	}

	// The statement lines matched to no settlement (none imported here).
	if code := br.open("/console/statements"); code != http.StatusOK || br.text("#empty") == "" {
		t.Errorf("statements = %d %q", code, br.text("main"))
	}
	br.clean("statements")

	// The ledger's accounts and one account's page: its payouts' postings.
	if code := br.open("/console/accounts"); code != http.StatusOK || len(br.texts("#balances tbody tr")) == 0 {
		t.Errorf("accounts = %d %q", code, br.text("main"))
	}
	br.clean("accounts")
	if code := br.open(eval[string](br, `document.querySelector('#balances tbody a').getAttribute('href')`)); code != http.StatusOK || !strings.HasPrefix(br.text("h1"), "Account ") {
		t.Errorf("an account = %d %q", code, br.text("main"))
	}
	br.clean("account")

	// A page of another site submits a form to the console, with a valid
	// form token even (say it leaked) and the operator's credentials (the
	// browser sends remembered ones): refused, nothing recorded.
	br.open("/console/settlement?id=po-u04")
	token := eval[string](br, `document.querySelector('input[name=csrf]').value`)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = evilPage.Execute(w, map[string]string{"Action": b.base + "/console/settlement/note", "Token": token})
	}))
	t.Cleanup(evil.Close)
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1) // another site
	if code := br.open(evilURL); code != http.StatusOK {
		t.Fatalf("evil page = %d", code)
	}
	if code := br.click("go"); code != http.StatusForbidden {
		t.Errorf("cross-site POST = %d, want 403", code)
	}
	br.expectProblem("/console/settlement/note") // the 403 is logged as a failed load
	if a := b.actions(t, "po-u04"); len(a) != 0 {
		t.Errorf("the cross-site POST recorded %+v", a)
	}

	// A phone: 375 px wide, nothing wider than the screen.
	br.do(chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile, chromedp.EmulatePortrait))
	for _, p := range []struct{ path, name string }{
		{"/console/", "overview-375"},
		{"/console/settlements?state=uncertain", "list-375"},
		{"/console/settlement?id=po-u02", "story-375"},
		{"/console/conflicts", "conflicts-375"},
		{"/console/statements", "statements-375"},
		{"/console/accounts", "accounts-375"},
	} {
		if code := br.open(p.path); code != http.StatusOK {
			t.Errorf("%s at 375 px = %d", p.path, code)
		}
		br.clean(p.name)
		br.fits(p.name)
		br.Screenshot(screenshotDir, p.name)
	}

	// Without credentials: 401 with the sign-in page, on every page (the
	// prompt cancelled, as a person who does not know the token would).
	br.signIn("", "")
	br.CancelSignIn()
	for _, p := range []string{"/console/", "/console/settlements", "/console/settlement?id=po-u03", "/console/conflicts", "/console/statements", "/console/accounts"} {
		if code := br.open(p); code != http.StatusUnauthorized || !strings.Contains(br.text("h1"), "Sign in") {
			t.Errorf("%s without credentials = %d %q, want 401", p, code, br.text("h1"))
		}
	}
	br.Problems() // each 401 is logged as a failed load
	if a := b.actions(t, "po-u03"); len(a) != 2 {
		t.Errorf("po-u03 has %d actions, want 2", len(a))
	}
}

// evilPage is another site's page with a form aimed at the console.
var evilPage = template.Must(template.New("evil").Parse(`<!doctype html><title>win a prize</title>
<form method="post" action="{{.Action}}"><input type="hidden" name="csrf" value="{{.Token}}">
<input type="hidden" name="id" value="po-u04"><input type="hidden" name="note" value="pwned">
<button id="go" type="submit">claim</button></form>`))

func sameSet(got, want []string) bool {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}
