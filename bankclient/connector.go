package bankclient

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// ErrUnsupported is returned by a Bank method its bank does not offer (a
// status lookup by our key at a bank that only knows its own payment ids,
// say). The engine never calls one its Capabilities deny; a call that
// returns it sent nothing.
var ErrUnsupported = errors.New("the bank does not offer this operation")

// ErrPaymentNotFound is returned by StatusByID and StatusByReference when
// the bank holds no payment with that id or reference.
var ErrPaymentNotFound = errors.New("bank holds no such payment")

// Replay says what a bank answers to the same request under the same
// idempotency key within its key window.
type Replay string

// The replay behaviours of banks (DESIGN.md section 13).
const (
	// ReplayStored: the payment as it is now, marked replayed (settle).
	ReplayStored Replay = "stored"
	// ReplayOriginal: the original response again, its status as it was
	// then (Stripe): the payment id is news, the status is not.
	ReplayOriginal Replay = "original"
	// ReplayCurrent: the current resource (UK Open Banking).
	ReplayCurrent Replay = "current"
)

// Capabilities is what a bank can do and what it accepts: the decisions
// choose the strongest safe question from it, and intake refuses what it
// could never accept.
type Capabilities struct {
	// LookupByKey: the status of a payment can be asked by our idempotency
	// key (a 404 then means the bank never saw the key).
	LookupByKey bool
	// LookupByReference: by the reference we sent.
	LookupByReference bool
	// LookupByID: by the bank's own payment id.
	LookupByID bool
	// Search: the bank's list or statement holds every payment it
	// executed and can be searched for our reference.
	Search bool
	// Replay is what a replay of a request under the same key answers.
	Replay Replay
	// KeyWindow is how long the bank keeps an idempotency key (0: the
	// bank does not say; --bank-key-ttl alone governs).
	KeyWindow time.Duration
	// KeyMaxLen bounds the idempotency key (0: no limit). Our keys are
	// UUIDs, 36 characters.
	KeyMaxLen int
	// RefMaxLen bounds the reference the bank carries (0: no limit), and
	// RefAllowed lists the characters it accepts besides ASCII letters and
	// digits ("" with RefASCIIOnly false: anything).
	RefMaxLen    int
	RefAllowed   string
	RefASCIIOnly bool
	// Currencies lists the currencies the bank serves (nil: any ISO 4217
	// currency).
	Currencies []string
	// MaxAmount is the largest amount, in minor units, the bank takes in
	// one payment in any currency, and MaxAmounts the same for the
	// currencies listed there (each overrides MaxAmount); 0: no limit.
	// Intake refuses more (422 naming amount_cents) and the client refuses
	// to build such a request (Unsendable).
	MaxAmount  int64
	MaxAmounts map[string]int64
	// FailedAfterSettledIsReturn: the bank reports a payment that came
	// back after it settled as failed, not returned (Stripe: a paid payout
	// that fails later), so failed after confirmation is a return.
	FailedAfterSettledIsReturn bool
	// Consent: every payment needs the bank's consent, created under its
	// own idempotency key (ConsentKeyFor) and authorised by the customer,
	// before it can be sent (UK Open Banking). The Bank then implements
	// Consenter, and PaymentRequest.ConsentID carries the authorised
	// consent.
	Consent bool
	// Authorisation: the payment under a consent is made with the account
	// holder's own token, which settle gets when the account holder
	// authorises the consent at their bank and is sent back to settle
	// (UK Open Banking's authorization code grant). The Bank then
	// implements Authoriser, and PaymentRequest.Grant carries the token.
	Authorisation bool
	// ReturnsOnStatementsOnly: the status API never reports a return; only
	// an imported statement does (UK Open Banking). The return watch then
	// asks nothing of the bank.
	ReturnsOnStatementsOnly bool
	// NoList: the bank offers no list of payments (Statement answers
	// ErrUnsupported): `settle reconcile bank` needs imported statements.
	NoList bool
}

// Reference returns the reference a settlement is sent to this bank under:
// the settlement id itself when it fits the bank's length and character
// rules, otherwise a deterministic short form ("S" + base32 of its SHA-256,
// cut to the limit). It is derived once, at intake, stored with the
// settlement and never recomputed, so a change of rules cannot change the
// reference of a settlement already received.
func (c Capabilities) Reference(settlementID string) string {
	if c.fits(settlementID) {
		return settlementID
	}
	sum := sha256.Sum256([]byte(settlementID))
	ref := "S" + strings.TrimRight(base32.StdEncoding.EncodeToString(sum[:]), "=")
	n := c.RefMaxLen
	if n <= 0 || n > 40 {
		n = 40 // 195 bits of the hash: more than enough to never collide
	}
	return ref[:n]
}

// fits reports whether ref can travel as it is.
func (c Capabilities) fits(ref string) bool {
	if ref == "" || (c.RefMaxLen > 0 && len(ref) > c.RefMaxLen) {
		return false
	}
	if !c.RefASCIIOnly && c.RefAllowed == "" {
		return true
	}
	for _, r := range ref {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune(c.RefAllowed, r):
		default:
			return false
		}
	}
	return true
}

// AmountLimit is the largest amount, in minor units of currency, the bank
// takes in one payment; 0 means no limit.
func (c Capabilities) AmountLimit(currency string) int64 {
	if n, ok := c.MaxAmounts[currency]; ok {
		return n
	}
	return c.MaxAmount
}

// CheckRequest refuses, with an Unsendable *RejectedError and before
// anything is sent, a request the bank could never take: an amount over
// AmountLimit, a currency it does not serve. An amount that is not
// positive is a bug of the caller (the schema forbids one), a plain error.
// Connectors call it first thing in Send and CreateConsent.
func (c Capabilities) CheckRequest(req PaymentRequest) error {
	switch lim := c.AmountLimit(req.Currency); {
	case req.AmountCents <= 0:
		return fmt.Errorf("%w: %d minor units is not positive", ErrAmountLimit, req.AmountCents)
	case lim > 0 && req.AmountCents > lim:
		return Unsendable(fmt.Errorf("%w: %d minor units of %s is over the bank's limit of %d", ErrAmountLimit, req.AmountCents, req.Currency, lim))
	case !c.Serves(req.Currency):
		return Unsendable(fmt.Errorf("the bank does not serve %s", Sanitize(req.Currency)))
	}
	return nil
}

// ErrAmountLimit is matched by the refusal of an amount a bank cannot take.
var ErrAmountLimit = errors.New("amount outside the bank's limits")

// Serves reports whether the bank serves currency.
func (c Capabilities) Serves(currency string) bool {
	return c.Currencies == nil || slices.Contains(c.Currencies, currency)
}

// FieldError is a settlement field a bank could never accept: intake
// refuses the event with 422 naming Field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Reason }

// Connector describes one kind of bank settle can pay through: its name
// (--bank), what it can do, how to reach it, and what it accepts.
type Connector struct {
	// Name is the --bank value.
	Name string
	// Summary is one line for --help and error messages.
	Summary string
	// Capabilities is what the bank can do.
	Capabilities Capabilities
	// New returns a client of the bank at baseURL.
	New func(baseURL string, opts Options) (Bank, error)
	// DefaultURL is the bank's base URL when none is given (--bank-url);
	// empty: DefaultURL of this package, the bundled fakebank.
	DefaultURL string
	// CheckEvent refuses a currency or beneficiary the bank could never
	// route, with a *FieldError; nil accepts everything.
	CheckEvent func(currency, beneficiary string) error
	// DefaultReturnWatch is how long after confirmation a returned payment
	// is still reported by the status API (--return-watch's default).
	DefaultReturnWatch time.Duration
	// VerifyWebhook checks a webhook by the bank's own signature scheme
	// with secret at now and returns the payment it names; nil when the
	// bank sends none.
	VerifyWebhook func(h http.Header, body []byte, secret string, now time.Time) (Hint, error)
}

// Check refuses what the connector could never send: a currency it does
// not serve, a beneficiary it cannot route.
func (c Connector) Check(currency, beneficiary string) error {
	if !c.Capabilities.Serves(currency) {
		return &FieldError{Field: "currency", Reason: fmt.Sprintf("is not served by the %s connector (it serves %s)", c.Name, strings.Join(c.Capabilities.Currencies, ", "))}
	}
	if c.CheckEvent != nil {
		return c.CheckEvent(currency, beneficiary)
	}
	return nil
}

// CheckAmount refuses, with a *FieldError naming amount_cents, an amount
// over the largest the connector's bank takes in currency
// (Capabilities.AmountLimit).
func (c Connector) CheckAmount(currency string, amount int64) error {
	if lim := c.Capabilities.AmountLimit(currency); lim > 0 && amount > lim {
		return &FieldError{Field: "amount_cents", Reason: fmt.Sprintf("is over the %s connector's limit of %d minor units of %s a payment", c.Name, lim, currency)}
	}
	return nil
}

// URL returns the connector's default base URL.
func (c Connector) URL() string {
	if c.DefaultURL != "" {
		return c.DefaultURL
	}
	return DefaultURL
}

// Connectors are the connectors a program offers, built by the program
// (cmd/settle lists settle's own, Stripe's and Open Banking's, the last
// with the configuration it read): there is no registry.
type Connectors []Connector

// Names lists the connectors' names, sorted.
func (cs Connectors) Names() []string {
	names := make([]string, 0, len(cs))
	for _, c := range cs {
		names = append(names, c.Name)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the connector called name; the error lists the known ones.
func (cs Connectors) Lookup(name string) (Connector, error) {
	for _, c := range cs {
		if c.Name == name {
			return c, nil
		}
	}
	return Connector{}, fmt.Errorf("unknown bank connector %q (known: %s)", name, strings.Join(cs.Names(), ", "))
}
