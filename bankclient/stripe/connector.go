// Package stripe is the Stripe connector (--bank stripe): each settlement
// is sent as a Stripe payout (POST /v1/payouts) through the official
// client, github.com/stripe/stripe-go, under our stable Idempotency-Key,
// and resolved the way Stripe allows: by the payout's id, by a replay of
// the identical request while Stripe keeps the key (24 hours; Stripe
// answers with the original response), and by searching the payout list
// after that.
//
// It owns the mapping between settle's bank contract (package bankclient)
// and Stripe's payout API: the request, the statuses, the answer classes
// (by Stripe's error type and the HTTP status, never by text) and the
// webhook check. It must never retry inside stripe-go (its network
// retries are off: every retry is ours, under the same key), never log a
// secret, and never decide anything about a settlement: it reports what
// Stripe says.
package stripe

import (
	"strings"
	"time"

	"github.com/settle/settle/bankclient"
)

// Name is the --bank value of the connector.
const Name = "stripe"

// DefaultURL is Stripe's API.
const DefaultURL = "https://api.stripe.com"

// KeyWindow is how long Stripe keeps an idempotency key: "keys are
// eligible to be removed from the system automatically after they're at
// least 24 hours old" (https://docs.stripe.com/api/idempotent_requests).
const KeyWindow = 24 * time.Hour

// Currencies are the currencies the connector sends, upper-case as settle
// stores them: those Stripe pays out whose minor unit is the ISO 4217 one
// (https://docs.stripe.com/currencies). Stripe's special cases are left
// out on purpose: ISK, HUF, TWD and UGX are zero-decimal for payouts but
// not in ISO 4217, and three-decimal currencies (BHD, JOD, KWD, OMR, TND)
// must end in 0; which of these an account may pay out also depends on its
// country, which Stripe checks when the payout is created. BGN left with
// Bulgaria's adoption of the euro on 2026-01-01.
var Currencies = []string{
	"AED", "AUD", "BRL", "CAD", "CHF", "CZK", "DKK", "EUR", "GBP",
	"HKD", "IDR", "ILS", "INR", "JPY", "KRW", "MXN", "MYR", "NOK", "NZD",
	"PHP", "PLN", "RON", "SEK", "SGD", "THB", "USD", "ZAR",
}

// MaxAmount is the largest amount Stripe takes, in minor units of any
// currency: "The amount value supports up to eight digits (e.g., a value
// of 99999999 for a USD charge of $999,999.99)" (Stripe's OpenAPI
// document, amount; https://docs.stripe.com/currencies#minimum-and-maximum-charge-amounts).
const MaxAmount = 99_999_999

// Capabilities is what Stripe's payout API offers: a payout is read by its
// id (GET /v1/payouts/{id}) and the list can be searched (GET /v1/payouts);
// there is no lookup by idempotency key or by metadata; a replay under the
// same key within 24 hours returns the original response.
var Capabilities = bankclient.Capabilities{
	LookupByID: true,
	Search:     true,
	Replay:     bankclient.ReplayOriginal,
	KeyWindow:  KeyWindow,
	// Stripe takes idempotency keys of up to 255 characters; ours are
	// UUIDs.
	KeyMaxLen: 255,
	// The reference travels as metadata[reference]: Stripe allows values
	// of up to 500 characters; 255 bytes keeps it comfortably inside.
	RefMaxLen:  255,
	Currencies: Currencies,
	MaxAmount:  MaxAmount,
	// A paid payout that fails later came back: Stripe reports it failed
	// (https://docs.stripe.com/payouts#payout-failures).
	FailedAfterSettledIsReturn: true,
}

// Connector is the Stripe connector, registered as "stripe".
var Connector = bankclient.Connector{
	Name:         Name,
	Summary:      "Stripe payouts (POST /v1/payouts) through stripe-go; secret key in SETTLE_BANK_TOKEN",
	Capabilities: Capabilities,
	DefaultURL:   DefaultURL,
	New: func(baseURL string, opts bankclient.Options) (bankclient.Bank, error) {
		return New(baseURL, opts)
	},
	CheckEvent:    checkEvent,
	VerifyWebhook: VerifyWebhook,
	// A paid payout can fail up to several business days later
	// (https://docs.stripe.com/payouts#payout-failures); watch it for a
	// fortnight.
	DefaultReturnWatch: 14 * 24 * time.Hour,
}

// checkEvent refuses a beneficiary Stripe cannot pay out to: the
// destination of a payout is an external account of the Stripe account, a
// bank account ("ba_…") or a debit card ("card_…").
// (The currency is checked against Capabilities.Currencies by
// Connector.Check before.)
func checkEvent(_, beneficiary string) error {
	if !validDestination(beneficiary) {
		return &bankclient.FieldError{Field: "beneficiary", Reason: `must be a Stripe external account id ("ba_…" or "card_…") for the stripe connector`}
	}
	return nil
}

// validDestination reports whether s looks like a Stripe bank account or
// card id: the prefix and 1 to 250 ASCII letters, digits or underscores.
func validDestination(s string) bool {
	rest, ok := strings.CutPrefix(s, "ba_")
	if !ok {
		rest, ok = strings.CutPrefix(s, "card_")
	}
	if !ok || rest == "" || len(rest) > 250 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
		default:
			return false
		}
	}
	return true
}
