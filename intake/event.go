package intake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/settle/settle/ledger"
	"github.com/settle/settle/settlement"
)

// Limits of an event (DESIGN.md section 6 and the CHECKs of the schema).
const (
	// MaxEventBytes is the largest accepted event body (64 KiB).
	MaxEventBytes = 64 << 10
	// MaxSettlementIDLen is the longest settlement_id, in characters.
	MaxSettlementIDLen = 128
	// MaxAccountIDLen is the longest account_id, in characters.
	MaxAccountIDLen = 128
	// MaxBeneficiaryLen is the longest beneficiary, in characters.
	MaxBeneficiaryLen = 256
	// MaxEventIDLen is the longest event_id, in characters.
	MaxEventIDLen = 256
)

// Event is one decoded, validated payout event. The business fields
// (SettlementID, AccountID, AmountCents, Currency, Beneficiary) define the
// operation and its payload hash; OccurredAt and EventID describe the
// delivery and never affect the hash.
//
// The JSON tags are the API's wire format, for producers (submit, the demo,
// the tests) that encode events; DecodeEvent does not use them: it decodes
// strictly, token by token.
type Event struct {
	SettlementID string `json:"settlement_id"`
	AccountID    string `json:"account_id"`
	AmountCents  int64  `json:"amount_cents"`
	Currency     string `json:"currency"`
	Beneficiary  string `json:"beneficiary"`
	// OccurredAt is when the producer says the event happened; zero when
	// the event did not say.
	OccurredAt time.Time `json:"occurred_at,omitzero"`
	// EventID is the producer's id of this message; empty when absent.
	EventID string `json:"event_id,omitempty"`
	// Bank is the configured name of the bank that must pay it; empty
	// when the event leaves it to the worker's routing rules (--route).
	// Named, it is part of the payload hash; absent, the hash is the one
	// an event had before settlements had banks.
	Bank string `json:"bank,omitempty"`
}

// Kinds of invalid input, matched with errors.Is on an *InvalidError.
var (
	// ErrMalformed: the body is not one well-formed JSON object (syntax,
	// invalid UTF-8, duplicate keys, trailing data). HTTP 400.
	ErrMalformed = errors.New("malformed event")
	// ErrInvalid: the object is well formed but a field is missing,
	// unknown, of the wrong type or out of range. HTTP 422.
	ErrInvalid = errors.New("invalid event")
	// ErrTooOld: occurred_at is older than the replay horizon. HTTP 422.
	ErrTooOld = errors.New("event older than the replay horizon")
	// ErrTooLarge: the body (or the batch) is over its size limit. HTTP 413.
	ErrTooLarge = errors.New("event too large")
)

// InvalidError says why an event was refused and which field is at fault.
type InvalidError struct {
	// Kind is ErrMalformed, ErrInvalid, ErrTooOld or ErrTooLarge.
	Kind error
	// Field is the JSON field at fault; empty when the body as a whole is.
	Field string
	// Reason is a short human-readable explanation (no payload text beyond
	// the field name).
	Reason string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%v: %s", e.Kind, e.Reason)
	}
	return fmt.Sprintf("%v: %s: %s", e.Kind, e.Field, e.Reason)
}

func (e *InvalidError) Unwrap() error { return e.Kind }

func malformed(field, reason string) error {
	return &InvalidError{Kind: ErrMalformed, Field: field, Reason: reason}
}

func invalid(field, reason string) error {
	return &InvalidError{Kind: ErrInvalid, Field: field, Reason: reason}
}

// The JSON field names of an event.
const (
	fieldSettlementID = "settlement_id"
	fieldAccountID    = "account_id"
	fieldAmountCents  = "amount_cents"
	fieldCurrency     = "currency"
	fieldBeneficiary  = "beneficiary"
	fieldOccurredAt   = "occurred_at"
	fieldEventID      = "event_id"
	fieldBank         = "bank"
)

// requiredFields are checked for presence in this order.
var requiredFields = []string{fieldSettlementID, fieldAccountID, fieldAmountCents, fieldCurrency, fieldBeneficiary}

// DecodeEvent decodes and validates one event. It is strict on purpose (a
// payload whose meaning depends on the parser is not a payload to pay): the
// body must be valid UTF-8 and exactly one JSON object with no duplicate
// and no unknown keys; amount_cents must be a JSON integer literal (not
// 1.0, not 1e3, not a string) in 1..2^63-1; currency must be one a payout
// can be made in (settlement.PayoutCurrency); strings may hold only
// graphic characters (no control, format or separator character, no
// U+FFFD). Every refusal is an *InvalidError. It does not
// check the replay horizon: see Event.CheckHorizon.
func DecodeEvent(data []byte) (Event, error) {
	if len(data) > MaxEventBytes {
		return Event{}, &InvalidError{Kind: ErrTooLarge, Reason: fmt.Sprintf("body is over %d bytes", MaxEventBytes)}
	}
	if !utf8.Valid(data) {
		return Event{}, malformed("", "body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return Event{}, malformed("", "body is not JSON")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Event{}, malformed("", "body must be a JSON object")
	}
	var ev Event
	seen := make(map[string]bool, 8)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Event{}, malformed("", "body is not valid JSON")
		}
		key, ok := tok.(string)
		if !ok {
			return Event{}, malformed("", "body is not valid JSON")
		}
		if seen[key] {
			return Event{}, malformed(printableField(key), "duplicate key")
		}
		seen[key] = true
		val, err := dec.Token()
		if err != nil {
			return Event{}, malformed(printableField(key), "body is not valid JSON")
		}
		if err := ev.set(key, val); err != nil {
			return Event{}, err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return Event{}, malformed("", "body is not valid JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Event{}, malformed("", "unexpected data after the JSON object")
	}
	for _, f := range requiredFields {
		if !seen[f] {
			return Event{}, invalid(f, "required field is missing")
		}
	}
	return ev, nil
}

// set validates one field's value and stores it in ev.
func (ev *Event) set(key string, val json.Token) error {
	switch key {
	case fieldSettlementID:
		s, err := stringField(key, val, 1, MaxSettlementIDLen)
		if err != nil {
			return err
		}
		for _, r := range s {
			if !unicode.IsPrint(r) {
				return invalid(key, "must hold printable characters only")
			}
		}
		ev.SettlementID = s
	case fieldAccountID:
		s, err := stringField(key, val, 1, MaxAccountIDLen)
		if err != nil {
			return err
		}
		if ledger.CheckAccountID(s) != nil {
			return invalid(key, "must not start with "+ledger.SystemPrefix+" (the ledger's own accounts)")
		}
		ev.AccountID = s
	case fieldBeneficiary:
		s, err := stringField(key, val, 1, MaxBeneficiaryLen)
		if err != nil {
			return err
		}
		ev.Beneficiary = s
	case fieldCurrency:
		s, ok := val.(string)
		if !ok {
			return invalid(key, "must be a string")
		}
		if _, err := settlement.PayoutCurrency(s); err != nil {
			if np := (*settlement.NotPayableError)(nil); errors.As(err, &np) {
				return invalid(key, np.Reason+": no payout can be made in it")
			}
			return invalid(key, "must be an ISO 4217 currency code with minor units (such as EUR, USD, JPY)")
		}
		ev.Currency = s
	case fieldAmountCents:
		n, ok := val.(json.Number)
		if !ok {
			return invalid(key, "must be a JSON integer (minor units)")
		}
		amount, err := parseAmount(string(n))
		if err != nil {
			return invalid(key, err.Error())
		}
		ev.AmountCents = amount
	case fieldOccurredAt:
		if val == nil {
			return nil
		}
		s, ok := val.(string)
		if !ok {
			return invalid(key, "must be an RFC 3339 timestamp string")
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || len(s) > 64 {
			return invalid(key, "must be an RFC 3339 timestamp")
		}
		ev.OccurredAt = t
	case fieldEventID:
		if val == nil {
			return nil
		}
		s, err := stringField(key, val, 0, MaxEventIDLen)
		if err != nil {
			return err
		}
		ev.EventID = s
	case fieldBank:
		s, ok := val.(string)
		if !ok {
			return invalid(key, "must be a string naming a configured bank")
		}
		if err := settlement.CheckBankName(s); err != nil {
			return invalid(key, err.Error())
		}
		ev.Bank = s
	default:
		return invalid(printableField(key), "unknown field")
	}
	return nil
}

// stringField checks that val is a string of min..max characters, every
// one graphic (unicode.IsGraphic: letters, marks, numbers, punctuation,
// symbols and spaces), and none U+FFFD (which the JSON decoder substitutes
// for lone surrogates, so it could hide a different input). Controls,
// format characters (Cf: bidi overrides such as U+202E, zero-width
// characters, the BOM, the soft hyphen), line and paragraph separators,
// private-use and unassigned code points are refused: they make text show
// on the console and in logs as something other than what it is.
func stringField(key string, val json.Token, min, max int) (string, error) {
	s, ok := val.(string)
	if !ok {
		return "", invalid(key, "must be a string")
	}
	n := 0
	for _, r := range s {
		n++
		if !unicode.IsGraphic(r) || r == utf8.RuneError {
			return "", invalid(key, "contains a control, format, separator or invalid character")
		}
	}
	if n < min || n > max {
		if min > 0 {
			return "", invalid(key, fmt.Sprintf("must be %d to %d characters long", min, max))
		}
		return "", invalid(key, fmt.Sprintf("must be at most %d characters long", max))
	}
	return s, nil
}

// parseAmount accepts only a positive decimal integer literal that fits int64.
func parseAmount(lit string) (int64, error) {
	if lit == "" || strings.ContainsAny(lit, ".eE+") {
		return 0, errors.New("must be an integer number of minor units (no fraction, no exponent)")
	}
	if lit[0] == '-' || lit == "0" {
		return 0, errors.New("must be positive")
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		return 0, errors.New("must fit in a signed 64-bit integer")
	}
	return n, nil
}

// printableField returns key fit to be echoed in a problem body and a log
// line: truncated and stripped of non-printable characters.
func printableField(key string) string {
	const max = 64
	var b strings.Builder
	for _, r := range key {
		if b.Len() >= max {
			b.WriteString("…")
			break
		}
		if unicode.IsPrint(r) && r != utf8.RuneError {
			b.WriteRune(r)
		} else {
			b.WriteRune('?')
		}
	}
	return b.String()
}

// MaxClockSkew is how far in the future an event's occurred_at may lie:
// producers' clocks drift, but an event from next year is a bug or a
// forgery, and refused.
const MaxClockSkew = 5 * time.Minute

// CheckHorizon refuses an event whose occurred_at is older than horizon at
// now (ErrTooOld): receipts are kept only that long, so an older event
// might be a redelivery whose receipt is gone and must not be paid again.
// It refuses too an occurred_at more than MaxClockSkew ahead of now. An
// event without occurred_at passes; a horizon ≤ 0 checks only the future.
func (ev Event) CheckHorizon(now time.Time, horizon time.Duration) error {
	if ev.OccurredAt.IsZero() {
		return nil
	}
	if ev.OccurredAt.Sub(now) > MaxClockSkew {
		return invalid(fieldOccurredAt, fmt.Sprintf("lies in the future (more than %s ahead of the server's clock)", MaxClockSkew))
	}
	if horizon <= 0 {
		return nil
	}
	if now.Sub(ev.OccurredAt) > horizon {
		return &InvalidError{Kind: ErrTooOld, Field: fieldOccurredAt, Reason: fmt.Sprintf("is older than the replay horizon (%s)", horizon)}
	}
	return nil
}

// businessJSON is the JSON of the business fields, recorded with a
// conflict for investigation.
func (ev Event) businessJSON() []byte {
	b, _ := json.Marshal(struct {
		SettlementID string `json:"settlement_id"`
		AccountID    string `json:"account_id"`
		AmountCents  int64  `json:"amount_cents"`
		Currency     string `json:"currency"`
		Beneficiary  string `json:"beneficiary"`
		Bank         string `json:"bank,omitempty"`
	}{ev.SettlementID, ev.AccountID, ev.AmountCents, ev.Currency, ev.Beneficiary, ev.Bank})
	return b
}
