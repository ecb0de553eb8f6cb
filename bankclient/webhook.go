package bankclient

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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

// VerifyHMACSignature checks a signature header in Stripe's scheme,
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">" (several v1
// entries are allowed during a secret rotation), against secret and now.
func VerifyHMACSignature(header string, body []byte, secret string, now time.Time, tolerance time.Duration) error {
	if secret == "" {
		return ErrWebhookNotConfigured
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if sig, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, sig)
			}
		}
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrWebhookSignature
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	want := mac.Sum(nil)
	ok := false
	for _, sig := range sigs {
		ok = ok || hmac.Equal(sig, want)
	}
	if !ok {
		return ErrWebhookSignature
	}
	if d := now.Sub(time.Unix(secs, 0)); d > tolerance || d < -tolerance {
		return ErrWebhookStale
	}
	return nil
}

// SignHMAC returns the signature header VerifyHMACSignature accepts, for
// the fakebank and tests.
func SignHMAC(body []byte, secret string, at time.Time) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// SettleSignatureHeader carries the signature of the settle protocol's
// webhooks, in Stripe's scheme.
const SettleSignatureHeader = "Settle-Signature"

// SettleWebhook is the body of a webhook of the settle protocol: the
// payment that changed, as GET /v1/payments/by-key/{key} would show it.
type SettleWebhook struct {
	Type    string  `json:"type"`
	Payment Payment `json:"payment"`
}

// verifySettleWebhook verifies a webhook of the settle protocol.
func verifySettleWebhook(h http.Header, body []byte, secret string, now time.Time) (Hint, error) {
	if err := VerifyHMACSignature(h.Get(SettleSignatureHeader), body, secret, now, WebhookTolerance); err != nil {
		return Hint{}, err
	}
	var w SettleWebhook
	if err := json.Unmarshal(body, &w); err != nil {
		return Hint{}, fmt.Errorf("%w: %w", ErrWebhookMalformed, err)
	}
	hint := Hint{Reference: w.Payment.Reference, PaymentID: w.Payment.ID, Key: w.Payment.IdempotencyKey}
	if hint == (Hint{}) {
		return Hint{}, ErrWebhookMalformed
	}
	return hint, nil
}
