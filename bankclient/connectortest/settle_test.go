package connectortest

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/settle"
)

// TestSettle runs the suite against the settle connector and the
// fakebank's settle profile.
func TestSettle(t *testing.T) {
	t.Parallel()
	Run(t, Target{
		Connector: settle.Connector,
		Profile:   "settle",
		Request: func(ref string) bankclient.PaymentRequest {
			return bankclient.PaymentRequest{AmountCents: 1234, Currency: "EUR", DebtorAccount: "acc-1", CreditorAccount: "DE89370400440532013000", Reference: ref}
		},
		SignWebhook: func(body []byte, secret string, at time.Time) http.Header {
			h := http.Header{}
			h.Set(settle.SignatureHeader, bankhttp.SignHMAC(body, secret, at))
			return h
		},
		WebhookBody: func(p bankclient.Payment) []byte {
			b, _ := json.Marshal(settle.Webhook{Type: "payment.updated", Payment: p})
			return b
		},
	})
}
