package console_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/console"
	"github.com/settle/settle/events/eventstest"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/auth"
	"github.com/settle/settle/internal/settlecmd/worker"
	"github.com/settle/settle/internal/testsupport/browsertest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statement/importer"
)

// response is one answer of the console, redirects not followed.
type response struct {
	code   int
	body   string
	header http.Header
}

// request sends one request to the worker with the given headers and, for
// a POST, the form.
func (b *testBundle) request(t *testing.T, method, path string, headers map[string]string, form url.Values) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: resp.StatusCode, body: string(data), header: resp.Header}
}

func basic(user, token string) map[string]string {
	return map[string]string{"Authorization": browsertest.BasicAuth(user, token)}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// formToken reads the form token of a story page.
func formToken(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no form token in the page:\n%.2000s", page)
	}
	return m[1]
}

const secretToken = "tok-S3cret-never-shown"

func TestConsoleRequiresTheTokenAndNeverShowsIt(t *testing.T) {
	t.Parallel()
	b := setup(t, secretToken, fakebank.Faults{}, nil)
	b.submit(t, "auth-1", "acc-a", 1000)
	b.waitState(t, "auth-1", settlement.Confirmed)

	paths := []string{"/console/", "/console/settlements", "/console/settlements?state=confirmed",
		"/console/settlement?id=auth-1", "/console/conflicts", "/console/static/console.css", "/console/no-such-page"}
	for _, p := range paths {
		for name, h := range map[string]map[string]string{
			"no credentials": nil,
			"wrong password": basic("alice", "guess"),
			"wrong bearer":   {"Authorization": "Bearer guess"},
		} {
			r := b.request(t, http.MethodGet, p, h, nil)
			if r.code != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("GET %s with %s = %d (WWW-Authenticate %q), want 401 with a Basic challenge", p, name, r.code, r.header.Get("WWW-Authenticate"))
			}
		}
		r := b.request(t, http.MethodGet, p, basic("alice", secretToken), nil)
		want := http.StatusOK
		if strings.Contains(p, "no-such-page") {
			want = http.StatusNotFound
		}
		if r.code != want {
			t.Errorf("GET %s as alice = %d, want %d\n%.500s", p, r.code, want, r.body)
		}
		if strings.HasSuffix(p, ".css") {
			continue
		}
		if !strings.Contains(r.body, "signed in as <b>alice</b>") || strings.Contains(r.body, "open-banner") {
			t.Errorf("GET %s as alice does not say who is signed in", p)
		}
		if strings.Contains(r.body, secretToken) || strings.Contains(r.header.Get("Location"), secretToken) {
			t.Errorf("GET %s shows the API token", p)
		}
	}
	// An action, which logs, then the logs.
	story := b.request(t, http.MethodGet, "/console/settlement?id=auth-1", basic("alice", secretToken), nil)
	r := b.request(t, http.MethodPost, "/console/settlement/note", basic("alice", secretToken),
		url.Values{"csrf": {formToken(t, story.body)}, "id": {"auth-1"}, "note": {"checked"}})
	if r.code != http.StatusSeeOther || strings.Contains(r.header.Get("Location"), secretToken) {
		t.Errorf("note = %d, Location %q", r.code, r.header.Get("Location"))
	}
	if logs := b.logs.String(); strings.Contains(logs, secretToken) || !strings.Contains(logs, "operator action") {
		t.Errorf("the logs show the token, or no operator action:\n%s", logs)
	}
}

func TestOpenConsoleSaysSoOnEveryPage(t *testing.T) {
	t.Parallel()
	b := setup(t, "", fakebank.Faults{}, nil)
	b.submit(t, "open-1", "acc-a", 1000)
	for _, p := range []string{"/console/", "/console/settlements", "/console/settlement?id=open-1", "/console/conflicts",
		"/console/settlement?id=nope", "/console/settlements?older=soon", "/console/nothing"} {
		r := b.request(t, http.MethodGet, p, nil, nil)
		if r.code == http.StatusUnauthorized || !strings.Contains(r.body, `id="open-banner"`) {
			t.Errorf("GET %s = %d without the open-console banner", p, r.code)
		}
	}
	// Actions need a name, typed into the form.
	story := b.request(t, http.MethodGet, "/console/settlement?id=open-1", nil, nil)
	form := url.Values{"csrf": {formToken(t, story.body)}, "id": {"open-1"}, "note": {"hello"}}
	if r := b.request(t, http.MethodPost, "/console/settlement/note", nil, form); r.code != http.StatusBadRequest {
		t.Errorf("note without a name = %d, want 400", r.code)
	}
	form.Set("operator", "carol")
	if r := b.request(t, http.MethodPost, "/console/settlement/note", nil, form); r.code != http.StatusSeeOther {
		t.Errorf("note as carol = %d %s", r.code, r.body)
	}
	if a := b.actions(t, "open-1"); len(a) != 1 || a[0].Operator != "carol" || a[0].Detail != "hello" {
		t.Errorf("actions = %+v", a)
	}
}

func TestActionsComeOnlyFromTheConsole(t *testing.T) {
	t.Parallel()
	b := setup(t, secretToken, fakebank.Faults{}, nil)
	b.submit(t, "act-1", "acc-a", 1000)
	alice := basic("alice", secretToken)
	aliceToken := formToken(t, b.request(t, http.MethodGet, "/console/settlement?id=act-1", alice, nil).body)
	bobToken := formToken(t, b.request(t, http.MethodGet, "/console/settlement?id=act-1", basic("bob", secretToken), nil).body)
	if aliceToken == bobToken {
		t.Fatal("alice and bob have the same form token")
	}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	note := func(token string) url.Values {
		return url.Values{"csrf": {token}, "id": {"act-1"}, "note": {"should not be recorded"}}
	}
	for _, c := range []struct {
		name    string
		method  string
		headers map[string]string
		form    url.Values
		want    int
	}{
		{"cross-site by Sec-Fetch-Site", http.MethodPost, with(alice, "Sec-Fetch-Site", "cross-site"), note(aliceToken), http.StatusForbidden},
		{"same-site by Sec-Fetch-Site", http.MethodPost, with(alice, "Sec-Fetch-Site", "same-site"), note(aliceToken), http.StatusForbidden},
		{"another Origin", http.MethodPost, with(alice, "Origin", "http://evil.example"), note(aliceToken), http.StatusForbidden},
		{"no form token", http.MethodPost, alice, note(""), http.StatusForbidden},
		{"another operator's form token", http.MethodPost, alice, note(bobToken), http.StatusForbidden},
		{"no operator name (Bearer)", http.MethodPost, map[string]string{"Authorization": "Bearer " + secretToken}, note(aliceToken), http.StatusForbidden},
		{"no credentials", http.MethodPost, nil, note(aliceToken), http.StatusUnauthorized},
		{"a GET", http.MethodGet, alice, nil, http.StatusNotFound},
	} {
		path := "/console/settlement/note"
		if c.method == http.MethodGet {
			path += "?" + note(aliceToken).Encode()
		}
		if r := b.request(t, c.method, path, c.headers, c.form); r.code != c.want {
			t.Errorf("%s: %d, want %d\n%.300s", c.name, r.code, c.want, r.body)
		}
	}
	if a := b.actions(t, "act-1"); len(a) != 0 {
		t.Fatalf("refused requests recorded actions: %+v", a)
	}
	// From the console itself: the browser says same-origin.
	ok := with(alice, "Sec-Fetch-Site", "same-origin", "Origin", b.base)
	r := b.request(t, http.MethodPost, "/console/settlement/note", ok, url.Values{"csrf": {aliceToken}, "id": {"act-1"}, "note": {"  looked at it  "}})
	if r.code != http.StatusSeeOther || !strings.Contains(r.header.Get("Location"), "/console/settlement?id=act-1&done=") {
		t.Fatalf("note = %d, Location %q\n%s", r.code, r.header.Get("Location"), r.body)
	}
	if r := b.request(t, http.MethodPost, "/console/settlement/note", ok, url.Values{"csrf": {aliceToken}, "id": {"act-1"}, "note": {" "}}); r.code != http.StatusBadRequest {
		t.Errorf("empty note = %d, want 400", r.code)
	}
	if r := b.request(t, http.MethodPost, "/console/settlement/note", ok, url.Values{"csrf": {aliceToken}, "id": {"nope"}, "note": {"x"}}); r.code != http.StatusNotFound {
		t.Errorf("note on an unknown settlement = %d, want 404", r.code)
	}
	a := b.actions(t, "act-1")
	if len(a) != 1 || a[0].Operator != "alice" || a[0].Action != inspect.OperatorNote || a[0].Detail != "looked at it" || !a[0].OK {
		t.Errorf("actions = %+v", a)
	}
}

func TestResolveNowIsTheResolversResolve(t *testing.T) {
	t.Parallel()
	// Every answer to a payment is lost, and nothing checks on its own for
	// an hour: the settlement stays uncertain until the operator acts.
	b := setup(t, secretToken, fakebank.Faults{DropResponseRate: 1}, func(c *worker.Config) {
		c.CheckInterval, c.MaxCheckInterval, c.SweepInterval, c.Lease = time.Hour, time.Hour, time.Hour, 2*time.Hour
	})
	b.submit(t, "res-1", "acc-a", 4200)
	b.waitState(t, "res-1", settlement.Uncertain)
	alice := basic("alice", secretToken)
	tok := formToken(t, b.request(t, http.MethodGet, "/console/settlement?id=res-1", alice, nil).body)
	r := b.request(t, http.MethodPost, "/console/settlement/resolve", alice, url.Values{"csrf": {tok}, "id": {"res-1"}})
	if r.code != http.StatusSeeOther {
		t.Fatalf("resolve = %d %s", r.code, r.body)
	}
	v := b.view(t, "res-1")
	if v.Settlement.State != settlement.Confirmed || v.Movement == nil || v.Movement.AmountCents != 4200 {
		t.Fatalf("after resolve now: %+v", v)
	}
	a := b.actions(t, "res-1")
	if len(a) != 1 || a[0].Action != inspect.OperatorResolve || !a[0].OK || !strings.HasPrefix(a[0].Result, "uncertain → confirmed") {
		t.Errorf("actions = %+v", a)
	}
	// The redirect shows it.
	page := b.request(t, http.MethodGet, r.header.Get("Location"), alice, nil)
	if !strings.Contains(page.body, `id="done"`) || !strings.Contains(page.body, "uncertain → confirmed") {
		t.Errorf("the story after the redirect does not say what was done:\n%.3000s", page.body)
	}
	// Again: nothing left to ask.
	r = b.request(t, http.MethodPost, "/console/settlement/resolve", alice, url.Values{"csrf": {tok}, "id": {"res-1"}})
	if a := b.actions(t, "res-1"); r.code != http.StatusSeeOther || len(a) != 2 || !strings.Contains(a[1].Result, "stays confirmed") {
		t.Errorf("second resolve = %d, actions %+v", r.code, a)
	}
	if r := b.request(t, http.MethodPost, "/console/settlement/resolve", alice, url.Values{"csrf": {tok}, "id": {"nope"}}); r.code != http.StatusNotFound {
		t.Errorf("resolve of an unknown settlement = %d, want 404", r.code)
	}
}

func TestPagesAnswerBadInputPolitely(t *testing.T) {
	t.Parallel()
	b := setup(t, "", fakebank.Faults{}, nil)
	for _, c := range []struct {
		path, want string
		code       int
	}{
		{"/console/settlements?older=soon", "older than", http.StatusBadRequest},
		{"/console/settlements?state=lost", "unknown state", http.StatusBadRequest},
		{"/console/settlements?after=garbage", "malformed cursor", http.StatusBadRequest},
		{"/console/settlement", "names none", http.StatusBadRequest},
		{"/console/settlement?id=%3Cscript%3E", "There is no settlement &#34;&lt;script&gt;&#34;", http.StatusNotFound},
		{"/console/conflicts?after=x", "not a number", http.StatusBadRequest},
		{"/console/static/", "", http.StatusNotFound},
	} {
		r := b.request(t, http.MethodGet, c.path, nil, nil)
		if r.code != c.code || !strings.Contains(r.body, c.want) {
			t.Errorf("GET %s = %d, want %d with %q\n%.400s", c.path, r.code, c.code, c.want, r.body)
		}
	}
}

func TestStatementsPanelAndUnmatchedLines(t *testing.T) {
	t.Parallel()
	b := setup(t, "", fakebank.Faults{}, nil)
	if r := b.request(t, http.MethodGet, "/console/", nil, nil); !strings.Contains(r.body, "No statement imported yet") {
		t.Errorf("overview before any import:\n%.3000s", r.body)
	}
	im := &importer.StatementImporter{DB: b.db.Pool, Accounts: []string{"DE89370400440532013000", "NL91ABNA0417164300"}}
	res, err := im.ImportFile(t.Context(), "../statement/testdata/camt053_v02.xml")
	if err != nil {
		t.Fatal(err)
	}
	r := b.request(t, http.MethodGet, "/console/", nil, nil)
	if !strings.Contains(r.body, `id="statement-imports"`) || !strings.Contains(r.body, "camt.053") {
		t.Errorf("overview after an import (%+v):\n%.4000s", res, r.body)
	}
	r = b.request(t, http.MethodGet, "/console/statements", nil, nil)
	if r.code != http.StatusOK || !strings.Contains(r.body, `id="lines"`) || !strings.Contains(r.body, "camt053_v02.xml") {
		t.Errorf("unmatched lines = %d:\n%.4000s", r.code, r.body)
	}
	if r := b.request(t, http.MethodGet, "/console/statements?after=x", nil, nil); r.code != http.StatusBadRequest {
		t.Errorf("bad cursor = %d", r.code)
	}
	// A line's counterparty, as the bank reports it, is shown.
	im.Accounts = append(im.Accounts, "acc-cp")
	if _, err := im.Import(t.Context(), "cp.sta", strings.NewReader(":20:CP\n:25:acc-cp\n:28C:1/1\n:60F:C300101EUR100,00\n"+
		":61:3001010101D15,00NTRFNONREF//B-1\n:86:/EREF/nobody-of-ours/IBAN/GB29NWBK60161331926819/NAME/Ada <Lovelace>\n"+
		":62F:C300101EUR85,00\n")); err != nil {
		t.Fatal(err)
	}
	r = b.request(t, http.MethodGet, "/console/statements", nil, nil)
	if !strings.Contains(r.body, "Ada &lt;Lovelace&gt; <code class=\"wrap small\">GB29NWBK60161331926819</code>") {
		t.Errorf("unmatched lines without the counterparty:\n%.6000s", r.body)
	}
}

// TestStoryShowsEventsAndAttempts: with a webhook sink that refuses the
// first attempt, the settlement story lists each outcome event, its
// delivery at the sink and every attempt, the failed one included.
func TestStoryShowsEventsAndAttempts(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rcv := eventstest.NewReceiver(t, func(n int, _ string) eventstest.Fault {
		if n == 1 {
			return eventstest.Fail500
		}
		return eventstest.OK
	}, secret)
	b := setup(t, "", fakebank.Faults{SettleDelayMS: 10}, func(c *worker.Config) {
		c.EventsURLs, c.EventsSecret, c.EventsRetryMin = []string{rcv.URL()}, secret, 10*time.Millisecond
	})
	b.submit(t, "ev-story", "acc-a", 990)
	b.waitState(t, "ev-story", settlement.Confirmed)
	if !rcv.Wait(time.Minute, func(m []eventstest.Message) bool { return len(m) >= 3 }) {
		t.Fatalf("the receiver has %d events", len(rcv.Accepted()))
	}
	settletest.Wait(t, "the story to show the events delivered", func() (bool, string) {
		r := b.request(t, http.MethodGet, "/console/settlement?id=ev-story", nil, nil)
		page := r.body
		if r.code != http.StatusOK {
			return false, fmt.Sprintf("%d %.500s", r.code, page)
		}
		for _, want := range []string{"ev-story:1", "settlement.pending", "ev-story:3", "settlement.confirmed", rcv.URL(), "delivered", "receiver answered 500"} {
			if !strings.Contains(page, want) {
				return false, "no " + want
			}
		}
		return true, ""
	})
}

// TestFormKeyIsNotTheToken (issue 32, item 9): the key of the form tokens
// is a random secret of each console, not a function of the API token: a
// second console with the same token gives the same operator another form
// token and refuses the first console's.
func TestFormKeyIsNotTheToken(t *testing.T) {
	t.Parallel()
	b := setup(t, secretToken, fakebank.Faults{}, nil)
	b.submit(t, "key-1", "acc-a", 1000)
	alice := basic("alice", secretToken)
	first := formToken(t, b.request(t, http.MethodGet, "/console/settlement?id=key-1", alice, nil).body)

	cons, err := console.New(console.Config{DB: b.db.Pool, Resolver: &reconcile.Resolver{}, APIToken: secretToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(cons)
	t.Cleanup(srv.Close)
	other := &testBundle{db: b.db, base: srv.URL, token: secretToken}
	second := formToken(t, other.request(t, http.MethodGet, "/console/settlement?id=key-1", alice, nil).body)
	if first == second {
		t.Fatal("two consoles with one API token give alice the same form token: the form key is derived from the token")
	}
	if r := other.request(t, http.MethodPost, "/console/settlement/note", alice,
		url.Values{"csrf": {first}, "id": {"key-1"}, "note": {"from the other console"}}); r.code != http.StatusForbidden {
		t.Errorf("the first console's form at the second: %d, want 403", r.code)
	}
}

// TestOperatorsHaveTheirOwnCredentials (issue 32, item 11): with
// --operators-file each operator signs in with their own name and token;
// the shared API token, another operator's token or an unlisted name does
// not open the console, and the action is recorded with the verified name
// and the address it came from. Without the file the name given with the
// API token is recorded as self-asserted, with its address too.
func TestOperatorsHaveTheirOwnCredentials(t *testing.T) {
	t.Parallel()
	const aliceTok, bobTok = "alice-own-token-0123456789", "bob-own-token-0123456789"
	hash := func(tok string) string {
		s := sha256.Sum256([]byte(tok))
		return hex.EncodeToString(s[:])
	}
	ops, err := auth.ParseOperators(strings.NewReader("alice:" + hash(aliceTok) + "\nbob:" + hash(bobTok) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, secretToken, fakebank.Faults{}, func(c *worker.Config) { c.Operators = ops })
	b.submit(t, "op-1", "acc-a", 1000)
	for _, creds := range []map[string]string{
		basic("alice", secretToken), basic("alice", bobTok), basic("mallory", aliceTok), basic("", aliceTok),
		{"Authorization": "Bearer " + aliceTok}, nil,
	} {
		if r := b.request(t, http.MethodGet, "/console/settlement?id=op-1", creds, nil); r.code != http.StatusUnauthorized {
			t.Errorf("GET with %v = %d, want 401", creds, r.code)
		}
	}
	alice := basic("alice", aliceTok)
	story := b.request(t, http.MethodGet, "/console/settlement?id=op-1", alice, nil)
	if story.code != http.StatusOK || !strings.Contains(story.body, "signed in as <b>alice</b>") || strings.Contains(story.body, "not verified") {
		t.Fatalf("GET as alice with her own token = %d\n%.400s", story.code, story.body)
	}
	if r := b.request(t, http.MethodPost, "/console/settlement/note", alice,
		url.Values{"csrf": {formToken(t, story.body)}, "id": {"op-1"}, "note": {"verified note"}}); r.code != http.StatusSeeOther {
		t.Fatalf("note as alice = %d %.300s", r.code, r.body)
	}
	a := b.actions(t, "op-1")
	if len(a) != 1 || a[0].Operator != "alice" || !a[0].OperatorVerified || a[0].SourceAddr != "127.0.0.1" {
		t.Fatalf("actions = %+v, want alice, verified, from 127.0.0.1", a)
	}
	if page := b.request(t, http.MethodGet, "/console/settlement?id=op-1", alice, nil).body; !strings.Contains(page, "from 127.0.0.1") || strings.Contains(page, "(self-asserted)") {
		t.Errorf("the story does not show the verified action with its address")
	}
	// The API keeps the API token.
	if code, _ := settletest.Get(t, b.base+"/v1/settlements/op-1", "Bearer "+secretToken); code != http.StatusOK {
		t.Errorf("API with the API token = %d", code)
	}

	// Without --operators-file: the name is the one given, self-asserted.
	s := setup(t, secretToken, fakebank.Faults{}, nil)
	s.submit(t, "op-2", "acc-a", 1000)
	eve := basic("eve-claims-to-be-alice", secretToken)
	page := s.request(t, http.MethodGet, "/console/settlement?id=op-2", eve, nil).body
	if !strings.Contains(page, "not verified") {
		t.Errorf("a console without operators does not say the name is not verified")
	}
	if r := s.request(t, http.MethodPost, "/console/settlement/note", eve,
		url.Values{"csrf": {formToken(t, page)}, "id": {"op-2"}, "note": {"asserted note"}}); r.code != http.StatusSeeOther {
		t.Fatalf("note = %d %.300s", r.code, r.body)
	}
	a = s.actions(t, "op-2")
	if len(a) != 1 || a[0].OperatorVerified || a[0].SourceAddr != "127.0.0.1" {
		t.Fatalf("actions = %+v, want self-asserted, from 127.0.0.1", a)
	}
	if page := s.request(t, http.MethodGet, "/console/settlement?id=op-2", eve, nil).body; !strings.Contains(page, "(self-asserted)") || !strings.Contains(page, "from 127.0.0.1") {
		t.Errorf("the story does not mark the action self-asserted with its address")
	}
}

// TestStoryCapsConflicts (issue 32, item 14): a producer can send any
// number of conflicting payloads under one id; the story page and
// `settle reconcile show` hold the first 20 and say how many more there
// are.
func TestStoryCapsConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t, secretToken, fakebank.Faults{}, nil)
	b.submit(t, "cf-1", "acc-a", 1000)
	for i := 1; i <= 25; i++ {
		if code := b.submit(t, "cf-1", "acc-a", int64(1000+i)); code != http.StatusConflict {
			t.Fatalf("conflicting payload %d = %d, want 409", i, code)
		}
	}
	page := b.request(t, http.MethodGet, "/console/settlement?id=cf-1", basic("alice", secretToken), nil)
	if n := strings.Count(page.body, `<div class="conflict">`); page.code != http.StatusOK || n != inspect.MaxStoryConflicts || !strings.Contains(page.body, "5 more conflicts") {
		t.Errorf("story page = %d with %d conflicts shown, want %d and \"5 more conflicts\"", page.code, n, inspect.MaxStoryConflicts)
	}
	st, err := (&inspect.Inspector{DB: b.db.Pool}).Show(t.Context(), "cf-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Conflicts) != inspect.MaxStoryConflicts || st.ConflictsTotal != 25 {
		t.Errorf("Show: %d conflicts of %d, want %d of 25", len(st.Conflicts), st.ConflictsTotal, inspect.MaxStoryConflicts)
	}
	more := 0
	for _, e := range st.Timeline {
		if e.Kind == "conflict" && strings.Contains(e.Text, "5 more conflicts") {
			more++
		}
	}
	if more != 1 {
		t.Errorf("the timeline does not say once that 5 more conflicts are not shown")
	}
}
