package connectortest

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
)

// TestSettle runs the suite against the settle connector and the
// fakebank's settle profile.
func TestSettle(t *testing.T) {
	t.Parallel()
	Run(t, Target{
		Connector: bankclient.SettleConnector,
		Profile:   "settle",
		Request: func(ref string) bankclient.PaymentRequest {
			return bankclient.PaymentRequest{AmountCents: 1234, Currency: "EUR", DebtorAccount: "acc-1", CreditorAccount: "DE89370400440532013000", Reference: ref}
		},
		SignWebhook: func(body []byte, secret string, at time.Time) http.Header {
			h := http.Header{}
			h.Set(bankclient.SettleSignatureHeader, bankclient.SignHMAC(body, secret, at))
			return h
		},
		WebhookBody: func(p bankclient.Payment) []byte {
			b, _ := json.Marshal(bankclient.SettleWebhook{Type: "payment.updated", Payment: p})
			return b
		},
	})
}
