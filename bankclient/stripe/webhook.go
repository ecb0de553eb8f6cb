package stripe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v82"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
)

// SignatureHeader carries the signature of Stripe's webhooks
// (https://docs.stripe.com/webhooks#verify-events).
const SignatureHeader = "Stripe-Signature"

// Event is the part of a Stripe event a hint needs: its type and, for
// payout.* events, the payout.
type Event struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Type   string `json:"type"`
	Data   struct {
		Object struct {
			ID       string            `json:"id"`
			Object   string            `json:"object"`
			Metadata map[string]string `json:"metadata"`
		} `json:"object"`
	} `json:"data"`
}

// VerifyWebhook checks a Stripe webhook: its Stripe-Signature in
// Stripe's scheme (HMAC-SHA256 of "<t>.<body>" under the endpoint's signing
// secret, https://docs.stripe.com/webhooks#verify-events), read once by
// bankhttp.ParseSignatureHeader so that the t= the HMAC covers is the one
// checked against bankclient.WebhookTolerance (a header with two is
// refused: an old signature with a fresh t= in front would otherwise pass),
// and returns the payout a payout.* event names (its id and the reference
// we sent, from its metadata). Any other event is refused as malformed:
// it names no payout.
func VerifyWebhook(h http.Header, body []byte, secret string, now time.Time) (bankclient.Hint, error) {
	if err := bankhttp.VerifyHMACSignature(h.Get(SignatureHeader), body, secret, now, bankclient.WebhookTolerance); err != nil {
		return bankclient.Hint{}, err
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return bankclient.Hint{}, fmt.Errorf("%w: %w", bankclient.ErrWebhookMalformed, err)
	}
	po := ev.Data.Object
	if !strings.HasPrefix(ev.Type, "payout.") || po.Object != "payout" || po.ID == "" {
		return bankclient.Hint{}, fmt.Errorf("%w: event %q is not about a payout", bankclient.ErrWebhookMalformed, bankclient.Sanitize(ev.Type))
	}
	return bankclient.Hint{PaymentID: po.ID, Reference: po.Metadata["reference"]}, nil
}

// WebhookBody is a payout event as Stripe sends it, for the fakebank and
// tests: type is "payout.paid", "payout.failed" and so on.
func WebhookBody(eventID, typ string, payout map[string]any) ([]byte, error) {
	return json.Marshal(map[string]any{
		"id":          eventID,
		"object":      "event",
		"api_version": stripe.APIVersion,
		"type":        typ,
		"data":        map[string]any{"object": payout},
	})
}
