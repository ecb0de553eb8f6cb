package sim

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/reconcile"
)

// The account holder's authorisation at a consent bank whose payments are
// made with the account holder's own token (Caps.Authorisation, as Open
// Banking's authorization code grant): the customer who decides a consent
// does so by opening the link the engine lists, at decideAt; approving
// sends them back with a code (the consent is Authorised from then on),
// rejecting with access_denied (Rejected). The engine exchanges the code
// (PKCE) for a token that lives simTokenTTL and is refreshed; the bank takes
// a payment only with a live token of its own consent, answering 401 (not
// definitive, as the connector classifies it) otherwise. The token
// endpoint has the faults of a status call, and loses an answer after
// issuing the token at DropResponse: the code is spent, the customer opens
// the link again.

// simTokenTTL is how long an access token lives at the simulated bank.
const simTokenTTL = time.Hour

// sealPrefix marks the simulated bank's grants (it seals nothing: the
// connector's sealing is tested in bankclient/obie).
const sealPrefix = "v1.sim."

// simCode is a code the bank issued.
type simCode struct {
	consent     *simConsent
	challenge   string
	redirectURI string
	used        bool
}

// simToken is an access or refresh token the bank issued.
type simToken struct {
	consent   *simConsent
	refresh   bool
	expiresAt time.Time
}

var _ bankclient.Authoriser = (*Bank)(nil)

// simVerifier is the PKCE verifier of an authorisation (the simulated
// connector derives it from the consent and the state, as bankclient/obie
// does with its key).
func simVerifier(consentID, state string) string { return "verifier-" + consentID + "-" + state }

func s256(v string) string {
	h := sha256.Sum256([]byte(v))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// AuthorisationURL implements bankclient.Authoriser.
func (b *Bank) AuthorisationURL(consentID, state, redirectURI string) (string, error) {
	q := url.Values{"openbanking_intent_id": {consentID}, "state": {state}, "redirect_uri": {redirectURI},
		"code_challenge": {s256(simVerifier(consentID, state))}, "code_challenge_method": {"S256"}}
	return "https://bank.sim/authorize?" + q.Encode(), nil
}

// Visit is the customer opening link at now: the query the bank sends them
// back with (code or error, and state), or nil when they do not act yet
// (before decideAt, or never: abandoned).
func (b *Bank) Visit(link string) url.Values {
	u, err := url.Parse(link)
	if err != nil {
		return nil
	}
	q := u.Query()
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	c := b.consentByID(q.Get("openbanking_intent_id"))
	back := url.Values{"state": {q.Get("state")}}
	if c == nil {
		back.Set("error", "invalid_request")
		return back
	}
	switch st := c.status(now); {
	case st == bankclient.ConsentConsumed:
		back.Set("error", "invalid_request")
		return back
	case st == bankclient.ConsentRejected:
		back.Set("error", "access_denied")
		return back
	case st == bankclient.ConsentAwaiting && (c.abandoned || now.Before(c.decideAt)):
		return nil
	case st == bankclient.ConsentAwaiting && c.rejected:
		c.rejectedAt = now
		b.logf("customer rejected consent %s", c.id)
		back.Set("error", "access_denied")
		return back
	}
	if c.authorisedAt.IsZero() {
		c.authorisedAt = now
	}
	b.codeSeq++
	code := "code-" + strconv.Itoa(b.codeSeq)
	b.codes[code] = &simCode{consent: c, challenge: q.Get("code_challenge"), redirectURI: q.Get("redirect_uri")}
	b.logf("customer authorised consent %s: %s", c.id, code)
	back.Set("code", code)
	return back
}

// ExchangeCode implements bankclient.Authoriser with one request (a code is
// spent by its first use).
func (b *Bank) ExchangeCode(ctx context.Context, consentID, state, code, redirectURI string) (bankclient.Grant, error) {
	return b.tokenCall(ctx, bankclient.OpToken, func(now time.Time) (*simConsent, error) {
		c := b.codes[code]
		switch {
		case c == nil || c.used:
			return nil, &bankclient.RejectedError{StatusCode: http.StatusBadRequest, Code: "invalid_grant", Reason: "unknown or used code"}
		case c.consent.id != consentID || c.redirectURI != redirectURI || c.challenge != s256(simVerifier(consentID, state)):
			return nil, &bankclient.RejectedError{StatusCode: http.StatusBadRequest, Code: "invalid_grant", Reason: "PKCE or redirect_uri mismatch"}
		}
		c.used = true
		if st := c.consent.status(now); st != bankclient.ConsentAuthorised {
			return nil, &bankclient.RejectedError{StatusCode: http.StatusBadRequest, Code: "invalid_grant", Reason: "the consent is " + string(st)}
		}
		return c.consent, nil
	})
}

// RefreshGrant implements bankclient.Authoriser.
func (b *Bank) RefreshGrant(ctx context.Context, consentID string, g bankclient.Grant) (bankclient.Grant, error) {
	_, refresh, _ := strings.Cut(strings.TrimPrefix(g.Sealed, sealPrefix), "|")
	return b.tokenCall(ctx, bankclient.OpTokenRefresh, func(time.Time) (*simConsent, error) {
		t := b.tokens[refresh]
		if t == nil || !t.refresh || t.consent.id != consentID {
			return nil, &bankclient.RejectedError{StatusCode: http.StatusBadRequest, Code: "invalid_grant", Reason: "unknown refresh token"}
		}
		return t.consent, nil
	})
}

// tokenCall is one request to the token endpoint, with the faults of a
// status call: decide says which consent the tokens are for.
func (b *Bank) tokenCall(ctx context.Context, op string, decide func(time.Time) (*simConsent, error)) (bankclient.Grant, error) {
	if err := ctx.Err(); err != nil {
		return bankclient.Grant{}, fmt.Errorf("error asking for a token: error before contacting bank: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.faults
	if b.chance(f.StatusError) {
		b.logf("%s: 503", op)
		return bankclient.Grant{}, ambiguous(op, http.StatusServiceUnavailable, 1)
	}
	now := b.clock.Now()
	c, err := decide(now)
	b.clock.Advance(b.leg(f))
	if err != nil {
		b.logf("%s: %v", op, err)
		return bankclient.Grant{}, err
	}
	b.tokenSeq++
	access, refresh := "at-"+strconv.Itoa(b.tokenSeq), "rt-"+strconv.Itoa(b.tokenSeq)
	b.tokens[access] = &simToken{consent: c, expiresAt: now.Add(simTokenTTL)}
	b.tokens[refresh] = &simToken{consent: c, refresh: true}
	if b.chance(f.DropResponse) {
		b.logf("%s: tokens %s issued for consent %s, answer lost", op, access, c.id)
		return bankclient.Grant{}, ambiguous(op, http.StatusGatewayTimeout, 1)
	}
	b.logf("%s: tokens %s issued for consent %s", op, access, c.id)
	return bankclient.Grant{Sealed: sealPrefix + access + "|" + refresh, ExpiresAt: now.Add(simTokenTTL), Refreshable: true}, nil
}

// tokenOK reports whether a payment request carries a live access token
// of consent c. The caller holds b.mu.
func (b *Bank) tokenOK(req bankclient.PaymentRequest, c *simConsent, now time.Time) bool {
	access, _, _ := strings.Cut(strings.TrimPrefix(req.Grant, sealPrefix), "|")
	t := b.tokens[access]
	return t != nil && !t.refresh && t.consent == c && now.Before(t.expiresAt)
}

// unauthorised is the bank's 401 to a payment without the right token, as
// the connector reports it: not definitive.
func unauthorised() error {
	return &bankclient.AmbiguousError{Op: bankclient.OpSend, StatusCode: http.StatusUnauthorized, Attempts: 1,
		Err: &bankclient.StatusError{StatusCode: http.StatusUnauthorized}}
}

// AuthorisationURL is Bank.AuthorisationURL (no bank call).
func (b actorBank) AuthorisationURL(consentID, state, redirectURI string) (string, error) {
	return b.bank.AuthorisationURL(consentID, state, redirectURI)
}

// ExchangeCode is Bank.ExchangeCode through the actor's plan.
func (b actorBank) ExchangeCode(ctx context.Context, consentID, state, code, redirectURI string) (bankclient.Grant, error) {
	return b.grantCall(ctx, "bank token", func(ctx context.Context) (bankclient.Grant, error) {
		return b.bank.ExchangeCode(ctx, consentID, state, code, redirectURI)
	})
}

// RefreshGrant is Bank.RefreshGrant through the actor's plan.
func (b actorBank) RefreshGrant(ctx context.Context, consentID string, g bankclient.Grant) (bankclient.Grant, error) {
	return b.grantCall(ctx, "bank token refresh", func(ctx context.Context) (bankclient.Grant, error) {
		return b.bank.RefreshGrant(ctx, consentID, g)
	})
}

// grantCall runs a token request as the actor's plan says: a crash after
// the bank answered (the code spent, the token lost with the process).
func (b actorBank) grantCall(ctx context.Context, what string, call func(context.Context) (bankclient.Grant, error)) (bankclient.Grant, error) {
	if err := b.a.op(what); err != nil {
		return bankclient.Grant{}, fmt.Errorf("error asking for a token: %w", err)
	}
	n := b.a.bankCalls
	b.a.bankCalls++
	if n == b.a.crashAfterBank {
		_, _ = call(ctx)
		b.a.crashed = true
		b.a.note("crashed after %s %d returned", what, n)
		return bankclient.Grant{}, fmt.Errorf("error asking for a token: %w", errCrashed)
	}
	return call(ctx)
}

// redirectURI is the console's redirect endpoint in the simulation.
const redirectURI = "https://settle.sim/console/authorise/callback"

// customerFn is the customers of the consents due: each opens the link the
// engine lists for their settlement and the redirect back is handled as
// the console handles it (the settlement then checked, as CheckNow has
// it); sometimes the redirect is delivered twice, and a forged one with a
// state the engine never issued comes along.
func (r *run) customerFn(a *actor, out *string) (func(context.Context), string) {
	replay, forge := r.rng.IntN(5) == 0, r.rng.IntN(10) == 0
	forged := "forged-state-" + strconv.Itoa(r.rng.IntN(1000))
	return func(ctx context.Context) {
		rs := r.resolver(a)
		as, err := reconcile.AwaitingAuthorisations(ctx, r.pool, 1000)
		if err != nil {
			*out = "error: " + err.Error()
			return
		}
		var did []string
		for _, au := range as {
			link, err := rs.AuthorisationLink(au, redirectURI)
			if err != nil {
				*out = "error: " + err.Error()
				return
			}
			back := r.bank.Visit(link)
			if back == nil {
				continue
			}
			times := 1
			if replay {
				times, replay = 2, false // the browser delivers the redirect again
			}
			for range times {
				var rd reconcile.Redirect
				if e := back.Get("error"); e != "" {
					rd, err = rs.RefuseAuthorisation(ctx, back.Get("state"), e, "")
				} else {
					rd, err = rs.CompleteAuthorisation(ctx, back.Get("state"), back.Get("code"), redirectURI)
				}
				did = append(did, fmt.Sprintf("%s %s replayed=%v err=%v", au.SettlementID, rd.Status, rd.Replayed, err))
				if err == nil && !rd.Replayed {
					o, err := rs.Resolve(ctx, au.SettlementID, nil)
					did = append(did, fmt.Sprintf("%s → %s %v", au.SettlementID, o.State, err))
				}
			}
		}
		if forge {
			_, err := rs.CompleteAuthorisation(ctx, forged, "code-1", redirectURI)
			did = append(did, fmt.Sprintf("forged redirect: %v", err))
		}
		*out = fmt.Sprintf("%d link(s) listed; %s", len(as), strings.Join(did, "; "))
	}, "customers"
}
