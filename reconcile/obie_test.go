package reconcile

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
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

func setupOBIE(t *testing.T, faults bankclient.Faults, verify *rsa.PublicKey) *obieBundle {
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
	insertSettlementAt(t, ob.db, id, amount, account, "GBP")
	if _, err := ob.db.Pool.Exec(context.Background(), `UPDATE settlements SET
		beneficiary = 'SortCodeAccountNumber:08080021325698:ACME Ltd', bank_reference = $2 WHERE settlement_id = $1`,
		id, obie.Capabilities.Reference(id)); err != nil {
		t.Fatal(err)
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
	ob := setupOBIE(t, bankclient.Faults{ConsentDelayMS: int64(365 * 24 * time.Hour / time.Millisecond)}, nil)
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
	ob := setupOBIE(t, bankclient.Faults{ConsentDelayMS: int64(365 * 24 * time.Hour / time.Millisecond)}, nil)
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
	if r := readRow(t, ob.db, "cons-reject"); r.movements != 0 {
		t.Errorf("%d movements for a rejected consent", r.movements)
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
	ob := setupOBIE(t, bankclient.Faults{ConsentDelayMS: int64(365 * 24 * time.Hour / time.Millisecond)}, nil)
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
	if r := readRow(t, ob.db, "cons-expire"); r.nextCheck != nil {
		t.Errorf("a flagged settlement has a next check at %v", r.nextCheck)
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
	ob := setupOBIE(t, bankclient.Faults{}, &other.PublicKey)
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
	if r := readRow(t, ob.db, "cons-badsig"); r.movements != 0 {
		t.Errorf("%d movements", r.movements)
	}
}

// TestConsentStepRacesPayOnce: several processes work one settlement's
// consent step and payment at once: one consent, one payment, one
// movement. (A call may end with an error and nothing sent: the
// connector keeps a second between requests under one key, and a job
// waiting longer than its deadline gives up, to be retried.)
func TestConsentStepRacesPayOnce(t *testing.T) {
	t.Parallel()
	ob := setupOBIE(t, bankclient.Faults{}, nil)
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
	if r := readRow(t, ob.db, "cons-race"); r.movements != 1 || r.moveAmount != 4100 {
		t.Errorf("%+v: want one movement of 4100", r)
	}
	checkAgainst(t, ob.db, ob.bank.BooksClient())
}
