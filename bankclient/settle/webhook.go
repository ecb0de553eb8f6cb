package settle

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
)

// SignatureHeader carries the signature of the settle protocol's
// webhooks, in Stripe's scheme.
const SignatureHeader = "Settle-Signature"

// Webhook is the body of a webhook of the settle protocol: the
// payment that changed, as GET /v1/payments/by-key/{key} would show it.
type Webhook struct {
	Type    string             `json:"type"`
	Payment bankclient.Payment `json:"payment"`
}

// verifyWebhook verifies a webhook of the settle protocol.
func verifyWebhook(h http.Header, body []byte, secret string, now time.Time) (bankclient.Hint, error) {
	if err := bankhttp.VerifyHMACSignature(h.Get(SignatureHeader), body, secret, now, bankclient.WebhookTolerance); err != nil {
		return bankclient.Hint{}, err
	}
	var w Webhook
	if err := json.Unmarshal(body, &w); err != nil {
		return bankclient.Hint{}, fmt.Errorf("%w: %w", bankclient.ErrWebhookMalformed, err)
	}
	hint := bankclient.Hint{Reference: w.Payment.Reference, PaymentID: w.Payment.ID, Key: w.Payment.IdempotencyKey}
	if hint == (bankclient.Hint{}) {
		return bankclient.Hint{}, bankclient.ErrWebhookMalformed
	}
	return hint, nil
}
