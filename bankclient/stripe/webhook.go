package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v82"

	"github.com/settle/settle/bankclient"
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

// VerifyWebhook checks a Stripe webhook: its Stripe-Signature by
// stripe-go's check (HMAC-SHA256 of "<t>.<body>" under the endpoint's
// signing secret), its timestamp within bankclient.WebhookTolerance of now,
// and returns the payout a payout.* event names (its id and the reference
// we sent, from its metadata). Any other event is refused as malformed:
// it names no payout.
func VerifyWebhook(h http.Header, body []byte, secret string, now time.Time) (bankclient.Hint, error) {
	if secret == "" {
		return bankclient.Hint{}, bankclient.ErrWebhookNotConfigured
	}
	header := h.Get(SignatureHeader)
	// stripe-go checks the tolerance against the wall clock; ours is
	// injected, so it checks the signature and we check the time.
	if err := stripe.ValidatePayload(body, header, secret, stripe.WithIgnoreTolerance()); err != nil {
		return bankclient.Hint{}, bankclient.ErrWebhookSignature
	}
	ts, err := signedAt(header)
	if err != nil {
		return bankclient.Hint{}, bankclient.ErrWebhookSignature
	}
	if d := now.Sub(ts); d > bankclient.WebhookTolerance || d < -bankclient.WebhookTolerance {
		return bankclient.Hint{}, bankclient.ErrWebhookStale
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

// signedAt is the t= of a Stripe-Signature header.
func signedAt(header string) (time.Time, error) {
	for part := range strings.SplitSeq(header, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
			secs, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return time.Time{}, err
			}
			return time.Unix(secs, 0), nil
		}
	}
	return time.Time{}, errors.New("no timestamp")
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
