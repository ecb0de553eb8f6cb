package obie_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// TestTokenKeyRequired: the connector will not start without a token key,
// and says so in one line naming both ways to give it.
func TestTokenKeyRequired(t *testing.T) {
	t.Parallel()
	_, err := obie.New("http://127.0.0.1:1", bankclient.Options{SigningKeyFile: keyFile(t)}, obie.Config{})
	if !errors.Is(err, obie.ErrNoTokenKey) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), obie.EnvTokenKey) || !strings.Contains(err.Error(), obie.EnvTokenKeyFile) {
		t.Fatalf("New without a token key: %v", err)
	}
	if _, err := obie.New("http://127.0.0.1:1", bankclient.Options{SigningKeyFile: keyFile(t)}, obie.Config{TokenKey: "c2hvcnQ="}); err == nil || !strings.Contains(err.Error(), "32") {
		t.Fatalf("New with a short token key: %v", err)
	}
}

// TestAuthorisationGrant runs the account holder's authorisation against
// the obie profile: the link carries PKCE and the consent, the code is
// exchanged once, the grant is sealed (the token appears nowhere in it and
// it opens only for its own consent and key), the payment is made with it
// and refused without it, and an expired token is refreshed.
func TestAuthorisationGrant(t *testing.T) {
	t.Parallel()
	clock := settletest.NewManualClock(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	bank, u := fakebanktest.NewServer(t, fakebank.Options{Profile: "obie", TokenTTL: 2 * time.Minute, Now: clock.Now})
	c := newClient(t, u, bankclient.Options{Retry: oneAttempt})
	ctx := context.Background()
	req := request("auth-1")
	con, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor("auth-1"), req)
	if err != nil {
		t.Fatal(err)
	}
	req.ConsentID = con.ID

	const redirect = "http://127.0.0.1:9/console/authorise/callback"
	link, err := c.AuthorisationURL(con.ID, "state-1", redirect)
	if err != nil {
		t.Fatal(err)
	}
	lu, _ := url.Parse(link)
	q := lu.Query()
	if lu.Path != "/authorize" || q.Get("openbanking_intent_id") != con.ID || q.Get("code_challenge_method") != "S256" ||
		len(q.Get("code_challenge")) != 43 || q.Get("state") != "state-1" || q.Get("redirect_uri") != redirect {
		t.Fatalf("link %s", link)
	}
	browser := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := browser.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	back, _ := url.Parse(res.Header.Get("Location"))
	code := back.Query().Get("code")

	// Without the grant the payment is refused: the configured token is
	// not the account holder's.
	if _, err := c.Send(ctx, "pay-auth-1", req); !bankclient.IsUnauthorized(err) {
		t.Fatalf("payment without the grant: %v, want refused for its credentials", err)
	}
	// A verifier of another state does not exchange the code.
	if _, err := c.ExchangeCode(ctx, con.ID, "state-forged", code, redirect); !bankclient.IsRejected(err) {
		t.Fatalf("exchange under another state: %v, want a refusal", err)
	}
	g, err := c.ExchangeCode(ctx, con.ID, "state-1", code, redirect)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.Sealed, obie.SealPrefix) || !g.Refreshable || g.ExpiresAt.IsZero() || strings.Contains(g.Sealed, code) {
		t.Fatalf("grant %+v", g)
	}
	if _, err := c.ExchangeCode(ctx, con.ID, "state-1", code, redirect); !bankclient.IsRejected(err) {
		t.Fatalf("the code again: %v, want a refusal", err)
	}
	// Sealed for its consent and key only.
	other := request("auth-2")
	other.ConsentID, other.Grant = "cns_other", g.Sealed
	if _, err := c.Send(ctx, "pay-auth-2", other); !errors.Is(err, obie.ErrGrantSealed) {
		t.Fatalf("the grant under another consent: %v", err)
	}
	c2, err := obie.New(u, bankclient.Options{SigningKeyFile: keyFile(t), Token: "x", Retry: oneAttempt},
		obie.Config{TokenKey: "YW5vdGhlci10b2tlbi1rZXktb2YtMzItYnl0ZXMhISE="})
	if err != nil {
		t.Fatal(err)
	}
	withGrant := req
	withGrant.Grant = g.Sealed
	if _, err := c2.Send(ctx, "pay-auth-1", withGrant); !errors.Is(err, obie.ErrGrantSealed) {
		t.Fatalf("the grant under another token key: %v", err)
	}
	if st := bank.Stats(); st.Payments != 0 {
		t.Fatalf("stats %+v: a refused payment was made", st)
	}

	if _, err := c.Send(ctx, "pay-auth-1", withGrant); err != nil {
		t.Fatalf("payment with the grant: %v", err)
	}
	clock.Advance(3 * time.Minute)
	if _, err := c.Send(ctx, "pay-auth-1", withGrant); !bankclient.IsUnauthorized(err) {
		t.Fatalf("replay with an expired token: %v, want refused for its credentials", err)
	}
	g2, err := c.RefreshGrant(ctx, con.ID, g)
	if err != nil {
		t.Fatal(err)
	}
	withGrant.Grant = g2.Sealed
	if res, err := c.Send(ctx, "pay-auth-1", withGrant); err != nil || res.Payment.ID == "" {
		t.Fatalf("replay with the refreshed grant: %+v, %v", res, err)
	}
	if st := bank.Stats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 {
		t.Fatalf("stats %+v, want one payment", st)
	}
}
