package bankclient

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrKeyReuse is returned by Send when the bank already holds a different
// body under the idempotency key (422 idempotency_key_reuse). It is a bug or
// a data problem: never retried, and never a rejection of the payment.
var ErrKeyReuse = errors.New("idempotency key reused with a different body")

// ErrNotFound is returned by StatusByKey when the bank answers 404: it never
// saw the key (or has forgotten it, see DESIGN.md rule 9).
var ErrNotFound = errors.New("bank does not know the idempotency key")

// ErrUnauthorized is matched (errors.Is) by an answer of 401 or 403: our
// credential or client certificate is wrong. It always comes inside an
// *AmbiguousError, because it says nothing about the payment.
var ErrUnauthorized = errors.New("bank refused our credentials")

// ErrMalformedResponse is wrapped by an *AmbiguousError when the bank answered
// 2xx with a body that is not a valid answer of the protocol (unparseable,
// too large, an unknown status, another key or amount than requested).
var ErrMalformedResponse = errors.New("malformed response from bank")

// AmbiguousError reports that the bank gave no definitive answer: it may or
// may not have acted on the request. A settlement that gets one is uncertain
// and is resolved only by asking the bank's status API.
type AmbiguousError struct {
	// Op is the operation, one of the Op constants.
	Op string
	// StatusCode is the HTTP status of the last answer, 0 when there was none
	// (timeout, connection reset, closed without an answer).
	StatusCode int
	// Attempts is how many requests were sent in this call.
	Attempts int
	// RetryAfter is the delay the bank asked for in a Retry-After header of
	// its last answer, 0 when it gave none.
	RetryAfter time.Duration
	// Err is the cause: a transport error, a context error, a *StatusError or
	// an error wrapping ErrMalformedResponse.
	Err error
}

// Error implements error.
func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("no definitive answer from bank after %d attempt(s): %v", e.Attempts, e.Err)
}

// Unwrap returns the cause.
func (e *AmbiguousError) Unwrap() error { return e.Err }

// RejectedError reports a definitive refusal of a payment by the bank (422
// rejected, or 400), or of a request the connector cannot build for its
// bank (Unsendable: StatusCode 0, nothing sent). Only Send and
// CreateConsent return it; the payment will never be executed under this
// key.
type RejectedError struct {
	// StatusCode is the HTTP status of the answer (400 or 422); 0 when the
	// request could not be built and nothing was sent.
	StatusCode int
	// Code is the "error" field of the body, for example "rejected"; it may be
	// empty for a 400 without a JSON body. CodeUnsendable when nothing was
	// sent.
	Code string
	// Reason is the bank's "reason" field, sanitized and truncated.
	Reason string
	// Err is the cause of an unsendable request; nil for the bank's answer.
	Err error
}

// CodeUnsendable is the Code of a RejectedError for a request the
// connector cannot build for its bank.
const CodeUnsendable = "unsendable"

// Unsendable is the definitive refusal of a request the connector cannot
// build for its bank: an amount its format cannot carry or over the limit
// it declares (Capabilities.AmountLimit), a creditor it cannot address.
// Nothing was sent, and the identical request never can be, so retrying
// it would only keep the settlement waiting for ever: the engine records
// it in bank_attempts and fails the settlement as for the bank's own
// refusal. reason is the cause, kept (errors.Is/As) and sanitized.
func Unsendable(reason error) *RejectedError {
	return &RejectedError{Code: CodeUnsendable, Reason: Sanitize(reason.Error()), Err: reason}
}

// Unwrap returns the cause of an unsendable request.
func (e *RejectedError) Unwrap() error { return e.Err }

// Error implements error.
func (e *RejectedError) Error() string {
	if e.StatusCode == 0 && e.Code == CodeUnsendable {
		return "the request cannot be sent to this bank: " + e.Reason
	}
	msg := fmt.Sprintf("bank rejected the payment (HTTP %d", e.StatusCode)
	if e.Code != "" {
		msg += " " + e.Code
	}
	msg += ")"
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// StatusError is the cause inside an *AmbiguousError when the bank answered
// with an HTTP status that is not definitive for the operation (5xx, 429, 401,
// an unexpected 4xx or 3xx).
type StatusError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the "error" field of a JSON body, if there was one.
	Code string
}

// Error implements error.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("bank answered HTTP %d", e.StatusCode)
	if e.Code != "" {
		msg += " (" + e.Code + ")"
	}
	return msg
}

// Is makes a 401 or 403 match ErrUnauthorized.
func (e *StatusError) Is(target error) bool {
	return target == ErrUnauthorized &&
		(e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden)
}

// IsAmbiguous reports whether err means the bank may or may not have acted.
func IsAmbiguous(err error) bool {
	var ae *AmbiguousError
	return errors.As(err, &ae)
}

// IsRejected reports whether err is a definitive rejection of the payment.
func IsRejected(err error) bool {
	var re *RejectedError
	return errors.As(err, &re)
}

// IsKeyReuse reports whether the bank holds another body under the key.
func IsKeyReuse(err error) bool { return errors.Is(err, ErrKeyReuse) }

// IsNotFound reports whether the bank does not know the key.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsUnauthorized reports whether the bank refused our credentials. Such an
// error is also ambiguous.
func IsUnauthorized(err error) bool { return errors.Is(err, ErrUnauthorized) }

// maxReasonLen bounds the bank-supplied text kept in a RejectedError.
const maxReasonLen = 256

// Sanitize keeps bank-supplied text printable and short (256 bytes), so
// that it is safe to put in logs and error strings. Connectors use it on
// whatever text their bank sends.
func Sanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > maxReasonLen {
		s = s[:maxReasonLen]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}
