package stripe_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/connectortest"
	"github.com/settle/settle/bankclient/stripe"
)

// target is the Stripe connector against the fakebank's stripe profile.
var target = connectortest.Target{
	Connector: stripe.Connector,
	Profile:   "stripe",
	Options:   bankclient.Options{Token: "sk_test_conformance"},
	Request: func(ref string) bankclient.PaymentRequest {
		return bankclient.PaymentRequest{AmountCents: 1234, Currency: "EUR", DebtorAccount: "acc-1",
			CreditorAccount: "ba_1OconformanceXYZ", Reference: ref, SettlementID: ref}
	},
	SignWebhook: func(body []byte, secret string, at time.Time) http.Header {
		h := http.Header{}
		h.Set(stripe.SignatureHeader, bankhttp.SignHMAC(body, secret, at))
		return h
	},
	WebhookBody: func(p bankclient.Payment) []byte {
		b, _ := stripe.WebhookBody("evt_conformance", "payout.paid", map[string]any{
			"id": p.ID, "object": "payout", "metadata": map[string]string{"reference": p.Reference},
		})
		return b
	},
}

// TestConformance runs the connector conformance suite against the
// fakebank's stripe profile.
func TestConformance(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, target)
}
