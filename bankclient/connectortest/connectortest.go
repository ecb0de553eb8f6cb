// Package connectortest is the conformance suite every bank connector must
// pass (README "Connecting your bank"): run against a bank of the
// connector's kind (the fakebank's profile of it), it checks that the
// connector does what its Capabilities declare, classifies answers by type,
// replays under the same key without paying twice, keeps the reference it
// is given and refuses what it cannot do without sending anything.
//
// It is test support: nothing in settle's binaries may import it.
package connectortest

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
)

// Target is a connector and how to start a bank of its kind.
type Target struct {
	Connector bankclient.Connector
	// Profile is the fakebank profile serving the connector's API.
	Profile string
	// Options are extra client options (credentials, signing keys).
	Options bankclient.Options
	// Bank are extra bank options (the key the obie profile verifies
	// signatures with); the suite sets Seed, Faults and Profile.
	Bank fakebank.Options
	// Request returns a payment request the bank accepts for reference.
	Request func(reference string) bankclient.PaymentRequest
	// SignWebhook, when the connector takes webhooks, signs body the way
	// the bank does; the suite checks that Connector.VerifyWebhook accepts
	// it and refuses a tampered or stale copy.
	SignWebhook func(body []byte, secret string, at time.Time) http.Header
	// WebhookBody is a webhook naming the payment p, in the bank's format.
	WebhookBody func(p bankclient.Payment) []byte
}

// bundle is one bank of the target's kind and a client of it.
type bundle struct {
	bank   *fakebank.Bank
	client bankclient.Bank
	caps   bankclient.Capabilities
	tg     Target
}

func start(t *testing.T, tg Target, faults fakebank.Faults) bundle {
	t.Helper()
	bo := tg.Bank
	bo.Seed, bo.Faults, bo.Profile = 5, faults, tg.Profile
	bank, url := fakebanktest.NewServer(t, bo)
	opts := tg.Options
	opts.Timeout = 2 * time.Second
	opts.Retry = bankclient.RetryPolicy{MaxAttempts: 1, RateLimitWait: time.Millisecond}
	client, err := tg.Connector.New(url, opts)
	if err != nil {
		t.Fatalf("%s: New: %v", tg.Connector.Name, err)
	}
	return bundle{bank: bank, client: client, caps: tg.Connector.Capabilities, tg: tg}
}

// request returns the target's request for ref, and when the bank needs a
// consent first (Capabilities.Consent) the consent too: created under
// bankclient.ConsentKeyFor(ref) with the bank's faults off (they are meant
// for the payment), it must be authorised at once (the bank's
// consent_delay_ms is 0).
func (b bundle) request(t *testing.T, ref string) bankclient.PaymentRequest {
	t.Helper()
	req := b.tg.Request(ref)
	if !b.caps.Consent {
		return req
	}
	cs, ok := b.client.(bankclient.Consenter)
	if !ok {
		t.Fatal("declares Consent but does not implement bankclient.Consenter")
	}
	faults := b.bank.Faults()
	if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
		t.Fatal(err)
	}
	con, err := cs.CreateConsent(context.Background(), bankclient.ConsentKeyFor(ref), req)
	if err := b.bank.SetFaults(faults); err != nil {
		t.Fatal(err)
	}
	if err != nil || con.ID == "" || con.Status != bankclient.ConsentAuthorised {
		t.Fatalf("the consent to %s: %+v, %v; want one authorised at once", ref, con, err)
	}
	req.ConsentID = con.ID
	if b.caps.Authorisation {
		req.Grant = b.authorise(t, con.ID, "state-"+ref)
	}
	return req
}

// testRedirect is the redirect URI the suite's authorisations name; the
// account holder's browser is not followed there: the suite reads the
// code from the bank's redirect.
const testRedirect = "http://127.0.0.1:1/callback"

// authorise runs the account holder's authorisation of consent id (the
// bank decides at once: consent_delay_ms is 0) and returns the sealed
// grant of its token, with the bank's faults off.
func (b bundle) authorise(t *testing.T, id, state string) string {
	t.Helper()
	au, ok := b.client.(bankclient.Authoriser)
	if !ok {
		t.Fatal("declares Authorisation but does not implement bankclient.Authoriser")
	}
	link, err := au.AuthorisationURL(id, state, testRedirect)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := browser.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	back, err := url.Parse(res.Header.Get("Location"))
	if err != nil || !strings.HasPrefix(back.String(), testRedirect) || back.Query().Get("state") != state || back.Query().Get("code") == "" {
		t.Fatalf("authorising consent %s: %d to %q, want a redirect with a code and the state", id, res.StatusCode, res.Header.Get("Location"))
	}
	faults := b.bank.Faults()
	if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
		t.Fatal(err)
	}
	g, err := au.ExchangeCode(context.Background(), id, state, back.Query().Get("code"), testRedirect)
	if err := b.bank.SetFaults(faults); err != nil {
		t.Fatal(err)
	}
	if err != nil || g.Sealed == "" {
		t.Fatalf("exchanging the code of consent %s: %+v, %v", id, g, err)
	}
	return g.Sealed
}

// Run runs the whole suite against tg, each check a parallel subtest on a
// bank of its own.
func Run(t *testing.T, tg Target) {
	t.Run("SendReplayLookups", func(t *testing.T) { t.Parallel(); sendReplayLookups(t, tg) })
	t.Run("UnknownPayment", func(t *testing.T) { t.Parallel(); unknownPayment(t, tg) })
	t.Run("Ambiguity", func(t *testing.T) { t.Parallel(); ambiguity(t, tg) })
	t.Run("RateLimit", func(t *testing.T) { t.Parallel(); rateLimit(t, tg) })
	t.Run("Reference", func(t *testing.T) { t.Parallel(); reference(t, tg) })
	if tg.Connector.Capabilities.Consent {
		t.Run("Consent", func(t *testing.T) { t.Parallel(); consent(t, tg) })
	}
	if tg.Connector.VerifyWebhook != nil {
		t.Run("Webhook", func(t *testing.T) { t.Parallel(); webhook(t, tg) })
	}
}

// sendReplayLookups: a send is accepted; the identical request under the
// same key names the same payment and pays nothing more; every lookup the
// capabilities declare finds it, with a status of the normalised set; the
// others are refused without a request.
func sendReplayLookups(t *testing.T, tg Target) {
	b := start(t, tg, fakebank.Faults{SettleDelayMS: 1})
	ctx := context.Background()
	ref := "conf-send-1"
	key := bankclient.KeyFor(ref)
	req := b.request(t, ref)
	first, err := b.client.Send(ctx, key, req)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	p := first.Payment
	if p.ID == "" || !p.Status.Valid() || p.Reference != ref || p.AmountCents != req.AmountCents || p.Currency != req.Currency {
		t.Fatalf("Send answered %+v for %+v", p, req)
	}
	again, err := b.client.Send(ctx, key, req)
	if err != nil || again.Payment.ID != p.ID {
		t.Fatalf("the replay named %+v (%v), want payment %s again", again.Payment, err, p.ID)
	}
	if st := b.bank.Stats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 {
		t.Fatalf("after a send and its replay the bank holds %+v, want one payment", st)
	}
	before := b.bank.Traffic().Requests
	check := func(what string, got bankclient.Payment, err error) {
		t.Helper()
		if err != nil || got.ID != p.ID || !got.Status.Valid() || got.Reference != ref {
			t.Errorf("%s: %+v, %v; want payment %s", what, got, err, p.ID)
		}
	}
	got, err := b.client.StatusByKey(ctx, key)
	if b.caps.LookupByKey {
		check("StatusByKey", got, err)
	} else if !errors.Is(err, bankclient.ErrUnsupported) {
		t.Errorf("StatusByKey at a bank that does not offer it: %v, want ErrUnsupported", err)
	}
	if l, ok := b.client.(bankclient.IDLookup); ok {
		got, err := l.StatusByID(ctx, p.ID)
		if b.caps.LookupByID {
			check("StatusByID", got, err)
		}
	} else if b.caps.LookupByID {
		t.Error("declares LookupByID but does not implement bankclient.IDLookup")
	}
	if l, ok := b.client.(bankclient.ReferenceLookup); ok {
		got, err := l.StatusByReference(ctx, ref)
		if b.caps.LookupByReference {
			check("StatusByReference", got, err)
		}
	} else if b.caps.LookupByReference {
		t.Error("declares LookupByReference but does not implement bankclient.ReferenceLookup")
	}
	if b.caps.Search {
		ps, err := bankclient.AllPayments(ctx, b.client)
		if err != nil || len(ps) != 1 || ps[0].ID != p.ID || ps[0].Reference != ref {
			t.Errorf("the list holds %+v (%v), want payment %s", ps, err, p.ID)
		}
	}
	if !b.caps.LookupByKey && b.bank.Traffic().Requests == before {
		t.Log("lookups sent no request at all") // fine when none is offered
	}
}

// unknownPayment: a key the bank never saw is ErrNotFound by key; an id
// it never issued is ErrPaymentNotFound.
func unknownPayment(t *testing.T, tg Target) {
	b := start(t, tg, fakebank.Faults{})
	ctx := context.Background()
	if b.caps.LookupByKey {
		if _, err := b.client.StatusByKey(ctx, bankclient.KeyFor("never-sent")); !bankclient.IsNotFound(err) {
			t.Errorf("StatusByKey of an unknown key: %v, want ErrNotFound", err)
		}
	}
	if l, ok := b.client.(bankclient.IDLookup); ok && b.caps.LookupByID {
		if _, err := l.StatusByID(ctx, "pay_999999999999"); !errors.Is(err, bankclient.ErrPaymentNotFound) {
			t.Errorf("StatusByID of an unknown id: %v, want ErrPaymentNotFound", err)
		}
	}
	if l, ok := b.client.(bankclient.ReferenceLookup); ok && b.caps.LookupByReference {
		if _, err := l.StatusByReference(ctx, "never-sent"); !errors.Is(err, bankclient.ErrPaymentNotFound) {
			t.Errorf("StatusByReference of an unknown reference: %v, want ErrPaymentNotFound", err)
		}
	}
}

// ambiguity: a 5xx before processing and a lost response are ambiguous,
// never a rejection; the lost response executed the payment once; a
// definitive rejection is one.
func ambiguity(t *testing.T, tg Target) {
	ctx := context.Background()
	b := start(t, tg, fakebank.Faults{FailBeforeRate: 1})
	if _, err := b.client.Send(ctx, bankclient.KeyFor("conf-5xx"), b.request(t, "conf-5xx")); !bankclient.IsAmbiguous(err) || bankclient.IsRejected(err) {
		t.Errorf("a 5xx before processing: %v, want ambiguous", err)
	}
	b = start(t, tg, fakebank.Faults{DropResponseRate: 1})
	if _, err := b.client.Send(ctx, bankclient.KeyFor("conf-drop"), b.request(t, "conf-drop")); !bankclient.IsAmbiguous(err) {
		t.Errorf("a lost response: %v, want ambiguous", err)
	}
	if st := b.bank.Stats(); st.Payments != 1 {
		t.Errorf("a lost response left %d payments, want the one executed", st.Payments)
	}
	// A bank refuses definitively either by refusing the request or, as
	// Open Banking does, by creating the payment as rejected: a failed
	// payment.
	b = start(t, tg, fakebank.Faults{RejectRate: 1})
	res, err := b.client.Send(ctx, bankclient.KeyFor("conf-rej"), b.request(t, "conf-rej"))
	refused := bankclient.IsRejected(err) && !bankclient.IsAmbiguous(err)
	failed := err == nil && res.Payment.Status == bankclient.StatusFailed
	if !refused && !failed {
		t.Errorf("a definitive rejection: %+v, %v; want rejected, or a failed payment", res.Payment, err)
	}
}

// rateLimit: a 429 is ambiguous and carries the bank's Retry-After.
func rateLimit(t *testing.T, tg Target) {
	b := start(t, tg, fakebank.Faults{RateLimitPerS: 0.001})
	ctx := context.Background()
	req0, req1 := b.request(t, "conf-rl-0"), b.request(t, "conf-rl-1")
	_, _ = b.client.Send(ctx, bankclient.KeyFor("conf-rl-0"), req0) // uses the one token
	_, err := b.client.Send(ctx, bankclient.KeyFor("conf-rl-1"), req1)
	var ae *bankclient.AmbiguousError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests || ae.RetryAfter <= 0 {
		t.Errorf("a 429: %v, want ambiguous with the Retry-After", err)
	}
}

// reference: the connector's short form of an id its bank could not carry
// is accepted and comes back unchanged.
func reference(t *testing.T, tg Target) {
	b := start(t, tg, fakebank.Faults{})
	id := strings.Repeat("é", 64) + "/" + strings.Repeat("x", 200)
	ref := b.caps.Reference(id)
	if b.caps.Reference(id) != ref {
		t.Fatal("Reference is not stable")
	}
	res, err := b.client.Send(context.Background(), bankclient.KeyFor(id), b.request(t, ref))
	if err != nil || res.Payment.Reference != ref {
		t.Errorf("the short reference %q: %+v, %v", ref, res.Payment, err)
	}
}

// consent, for a bank that needs consents: the identical consent request
// under the same key names the same consent and creates no other; the
// consent is found by its id, an id the bank never issued is
// ErrPaymentNotFound; a 5xx is ambiguous, never a refusal.
func consent(t *testing.T, tg Target) {
	b := start(t, tg, fakebank.Faults{})
	cs, ok := b.client.(bankclient.Consenter)
	if !ok {
		t.Fatal("declares Consent but does not implement bankclient.Consenter")
	}
	ctx := context.Background()
	ref := "conf-consent-1"
	req := tg.Request(ref)
	first, err := cs.CreateConsent(ctx, bankclient.ConsentKeyFor(ref), req)
	if err != nil || first.ID == "" || first.Status == bankclient.ConsentUnknown {
		t.Fatalf("CreateConsent: %+v, %v", first, err)
	}
	again, err := cs.CreateConsent(ctx, bankclient.ConsentKeyFor(ref), req)
	if err != nil || again.ID != first.ID {
		t.Errorf("the consent's replay: %+v, %v; want consent %s", again, err, first.ID)
	}
	got, err := cs.ConsentByID(ctx, first.ID)
	if err != nil || got.ID != first.ID || got.Status == bankclient.ConsentUnknown {
		t.Errorf("ConsentByID: %+v, %v", got, err)
	}
	if _, err := cs.ConsentByID(ctx, "cns_999999999999"); !errors.Is(err, bankclient.ErrPaymentNotFound) {
		t.Errorf("ConsentByID of an unknown id: %v, want ErrPaymentNotFound", err)
	}
	if st := b.bank.Stats(); st.Payments != 0 {
		t.Errorf("consents made %d payments", st.Payments)
	}
	b = start(t, tg, fakebank.Faults{FailBeforeRate: 1})
	cs = b.client.(bankclient.Consenter)
	if _, err := cs.CreateConsent(ctx, bankclient.ConsentKeyFor(ref), req); !bankclient.IsAmbiguous(err) || bankclient.IsRejected(err) {
		t.Errorf("a 5xx on the consent: %v, want ambiguous", err)
	}
}

// webhook: a hint signed as the bank signs it verifies and names the
// payment; a tampered or stale one does not.
func webhook(t *testing.T, tg Target) {
	if tg.SignWebhook == nil || tg.WebhookBody == nil {
		t.Fatalf("%s verifies webhooks but the target cannot sign one", tg.Connector.Name)
	}
	const secret = "whsec_conformance" //nolint:gosec // G101: a test secret the suite signs and verifies with
	p := bankclient.Payment{ID: "pay_000000000007", Reference: "conf-hook", IdempotencyKey: bankclient.KeyFor("conf-hook"), Status: bankclient.StatusSettled}
	body := tg.WebhookBody(p)
	now := time.Now()
	h, err := tg.Connector.VerifyWebhook(tg.SignWebhook(body, secret, now), body, secret, now)
	if err != nil || (h.PaymentID != p.ID && h.Reference != p.Reference && h.Key != p.IdempotencyKey) {
		t.Errorf("a good webhook: %+v, %v", h, err)
	}
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)/2] ^= 1
	if _, err := tg.Connector.VerifyWebhook(tg.SignWebhook(body, secret, now), tampered, secret, now); err == nil {
		t.Error("a tampered webhook verifies")
	}
	if _, err := tg.Connector.VerifyWebhook(tg.SignWebhook(body, secret, now.Add(-time.Hour)), body, secret, now); err == nil {
		t.Error("an hour-old webhook verifies")
	}
	if _, err := tg.Connector.VerifyWebhook(tg.SignWebhook(body, "other", now), body, secret, now); err == nil {
		t.Error("a webhook signed with another secret verifies")
	}
	replays(t, tg, body, secret, now)
}

// replays: an old signed header given a fresh t= beside its own, wherever
// it goes, is refused as a bad signature: one parser reads the timestamp
// the tolerance checks and the one the HMAC covers, and two are no header.
func replays(t *testing.T, tg Target, body []byte, secret string, now time.Time) {
	old := now.Add(-time.Hour)
	var name string
	for k := range tg.SignWebhook(body, secret, old) {
		name = k
	}
	signed := tg.SignWebhook(body, secret, old).Get(name)
	oldT, sigs, _ := strings.Cut(signed, ",")
	fresh := "t=" + strconv.FormatInt(now.Unix(), 10)
	for _, forged := range []string{
		fresh + "," + signed,
		signed + "," + fresh,
		oldT + "," + fresh + "," + sigs,
		fresh + ", " + signed,
		" " + fresh + " ," + signed,
		fresh + "," + fresh + "," + sigs,
		oldT + "," + signed,
		signed + ",t=",
		"t=," + signed,
		"t=" + strconv.FormatInt(old.Unix(), 10) + "," + oldT + "," + sigs,
	} {
		h := http.Header{}
		h.Set(name, forged)
		if _, err := tg.Connector.VerifyWebhook(h, body, secret, now); !errors.Is(err, bankclient.ErrWebhookSignature) {
			t.Errorf("%s: %q: %v, want %v", name, forged, err, bankclient.ErrWebhookSignature)
		}
	}
	// The fresh header alone is still good.
	h := tg.SignWebhook(body, secret, now)
	if _, err := tg.Connector.VerifyWebhook(h, body, secret, now); err != nil {
		t.Errorf("the fresh header %q: %v", h.Get(name), err)
	}
}
