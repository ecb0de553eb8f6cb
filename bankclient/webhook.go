package bankclient

import (
	"errors"
	"time"
)

// A webhook from the bank is a hint, never a fact: once its signature is
// verified it names a payment, and the engine asks the bank about that
// payment at once. Its body never moves money or state (DESIGN.md
// section 13).

// The errors of a webhook that is refused. None says more than that: a
// forger learns nothing.
var (
	// ErrWebhookSignature: the signature is missing or wrong.
	ErrWebhookSignature = errors.New("webhook signature does not verify")
	// ErrWebhookStale: the signed timestamp is outside the tolerance (a
	// replayed or delayed message).
	ErrWebhookStale = errors.New("webhook timestamp outside the tolerance")
	// ErrWebhookMalformed: signed, but no payment can be read from it.
	ErrWebhookMalformed = errors.New("webhook body names no payment")
	// ErrWebhookNotConfigured: no secret is configured, so no webhook can
	// be verified.
	ErrWebhookNotConfigured = errors.New("no webhook secret configured (SETTLE_BANK_WEBHOOK_SECRET)")
)

// EnvWebhookSecret holds the secret webhooks are signed with.
const EnvWebhookSecret = "SETTLE_BANK_WEBHOOK_SECRET" //nolint:gosec // G101: the name of a variable, not a credential

// WebhookTolerance is how far a webhook's signed timestamp may be from our
// clock (Stripe's default).
const WebhookTolerance = 5 * time.Minute

// Hint is what a verified webhook says: which payment to ask about. Any of
// its fields may be empty; at least one is not.
type Hint struct {
	// Reference is the reference we sent.
	Reference string
	// PaymentID is the bank's id of the payment.
	PaymentID string
	// Key is our idempotency key.
	Key string
}
