package obie_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"net/http"
	"testing"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/connectortest"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/fakebank/obietest"
)

// target is the Open Banking connector against the fakebank's obie
// profile, which verifies every request's signature with the public half
// of the key the connector signs with.
func target(t *testing.T) connectortest.Target {
	t.Helper()
	conn := obie.NewConnector(obie.Config{TokenKey: testTokenKey})
	return connectortest.Target{
		Connector: conn,
		Profile:   "obie",
		Options:   bankclient.Options{Token: "conformance-access-token", SigningKeyFile: keyFile(t)},
		Bank:      fakebank.Options{JWSPublicKey: &testKey().PublicKey},
		Request:   request,
	}
}

// TestConformance runs the connector conformance suite against the
// fakebank's obie profile.
func TestConformance(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, target(t))
}

// TestConformanceAgainstTheSpec runs the suite with every request the
// connector sends and every answer the obie profile gives validated
// against the Open Banking OpenAPI document.
func TestConformanceAgainstTheSpec(t *testing.T) {
	t.Parallel()
	v := obietest.NewValidator(t, nil)
	tg := target(t)
	tg.Options.HTTPClient = &http.Client{Transport: v}
	connectortest.Run(t, tg)
}

// TestBadSignatureIsARefusal: a bank holding another public key than the
// one we sign with refuses the consent and the payment (400
// UK.OBIE.Signature.*): a definitive refusal that says so, and nothing is
// created.
func TestBadSignatureIsARefusal(t *testing.T) {
	t.Parallel()
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	bank, u := fakebanktest.NewServer(t, fakebank.Options{Profile: "obie", JWSPublicKey: &other.PublicKey})
	c := newClient(t, u, bankclient.Options{Retry: oneAttempt})
	ctx := context.Background()
	for what, err := range map[string]error{
		"the consent": func() error {
			_, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor("sig-bad"), request("sig-bad"))
			return err
		}(),
		"the payment": func() error {
			req := request("sig-bad")
			req.ConsentID = "cns_000000000001"
			_, err := c.Send(ctx, bankclient.KeyFor("sig-bad"), req)
			return err
		}(),
	} {
		if !bankclient.IsRejected(err) || !errors.Is(err, obie.ErrSignatureRefused) || bankclient.IsAmbiguous(err) {
			t.Errorf("%s under a signature the bank cannot verify: %v; want a refusal of the signature", what, err)
		}
	}
	if st := bank.Stats(); st.Payments != 0 {
		t.Errorf("the bank made %d payments", st.Payments)
	}
}

// TestAnswersSignedByTheBank: with the obie profile's public key
// configured (SETTLE_OBIE_BANK_PUBLIC_KEY_FILE), every answer of a whole
// consent, payment and status round verifies, and the round completes.
func TestAnswersSignedByTheBank(t *testing.T) {
	t.Parallel()
	bank, u := fakebanktest.NewServer(t, fakebank.Options{Profile: "obie", JWSPublicKey: &testKey().PublicKey})
	der, err := x509.MarshalPKIXPublicKey(bank.JWSSigningPublicKey())
	if err != nil {
		t.Fatal(err)
	}
	c, err := obie.New(u, bankclient.Options{Token: "tok", SigningKeyFile: keyFile(t), Retry: oneAttempt},
		obie.Config{BankKeyFile: writePEM(t, "fakebank.pem", "PUBLIC KEY", der), TokenKey: testTokenKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := request("signed-answers")
	con, err := c.CreateConsent(ctx, bankclient.ConsentKeyFor("signed-answers"), req)
	if err != nil || con.Status != bankclient.ConsentAuthorised {
		t.Fatalf("CreateConsent: %+v, %v", con, err)
	}
	if _, err := c.ConsentByID(ctx, con.ID); err != nil {
		t.Fatalf("ConsentByID: %v", err)
	}
	req.ConsentID = con.ID
	req.Grant = grant(t, c, nil, con.ID)
	res, err := c.Send(ctx, bankclient.KeyFor("signed-answers"), req)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if _, err := c.StatusByID(ctx, res.Payment.ID); err != nil {
		t.Fatalf("StatusByID: %v", err)
	}
	if _, err := c.StatusByID(ctx, "pay_999999999999"); !errors.Is(err, bankclient.ErrPaymentNotFound) {
		t.Errorf("an unknown payment, signed refusal: %v", err)
	}
}
