// Package obie is the UK Open Banking connector (--bank obie): each
// settlement is paid as a domestic payment of the Open Banking Read/Write
// API v3.1.11 (Payment Initiation): a consent (POST
// /domestic-payment-consents) under the settlement's consent key, then,
// once the account holder has authorised it at their bank (the
// authorization code grant with PKCE, authorise.go: the engine keeps their
// token sealed), the payment (POST /domestic-payments) with their token
// under the settlement's payment key, then its status by the bank's own id
// (GET /domestic-payments/{DomesticPaymentId}). Every request carries the
// spec's headers: the bearer token (the configured one, the account
// holder's for the payment), a fresh
// x-fapi-interaction-id, and on the POSTs the x-idempotency-key and a
// detached JWS (x-jws-signature) over the exact body, signed PS256 with
// SETTLE_BANK_SIGNING_KEY_FILE; the connection can present a client
// certificate (mutual TLS).
//
// The bank's word is the published spec (../shared/specs/obie-*): the
// OpenAPI document, the read-write data API profile (headers,
// idempotency, fair usage, errors, signing) and the payment initiation
// profile. Open Banking has no lookup by our key or reference and no list
// of payments: a lost answer is recovered by replaying the identical
// request under the same key within 24 hours (the bank answers 201 with
// the current resource), and returns are only seen on statements.
//
// Configuration, which settle reads from the environment (bankclient.OptionsFromEnv and
// ConfigFromEnv) and passes in; no key or token is ever logged:
//
//	SETTLE_BANK_TOKEN                 the bearer token (Authorization: Bearer …)
//	SETTLE_BANK_SIGNING_KEY_FILE      PEM RSA private key (PKCS#1 or PKCS#8, ≥ 2048 bits): required
//	SETTLE_BANK_CERT_FILE             PEM client certificate for mutual TLS (https only)
//	SETTLE_BANK_KEY_FILE              its PEM private key
//	SETTLE_BANK_CA_FILE               PEM CAs to trust for the bank instead of the system's
//	SETTLE_OBIE_ISS                   the signature's iss: required unless the bank is on this machine ("settle")
//	SETTLE_OBIE_TAN                   the signature's tan (default openbanking.org.uk)
//	SETTLE_OBIE_KID                   the signature's kid (default the key's RFC 7638 thumbprint)
//	SETTLE_OBIE_BANK_PUBLIC_KEY_FILE  the bank's public key: answers must then be signed with it
//	SETTLE_TOKEN_KEY                  32 random bytes, base64: seals the account holders' tokens (required,
//	SETTLE_TOKEN_KEY_FILE             or a file holding it)
//	SETTLE_OBIE_CLIENT_ID             our client id at the bank's authorisation server (default "settle" on this machine)
//	SETTLE_OBIE_AUTHORIZE_URL         the authorisation endpoint (default /authorize at the bank's host)
//	SETTLE_OBIE_TOKEN_URL             the token endpoint (default /token at the bank's host)
//
// --bank-url is the bank's host and any participant path prefix;
// /open-banking/v3.1/pisp is appended unless the URL already ends in it.
//
// It owns the mapping between settle's bank contract (package bankclient)
// and that API: the request bodies, the status tables, the answer classes
// (by HTTP status and the OBIE error codes, never by message text) and the
// signature. It must never retry with another key, body or signature
// input, never send duplicate payment initiations under one key less than
// a second apart (the profile's rule), never log or return a secret, and
// never decide anything about a settlement: it reports what the bank says.
package obie

import (
	"fmt"
	"math/big"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/settle/settle/bankclient"
)

// Name is the --bank value of the connector.
const Name = "obie"

// KeyWindow is how long the bank keeps an idempotency key: "The ASPSP
// must treat a request as idempotent if it had received the first request
// with the same x-idempotency-key from the same TPP in the preceding 24
// hours" (read-write data API profile, Idempotency).
const KeyWindow = 24 * time.Hour

// KeyMaxLen: "The x-idempotency-key provided in the header must be at
// most 40 characters in size" (same section). Ours are UUIDs, 36.
const KeyMaxLen = 40

// RefMaxLen is the longest reference sent as EndToEndIdentification: the
// field takes 35 characters, but "The Faster Payments Scheme can only
// access 31 characters for the EndToEndIdentification field" (OpenAPI
// document, OBWriteDomestic2), so a longer reference would not identify
// the payment on the scheme's side or on statements.
const RefMaxLen = 31

// RefAllowed is what a reference may hold besides ASCII letters and
// digits: the rest of the SWIFT "x" character set Faster Payments carries
// (/ - ? : ( ) . , ' +), without the space, which a bank may trim.
const RefAllowed = "/-?:().,'+"

// Currencies are the currencies the connector sends: GBP only. Domestic
// payments travel on the UK's domestic schemes (Faster Payments, Bacs,
// CHAPS), which settle in sterling. The spec does list SEPA local
// instruments, but whether an ASPSP takes euro on its domestic-payments
// endpoint is its own choice, documented only on its developer portal
// ("Each ASPSP must determine appropriate restrictions that they support",
// payment initiation profile, Payment Restrictions); euro to an IBAN
// abroad is an international payment, another resource. An event in euro
// is therefore refused at intake rather than failed by the bank after its
// consent.
var Currencies = []string{"GBP"}

// MaxAmounts are the largest amounts the connector sends, in minor units:
// £1,000,000 in GBP, the Faster Payments scheme's limit on one payment
// (Pay.UK), the scheme the connector's references are cut for (RefMaxLen).
// The API's own format, OBActiveCurrencyAndAmount_SimpleType, carries 13
// integer digits (FormatAmount refuses more); "the maximum
// InstructedAmount allowable" is each ASPSP's to set (payment initiation
// profile, Payment Restrictions), so --max-amount may lower it further.
var MaxAmounts = map[string]int64{"GBP": 100_000_000}

// Capabilities is what the Open Banking domestic payments API offers: a
// payment is read by the bank's id only; a replay under the same key
// within 24 hours answers 201 with the current resource; there is no
// lookup by key or reference, no list of payments, and a payment that
// comes back is seen only on a statement; every payment needs a consent.
var Capabilities = bankclient.Capabilities{
	LookupByID:              true,
	Replay:                  bankclient.ReplayCurrent,
	KeyWindow:               KeyWindow,
	KeyMaxLen:               KeyMaxLen,
	RefMaxLen:               RefMaxLen,
	RefAllowed:              RefAllowed,
	RefASCIIOnly:            true,
	Currencies:              Currencies,
	MaxAmounts:              MaxAmounts,
	Consent:                 true,
	Authorisation:           true,
	ReturnsOnStatementsOnly: true,
	NoList:                  true,
}

// NewConnector returns the Open Banking connector ("obie") configured
// with cfg, which its caller reads (settle's from the environment,
// ConfigFromEnv); the rest comes from bankclient.Options.
func NewConnector(cfg Config) bankclient.Connector {
	return bankclient.Connector{
		Name:         Name,
		Summary:      "UK Open Banking domestic payments v3.1.11 (consent, the account holder's authorisation, then payment); signing key in SETTLE_BANK_SIGNING_KEY_FILE, token key in SETTLE_TOKEN_KEY or SETTLE_TOKEN_KEY_FILE",
		Capabilities: Capabilities,
		New: func(baseURL string, opts bankclient.Options) (bankclient.Bank, error) {
			return New(baseURL, opts, cfg)
		},
		CheckEvent: CheckEvent,
		// Returns come from imported statements only.
		DefaultReturnWatch: 0,
		// No webhooks: the bank may send event notifications, but their
		// profile is not among the published documents this connector
		// follows, so nothing here could verify one.
		VerifyWebhook: nil,
	}
}

// The schemes a beneficiary can name (DESIGN.md section 13), and the
// OBExternalAccountIdentification4Code each travels as.
const (
	SchemeSortCode = "SortCodeAccountNumber"
	SchemeIBAN     = "IBAN"

	obSchemeSortCode = "UK.OBIE.SortCodeAccountNumber"
	obSchemeIBAN     = "UK.OBIE.IBAN"
)

// MaxNameLen is the longest creditor name: CreditorAccount.Name is
// minLength 1, maxLength 350 in the OpenAPI document.
const MaxNameLen = 350

// Creditor is a beneficiary parsed: the account the payment goes to.
type Creditor struct {
	// Scheme is SchemeSortCode or SchemeIBAN.
	Scheme string
	// Identification is the 14 digits of sort code and account number,
	// or the IBAN (upper case, no spaces).
	Identification string
	// Name is the account holder's name.
	Name string
}

// String is the beneficiary form of c.
func (c Creditor) String() string { return c.Scheme + ":" + c.Identification + ":" + c.Name }

// ParseBeneficiary reads a beneficiary in the form DESIGN.md section 13
// fixes for this connector, SCHEME:IDENTIFICATION:NAME:
//
//	SortCodeAccountNumber:08080021325698:ACME Ltd   (6-digit sort code, 8-digit account)
//	IBAN:GB29NWBK60161331926819:ACME Ltd             (a valid UK IBAN)
//
// The name runs to the end (it may hold colons); it has 1 to 350
// characters, none of them control characters. The IBAN must pass the ISO
// 13616 check digits and be a UK one: a domestic payment cannot reach an
// account abroad.
func ParseBeneficiary(s string) (Creditor, error) {
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Creditor{}, fmt.Errorf("is not SCHEME:IDENTIFICATION:NAME")
	}
	ident, name, ok := strings.Cut(rest, ":")
	if !ok {
		return Creditor{}, fmt.Errorf("has no name (SCHEME:IDENTIFICATION:NAME)")
	}
	switch scheme {
	case SchemeSortCode:
		if len(ident) != 14 || strings.Trim(ident, "0123456789") != "" {
			return Creditor{}, fmt.Errorf("sort code and account number must be 14 digits")
		}
	case SchemeIBAN:
		if err := checkIBAN(ident); err != nil {
			return Creditor{}, err
		}
	default:
		return Creditor{}, fmt.Errorf("scheme %q is not %s or %s", bankclient.Sanitize(scheme), SchemeSortCode, SchemeIBAN)
	}
	if err := checkName(name); err != nil {
		return Creditor{}, err
	}
	return Creditor{Scheme: scheme, Identification: ident, Name: name}, nil
}

// checkName applies the spec's limits to a creditor name.
func checkName(name string) error {
	switch n := utf8.RuneCountInString(name); {
	case !utf8.ValidString(name):
		return fmt.Errorf("name is not valid UTF-8")
	case n == 0:
		return fmt.Errorf("name is empty")
	case n > MaxNameLen:
		return fmt.Errorf("name has %d characters, more than %d", n, MaxNameLen)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("name starts or ends with a space")
	}
	for _, r := range name {
		if !unicode.IsPrint(r) && r != ' ' {
			return fmt.Errorf("name holds a control or unprintable character")
		}
	}
	return nil
}

// ukIBANLen is the length of a GB IBAN: GBkk, a 4-letter bank code, a
// 6-digit sort code and an 8-digit account number.
const ukIBANLen = 22

// checkIBAN checks an IBAN as written (upper case, no spaces): a UK one,
// its structure, and its ISO 13616 mod-97 check digits.
func checkIBAN(iban string) error {
	if len(iban) != ukIBANLen || !strings.HasPrefix(iban, "GB") {
		return fmt.Errorf("IBAN must be a UK IBAN (GB, %d characters, no spaces): a domestic payment cannot reach an account abroad", ukIBANLen)
	}
	for i := 0; i < len(iban); i++ {
		c := iban[i]
		letter := c >= 'A' && c <= 'Z'
		digit := c >= '0' && c <= '9'
		switch {
		case i < 2 && !letter, i >= 2 && i < 4 && !digit, i >= 4 && i < 8 && !letter, i >= 8 && !digit:
			return fmt.Errorf("IBAN is not GBkk BBBB SSSSSS AAAAAAAA")
		}
	}
	// ISO 13616: move the first four characters to the end, letters to
	// numbers (A=10 … Z=35); the number mod 97 is 1.
	var digits strings.Builder
	for _, c := range iban[4:] + iban[:4] {
		if c >= 'A' && c <= 'Z' {
			fmt.Fprintf(&digits, "%d", c-'A'+10)
		} else {
			digits.WriteRune(c)
		}
	}
	n, _ := new(big.Int).SetString(digits.String(), 10)
	if new(big.Int).Mod(n, big.NewInt(97)).Int64() != 1 {
		return fmt.Errorf("IBAN check digits are wrong")
	}
	return nil
}

// CheckEvent refuses at intake a beneficiary the connector cannot route:
// anything but SortCodeAccountNumber:<14 digits>:<name> or
// IBAN:<UK IBAN>:<name>. (The currency is checked against Currencies by
// bankclient.Connector.Check before.)
func CheckEvent(_, beneficiary string) error {
	if _, err := ParseBeneficiary(beneficiary); err != nil {
		return &bankclient.FieldError{Field: "beneficiary", Reason: err.Error() + " (the obie connector takes SortCodeAccountNumber:<14 digits>:<name> or IBAN:<UK IBAN>:<name>)"}
	}
	return nil
}
