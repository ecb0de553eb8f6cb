package reconcile

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/fakebank/obietest"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
)

// obieBundle is a Resolver paying through the obie connector at the
// fakebank's obie profile, which verifies request signatures with verify
// (the connector's own key when nil); observed counts the connector's
// calls by op and outcome.
type obieBundle struct {
	*resolverBundle
	clock *settletest.ManualClock

	mu       sync.Mutex
	observed map[string]int
}

func setupOBIE(t *testing.T, faults fakebank.Faults, verify *rsa.PublicKey) *obieBundle {
	t.Helper()
	key, keyFile, _ := obietest.SigningKey(t)
	if verify == nil {
		verify = &key.PublicKey
	}
	db := dbtest.New(t)
	bank, url := fakebanktest.NewServer(t, fakebank.Options{Seed: 3, Faults: faults, Profile: "obie", JWSPublicKey: verify})
	ob := &obieBundle{observed: map[string]int{}, clock: settletest.NewManualClock(time.Now())}
	client, err := obie.New(url, bankclient.Options{
		Token: "obie-test", SigningKeyFile: keyFile, Timeout: 5 * time.Second,
		Retry: bankclient.RetryPolicy{MaxAttempts: 1},
		Observe: func(op, outcome string, _ time.Duration) {
			ob.mu.Lock()
			defer ob.mu.Unlock()
			ob.observed[op+"/"+outcome]++
		},
	}, obie.Config{TokenKey: "cmVjb25jaWxlLXRlc3QtdG9rZW4ta2V5LTMyYnl0ZXM="})
	if err != nil {
		t.Fatal(err)
	}
	caps := obie.Capabilities
	ob.resolverBundle = &resolverBundle{db: db, bank: bank, url: url, r: &Resolver{
		DB: db.Pool, Bank: client, Capabilities: &caps, KeyTTL: time.Hour, ConsentWait: time.Hour, Now: ob.clock.Now,
		CheckInterval: 50 * time.Millisecond, MaxCheckInterval: time.Second, Lease: 5 * time.Second,
		Metrics: metrics.NewUnregistered(),
	}}
	return ob
}

// insertOBIE creates a pending settlement the obie connector can pay.
func (ob *obieBundle) insertOBIE(t *testing.T, id string, amount int64) {
	t.Helper()
	ob.insertOBIEFrom(t, id, amount, "acc-1")
}

// insertOBIEFrom is insertOBIE paying from account.
func (ob *obieBundle) insertOBIEFrom(t *testing.T, id string, amount int64, account string) {
	t.Helper()
	resolvertest.InsertSettlementAt(t, ob.db, id, amount, account, "GBP")
	if _, err := ob.db.Pool.Exec(context.Background(), `UPDATE settlements SET
		beneficiary = 'SortCodeAccountNumber:08080021325698:ACME Ltd', bank_reference = $2 WHERE settlement_id = $1`,
		id, obie.Capabilities.Reference(id)); err != nil {
		t.Fatal(err)
	}
}

// testRedirect is the redirect URI of the tests' authorisations; the
// account holder's browser is not followed there: authorise hands the
// bank's redirect to the Resolver as the console would.
const testRedirect = "http://127.0.0.1:1/console/authorise/callback"

// noRedirects is the account holder's browser, stopping at the bank's
// redirect back to settle.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// visit opens the authorisation link of settlement id as its account
// holder and returns the bank's redirect back (code or error, and state).
func (ob *obieBundle) visit(t *testing.T, id string) url.Values {
	t.Helper()
	as, err := AwaitingAuthorisations(context.Background(), ob.db.Pool, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.SettlementID != id {
			continue
		}
		link, err := ob.r.AuthorisationLink(a, testRedirect)
		if err != nil {
			t.Fatal(err)
		}
		res, err := noRedirects.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		back, err := url.Parse(res.Header.Get("Location"))
		if err != nil || !strings.HasPrefix(back.String(), testRedirect+"?") {
			t.Fatalf("the bank sent the account holder of %s to %q (%d)", id, res.Header.Get("Location"), res.StatusCode)
		}
		return back.Query()
	}
	t.Fatalf("no authorisation of %s awaited (%+v)", id, as)
	return nil
}

// authorise runs the account holder's authorisation of settlement id:
// the link, the bank's page, the redirect back.
func (ob *obieBundle) authorise(t *testing.T, id string) {
	t.Helper()
	q := ob.visit(t, id)
	rd, err := ob.r.CompleteAuthorisation(context.Background(), q.Get("state"), q.Get("code"), testRedirect)
	if err != nil || rd.SettlementID != id || rd.Status != AuthorisationAuthorised {
		t.Fatalf("the redirect of %s (%v): %+v, %v", id, q, rd, err)
	}
}

// consentRow is a settlement's consent as stored.
func (ob *obieBundle) consentRow(t *testing.T, id string) (consentID, status string, requests int) {
	t.Helper()
	if err := ob.db.Pool.QueryRow(context.Background(), `SELECT coalesce(bank_consent_id, ''), coalesce(consent_status, ''),
		(SELECT count(*) FROM bank_attempts a WHERE a.settlement_id = s.settlement_id AND a.op IN ('send', 'replay'))
		FROM settlements s WHERE settlement_id = $1`, id).Scan(&consentID, &status, &requests); err != nil {
		t.Fatal(err)
	}
	return consentID, status, requests
}

// TestConsentAwaitingKeepsPaymentUnsent: a consent the customer has not
// authorised keeps the settlement pending, asked again later, and no
// payment is ever sent; once authorised, the next check pays it, once.
func TestConsentAwaitingKeepsPaymentUnsent(t *testing.T) {
	t.Parallel()
	ob := setupOBIE(t, fakebank.Faults{ConsentDelayMS: int64(365 * 24 * time.Hour / time.Millisecond)}, nil)
	ctx := context.Background()
	ob.insertOBIE(t, "cons-wait", 2500)
	out, err := ob.r.Send(ctx, "cons-wait", nil)
	if err != nil || out.State != settlement.Pending || out.Done || out.NextCheckAt.IsZero() {
		t.Fatalf("send with the consent awaiting: %+v, %v; want pending, asked again later", out, err)
	}
	consentID, status, posts := ob.consentRow(t, "cons-wait")
	if consentID == "" || status != string(bankclient.ConsentAwaiting) || posts != 0 {
		t.Fatalf("consent %q %q, %d payment requests: want the consent stored, awaiting, no payment", consentID, status, posts)
	}
	for range 3 {
		ob.clock.Advance(time.Minute)
		if out, err := ob.r.Resolve(ctx, "cons-wait", nil); err != nil || out.State != settlement.Pending {
			t.Fatalf("check with the consent awaiting: %+v, %v", out, err)
		}
	}
	if st := ob.bank.Stats(); st.Payments != 0 {
		t.Fatalf("the bank holds %d payments while the consent awaits authorisation", st.Payments)
	}
	if got, _, _ := ob.consentRow(t, "cons-wait"); got != consentID {
		t.Errorf("consent %q became %q: one consent per settlement", consentID, got)
	}

	if err := ob.bank.DecideConsent(consentID, true); err != nil {
		t.Fatal(err)
	}
	// Authorised at the bank, but the payment is made with the account
	// holder's token, which only their redirect brings.
	if out, err := ob.r.Resolve(ctx, "cons-wait", nil); err != nil || out.State != settlement.Pending || out.Done {
		t.Fatalf("check with the consent authorised and no token: %+v, %v; want pending, asked again later", out, err)
	}
	if _, status, posts := ob.consentRow(t, "cons-wait"); status != string(bankclient.ConsentAuthorised) || posts != 0 {
		t.Fatalf("consent %q, %d payment requests: want authorised, none", status, posts)
	}
	ob.authorise(t, "cons-wait")
	out, err = ob.r.Resolve(ctx, "cons-wait", nil)
	if err != nil || (out.State != settlement.Sent && out.State != settlement.Confirmed) {
		t.Fatalf("check after the customer authorised: %+v, %v; want the payment sent", out, err)
	}
	if _, status, posts := ob.consentRow(t, "cons-wait"); status != string(bankclient.ConsentAuthorised) || posts != 1 {
		t.Errorf("consent %q, %d payment requests: want authorised, one", status, posts)
	}
	if st := ob.bank.Stats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 {
		t.Errorf("bank %+v: want one payment", st)
	}
}

// TestConsentRejectedFailsIt: a consent the customer rejects fails the
// settlement; no payment, no movement.
func TestConsentRejectedFailsIt(t *testing.T) {
	t.Parallel()
	ob := setupOBIE(t, fakebank.Faults{ConsentDelayMS: int64(365 * 24 * time.Hour / time.Millisecond)}, nil)
	ctx := context.Background()
	ob.insertOBIE(t, "cons-reject", 900)
	if out, err := ob.r.Send(ctx, "cons-reject", nil); err != nil || out.State != settlement.Pending {
		t.Fatalf("send: %+v, %v", out, err)
	}
	consentID, _, _ := ob.consentRow(t, "cons-reject")
	if err := ob.bank.DecideConsent(consentID, false); err != nil {
		t.Fatal(err)
	}
	out, err := ob.r.Resolve(ctx, "cons-reject", nil)
	if err != nil || out.State != settlement.Failed || !out.Done {
		t.Fatalf("check after the customer rejected: %+v, %v; want failed", out, err)
	}
	if r := resolvertest.ReadRow(t, ob.db, "cons-reject"); r.Movements != 0 {
		t.Errorf("%d movements for a rejected consent", r.Movements)
	}
	if _, status, posts := ob.consentRow(t, "cons-reject"); status != string(bankclient.ConsentRejected) || posts != 0 {
		t.Errorf("consent %q, %d payment requests: want rejected, none", status, posts)
	}
	if st := ob.bank.Stats(); st.Payments != 0 {
		t.Errorf("bank %+v: want no payment", st)
	}
}

// TestConsentExpiredIsFlagged: a consent still awaiting authorisation
// after the consent wait is flagged consent_expired; the settlement stays
// pending, nothing was paid, and nothing is asked on its own any more.
func TestConsentExpiredIsFlagged(t *testing.T) {
	t.Parallel()
	ob := setupOBIE(t, fakebank.Faults{ConsentDelayMS: int64(365 * 24 * time.Hour / time.Millisecond)}, nil)
	ctx := context.Background()
	ob.insertOBIE(t, "cons-expire", 1200)
	if _, err := ob.r.Send(ctx, "cons-expire", nil); err != nil {
		t.Fatal(err)
	}
	ob.clock.Advance(ob.r.ConsentWait + time.Second)
	out, err := ob.r.Resolve(ctx, "cons-expire", nil)
	if err != nil || out.State != settlement.Pending || out.FlagReason != ReasonConsentExpired || !out.Done {
		t.Fatalf("check after the consent wait: %+v, %v; want pending flagged %s", out, err, ReasonConsentExpired)
	}
	if r := resolvertest.ReadRow(t, ob.db, "cons-expire"); r.NextCheck != nil {
		t.Errorf("a flagged settlement has a next check at %v", r.NextCheck)
	}
	if out, _ := ob.r.Send(ctx, "cons-expire", nil); out.Action != ActionNone {
		t.Errorf("a flagged settlement was acted on: %+v", out)
	}
	if st := ob.bank.Stats(); st.Payments != 0 {
		t.Errorf("bank %+v: want no payment", st)
	}
}

// TestBadSignatureIsARefusalNeverAPayment: a bank that cannot verify our
// signature refuses the consent (400 UK.OBIE.Signature.*): the engine fails
// the settlement as a definitive refusal, records and counts it as one, and
// no consent or payment exists at the bank.
func TestBadSignatureIsARefusalNeverAPayment(t *testing.T) {
	t.Parallel()
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ob := setupOBIE(t, fakebank.Faults{}, &other.PublicKey)
	ctx := context.Background()
	ob.insertOBIE(t, "cons-badsig", 700)
	out, err := ob.r.Send(ctx, "cons-badsig", nil)
	if err != nil || out.State != settlement.Failed {
		t.Fatalf("send with a signature the bank cannot verify: %+v, %v; want failed", out, err)
	}
	if !strings.Contains(out.Decision.Reason, "Signature") {
		t.Errorf("the refusal does not say it was the signature: %q", out.Decision.Reason)
	}
	var outcome, detail string
	if err := ob.db.Pool.QueryRow(ctx, `SELECT outcome, coalesce(detail, '') FROM bank_attempts WHERE settlement_id = $1 AND op = 'consent'`,
		"cons-badsig").Scan(&outcome, &detail); err != nil {
		t.Fatal(err)
	}
	if outcome != string(AnswerRejected) || !strings.Contains(detail, "Signature") {
		t.Errorf("consent attempt recorded %q %q: want a rejection naming the signature", outcome, detail)
	}
	ob.mu.Lock()
	refused := ob.observed[bankclient.OpConsent+"/"+bankclient.OutcomeRejected]
	ob.mu.Unlock()
	if refused != 1 {
		t.Errorf("observed %v: want one rejected consent", ob.observed)
	}
	if st := ob.bank.Stats(); st.Payments != 0 {
		t.Errorf("bank %+v: want no payment", st)
	}
	if r := resolvertest.ReadRow(t, ob.db, "cons-badsig"); r.Movements != 0 {
		t.Errorf("%d movements", r.Movements)
	}
}

// TestConsentStepRacesPayOnce: several processes work one settlement's
// consent step and payment at once: one consent, one payment, one
// movement. (A call may end with an error and nothing sent: the
// connector keeps a second between requests under one key, and a job
// waiting longer than its deadline gives up, to be retried.)
func TestConsentStepRacesPayOnce(t *testing.T) {
	t.Parallel()
	ob := setupOBIE(t, fakebank.Faults{}, nil)
	ctx := context.Background()
	ob.insertOBIE(t, "cons-race", 4100)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			var err error
			if i%2 == 0 {
				_, err = ob.r.Send(ctx, "cons-race", nil)
			} else {
				_, err = ob.r.Resolve(ctx, "cons-race", nil)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Logf("one of the racing calls: %v", err)
		}
	}
	settletest.Wait(t, "the consent stored", func() (bool, string) {
		id, _, _ := ob.consentRow(t, "cons-race")
		if id == "" {
			_, _ = ob.r.Send(ctx, "cons-race", nil)
		}
		return id != "", "no consent yet"
	})
	ob.authorise(t, "cons-race")
	settletest.Wait(t, "the payment settled", func() (bool, string) {
		out, err := ob.r.Resolve(ctx, "cons-race", nil)
		if err != nil {
			return false, err.Error()
		}
		return out.State == settlement.Confirmed, string(out.State)
	})
	st := ob.bank.Stats()
	if cs := ob.bank.ConsentStats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 || cs.Consents != 1 {
		t.Errorf("bank %+v: want one consent, one payment", st)
	}
	if r := resolvertest.ReadRow(t, ob.db, "cons-race"); r.Movements != 1 || r.MoveAmount != 4100 {
		t.Errorf("%+v: want one movement of 4100", r)
	}
	resolvertest.CheckAgainst(t, ob.db, ob.bank.BooksClient())
}

// TestAuthorisationRedirects: the redirects back from the account
// holder's bank. A state settle never issued is refused and asks nothing
// of the bank; a lost token answer leaves the link listed, and opening it
// again authorises; the token is kept sealed, never in clear; a redirect
// handled already changes nothing; the payment is made once, with the
// account holder's token.
func TestAuthorisationRedirects(t *testing.T) {
	t.Parallel()
	ob := setupOBIE(t, fakebank.Faults{}, nil)
	ctx := context.Background()
	ob.insertOBIE(t, "auth-redir", 3100)
	if out, err := ob.r.Send(ctx, "auth-redir", nil); err != nil || out.State != settlement.Pending {
		t.Fatalf("send with no token: %+v, %v; want pending", out, err)
	}

	q := ob.visit(t, "auth-redir")
	if _, err := ob.r.CompleteAuthorisation(ctx, "forged-state-of-forty-three-characters-xxxx", q.Get("code"), testRedirect); !errors.Is(err, ErrUnknownAuthorisation) {
		t.Fatalf("a forged state: %v, want ErrUnknownAuthorisation", err)
	}
	var tokenCalls int
	if err := ob.db.Pool.QueryRow(ctx, `SELECT count(*) FROM bank_attempts WHERE op = 'token'`).Scan(&tokenCalls); err != nil || tokenCalls != 0 {
		t.Fatalf("%d token requests after a forged state (%v), want none", tokenCalls, err)
	}

	// The bank issues the token and the answer is lost: the code is spent.
	if err := ob.bank.SetFaults(fakebank.Faults{TokenDropRate: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.r.CompleteAuthorisation(ctx, q.Get("state"), q.Get("code"), testRedirect); !bankclient.IsAmbiguous(err) {
		t.Fatalf("a lost token answer: %v, want ambiguous", err)
	}
	if err := ob.bank.SetFaults(fakebank.Faults{}); err != nil {
		t.Fatal(err)
	}
	// The browser replays the redirect: the code is spent, refused.
	if _, err := ob.r.CompleteAuthorisation(ctx, q.Get("state"), q.Get("code"), testRedirect); !bankclient.IsRejected(err) {
		t.Fatalf("the spent code again: %v, want refused", err)
	}
	if out, err := ob.r.Resolve(ctx, "auth-redir", nil); err != nil || out.State != settlement.Pending {
		t.Fatalf("check with no token kept: %+v, %v; want pending", out, err)
	}
	// Opened again: a new code, the token kept.
	ob.authorise(t, "auth-redir")
	var sealed string
	if err := ob.db.Pool.QueryRow(ctx, `SELECT grant_sealed FROM consent_authorisations WHERE settlement_id = 'auth-redir'`).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sealed, obie.SealPrefix) || strings.Contains(sealed, q.Get("code")) {
		t.Errorf("the kept grant %q is not sealed", sealed)
	}
	rd, err := ob.r.CompleteAuthorisation(ctx, q.Get("state"), "another-code", testRedirect)
	if err != nil || !rd.Replayed {
		t.Fatalf("a redirect after the token is kept: %+v, %v; want nothing done", rd, err)
	}
	if rd, err := ob.r.RefuseAuthorisation(ctx, q.Get("state"), "access_denied", ""); err != nil || !rd.Replayed {
		t.Fatalf("a refusal after the token is kept: %+v, %v; want nothing done", rd, err)
	}

	out, err := ob.r.Resolve(ctx, "auth-redir", nil)
	if err != nil || (out.State != settlement.Sent && out.State != settlement.Confirmed) {
		t.Fatalf("check with the token kept: %+v, %v; want the payment sent", out, err)
	}
	if st := ob.bank.Stats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 {
		t.Errorf("bank %+v: want one payment", st)
	}
	if as, err := AwaitingAuthorisations(ctx, ob.db.Pool, 10); err != nil || len(as) != 0 {
		t.Errorf("authorisations still listed: %+v, %v", as, err)
	}
}

// TestAuthorisationRefused: the account holder rejects on their bank's
// page; the redirect records it and the bank's Rejected consent fails the
// settlement; no payment.
func TestAuthorisationRefused(t *testing.T) {
	t.Parallel()
	ob := setupOBIE(t, fakebank.Faults{ConsentRejectRate: 1, ConsentDelayMS: 300}, nil)
	ctx := context.Background()
	ob.insertOBIE(t, "auth-no", 800)
	if _, err := ob.r.Send(ctx, "auth-no", nil); err != nil {
		t.Fatal(err)
	}
	q := ob.visit(t, "auth-no")
	if q.Get("error") != "access_denied" {
		t.Fatalf("the bank's redirect %v, want access_denied", q)
	}
	rd, err := ob.r.RefuseAuthorisation(ctx, q.Get("state"), q.Get("error"), q.Get("error_description"))
	if err != nil || rd.Status != AuthorisationRejected {
		t.Fatalf("the refusal: %+v, %v", rd, err)
	}
	out, err := ob.r.Resolve(ctx, "auth-no", nil)
	if err != nil || out.State != settlement.Failed {
		t.Fatalf("check after the refusal: %+v, %v; want failed", out, err)
	}
	if st := ob.bank.Stats(); st.Payments != 0 {
		t.Errorf("bank %+v: want no payment", st)
	}
}
