package bankclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/settle/settle/internal/retryafter"
)

// answer is one HTTP answer of the bank, read and bounded.
type answer struct {
	status int
	header http.Header
	body   []byte
	// tooLarge is set when the body exceeded the size limit; body then holds
	// only its beginning.
	tooLarge bool
}

// parsePayment decodes and validates a payment body. Every error wraps
// ErrMalformedResponse.
func parsePayment(body []byte) (Payment, error) {
	var p Payment
	if err := checkDuplicateKeys(body); err != nil {
		return Payment{}, err
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return Payment{}, fmt.Errorf("%w: error decoding payment: %w", ErrMalformedResponse, err)
	}
	if err := validatePayment(p); err != nil {
		return Payment{}, err
	}
	return p, nil
}

// maxJSONDepth bounds the nesting of a bank answer.
const maxJSONDepth = 32

// errDuplicateKey and errTooDeep are the causes CheckJSONKeys reports.
var (
	errDuplicateKey = errors.New("duplicate object key")
	errTooDeep      = errors.New("nesting too deep")
)

// checkDuplicateKeys is CheckJSONKeys, its error wrapping
// ErrMalformedResponse.
func checkDuplicateKeys(body []byte) error {
	if err := CheckJSONKeys(body); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedResponse, err)
	}
	return nil
}

// CheckJSONKeys refuses a JSON document with a repeated key in any object,
// or nested deeper than 32 levels: an answer whose meaning depends on
// which of two values a parser keeps ({"status":"failed","status":
// "settled"}) is not an answer to act on. Syntax errors are left to the
// decoder that follows. A connector calls it on every bank answer before
// decoding it.
func CheckJSONKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]struct{}
		expect bool // in an object: the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			// A syntax error: the json.Unmarshal that follows reports it,
			// classified with the rest of the body's problems.
			return nil //nolint:nilerr // deliberate, see above
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if len(stack) >= maxJSONDepth {
					return errTooDeep
				}
				if top != nil && top.object {
					top.expect = true // this value ends; a key comes next
				}
				stack = append(stack, &frame{object: d == '{', keys: map[string]struct{}{}, expect: d == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if top == nil || !top.object {
			continue
		}
		if top.expect {
			k, _ := tok.(string)
			if _, dup := top.keys[k]; dup {
				return fmt.Errorf("%w %q", errDuplicateKey, Sanitize(k))
			}
			top.keys[k] = struct{}{}
			top.expect = false
			continue
		}
		top.expect = true // a scalar value ends; a key comes next
	}
}

// validatePayment checks the fields the engine relies on.
func validatePayment(p Payment) error {
	if p.ID == "" {
		return fmt.Errorf("%w: payment without id", ErrMalformedResponse)
	}
	if !p.Status.Valid() {
		return fmt.Errorf("%w: payment %q with unknown status %q", ErrMalformedResponse, Sanitize(p.ID), Sanitize(string(p.Status)))
	}
	if p.AmountCents < 0 {
		return fmt.Errorf("%w: payment %q with negative amount", ErrMalformedResponse, Sanitize(p.ID))
	}
	return nil
}

// parseStatement decodes and validates a statement page. Every error wraps
// ErrMalformedResponse.
func parseStatement(body []byte) (StatementPage, error) {
	var page struct {
		Payments *[]Payment `json:"payments"`
		Next     string     `json:"next"`
	}
	if err := checkDuplicateKeys(body); err != nil {
		return StatementPage{}, err
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return StatementPage{}, fmt.Errorf("%w: error decoding statement: %w", ErrMalformedResponse, err)
	}
	if page.Payments == nil {
		return StatementPage{}, fmt.Errorf("%w: statement without payments", ErrMalformedResponse)
	}
	for i, p := range *page.Payments {
		if err := validatePayment(p); err != nil {
			return StatementPage{}, fmt.Errorf("error in statement entry %d: %w", i, err)
		}
	}
	return StatementPage{Payments: *page.Payments, Next: page.Next}, nil
}

// checkEcho verifies that a payment answered for key and req is that
// payment: a bank that answers with another key, reference or amount is not
// giving an answer we can act on. Fields the bank left empty are not
// checked. Every error wraps ErrMalformedResponse.
func checkEcho(p Payment, key string, req *PaymentRequest) error {
	if key != "" && p.IdempotencyKey != "" && p.IdempotencyKey != key {
		return fmt.Errorf("%w: payment %q carries another idempotency key", ErrMalformedResponse, Sanitize(p.ID))
	}
	if req == nil {
		return nil
	}
	if p.Reference != "" && p.Reference != req.Reference {
		return fmt.Errorf("%w: payment %q carries another reference", ErrMalformedResponse, Sanitize(p.ID))
	}
	if p.AmountCents != 0 && p.AmountCents != req.AmountCents {
		return fmt.Errorf("%w: payment %q carries another amount", ErrMalformedResponse, Sanitize(p.ID))
	}
	if p.Currency != "" && p.Currency != req.Currency {
		return fmt.Errorf("%w: payment %q carries another currency", ErrMalformedResponse, Sanitize(p.ID))
	}
	return nil
}

// classifySend turns an answer to POST /v1/payments into its outcome.
func classifySend(a answer, key string, req PaymentRequest) (SendResult, string, error) {
	switch a.status {
	case http.StatusCreated, http.StatusOK:
		p, err := parseAccepted(a, key, &req)
		if err != nil {
			return SendResult{}, OutcomeAmbiguous, err
		}
		replayed := a.status == http.StatusOK || a.header.Get("Idempotent-Replayed") == "true"
		if replayed {
			return SendResult{Payment: p, Replayed: true}, OutcomeReplayed, nil
		}
		return SendResult{Payment: p}, OutcomeAccepted, nil

	case http.StatusUnprocessableEntity:
		eb, ok := parseErrorBody(a)
		if !ok {
			// Without the code we cannot tell a rejection from key reuse,
			// and key reuse means a payment may exist under this key.
			return SendResult{}, OutcomeAmbiguous, ambiguousStatus(a, "", false)
		}
		if eb.Error == ErrorCodeKeyReuse {
			return SendResult{}, OutcomeKeyReuse, ErrKeyReuse
		}
		return SendResult{}, OutcomeRejected, &RejectedError{StatusCode: a.status, Code: Sanitize(eb.Error), Reason: Sanitize(eb.Reason)}

	case http.StatusBadRequest:
		eb, _ := parseErrorBody(a)
		return SendResult{}, OutcomeRejected, &RejectedError{StatusCode: a.status, Code: Sanitize(eb.Error), Reason: Sanitize(eb.Reason)}
	}
	outcome, err := classifyOther(a)
	return SendResult{}, outcome, err
}

// classifyStatus turns an answer to GET /v1/payments/by-key/{key} into its
// outcome.
func classifyStatus(a answer, key string) (Payment, string, error) {
	switch a.status {
	case http.StatusOK:
		p, err := parseAccepted(a, key, nil)
		if err != nil {
			return Payment{}, OutcomeAmbiguous, err
		}
		return p, OutcomeAccepted, nil
	case http.StatusNotFound:
		return Payment{}, OutcomeNotFound, ErrNotFound
	}
	outcome, err := classifyOther(a)
	return Payment{}, outcome, err
}

// classifyStatement turns an answer to GET /v1/statement into its outcome.
func classifyStatement(a answer) (StatementPage, string, error) {
	if a.status == http.StatusOK {
		if a.tooLarge {
			return StatementPage{}, OutcomeAmbiguous, ambiguousMalformed(a, fmt.Errorf("%w: statement larger than the size limit", ErrMalformedResponse))
		}
		page, err := parseStatement(a.body)
		if err != nil {
			return StatementPage{}, OutcomeAmbiguous, ambiguousMalformed(a, err)
		}
		return page, OutcomeAccepted, nil
	}
	outcome, err := classifyOther(a)
	return StatementPage{}, outcome, err
}

// parseAccepted parses and checks the payment of a 2xx answer; its errors
// are ambiguous and retryable.
func parseAccepted(a answer, key string, req *PaymentRequest) (Payment, error) {
	if a.tooLarge {
		return Payment{}, ambiguousMalformed(a, fmt.Errorf("%w: body larger than the size limit", ErrMalformedResponse))
	}
	p, err := parsePayment(a.body)
	if err == nil {
		err = checkEcho(p, key, req)
	}
	if err != nil {
		return Payment{}, ambiguousMalformed(a, err)
	}
	return p, nil
}

// classifyOther classifies the answers that mean the same for every
// operation: everything but the definitive ones.
func classifyOther(a answer) (string, error) {
	eb, _ := parseErrorBody(a)
	switch {
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
		return OutcomeUnauthorized, ambiguousStatus(a, eb.Error, false)
	case a.status >= 500,
		a.status == http.StatusTooManyRequests,
		a.status == http.StatusRequestTimeout,
		a.status == http.StatusConflict, // a concurrent request with this key is in flight
		a.status == http.StatusTooEarly,
		a.status >= 200 && a.status < 300: // 202, 204: an answer we cannot act on
		return OutcomeAmbiguous, ambiguousStatus(a, eb.Error, true)
	}
	return OutcomeAmbiguous, ambiguousStatus(a, eb.Error, false)
}

// parseErrorBody decodes an error body; ok is false when it is not one.
func parseErrorBody(a answer) (ErrorBody, bool) {
	if a.tooLarge {
		return ErrorBody{}, false
	}
	var eb ErrorBody
	if err := json.Unmarshal(a.body, &eb); err != nil || eb.Error == "" {
		return ErrorBody{}, false
	}
	return eb, true
}

// ambiguousStatus builds the error of an answer that is not definitive.
func ambiguousStatus(a answer, code string, retry bool) *AmbiguousError {
	return &AmbiguousError{
		StatusCode: a.status,
		RetryAfter: retryAfterOf(a.header),
		Err:        &StatusError{StatusCode: a.status, Code: Sanitize(code)},
		retry:      retry,
	}
}

// ambiguousMalformed builds the error of a 2xx answer that is not valid.
func ambiguousMalformed(a answer, err error) *AmbiguousError {
	return &AmbiguousError{StatusCode: a.status, Err: err, retry: true}
}

// retryAfterOf is the wait a bank's Retry-After asks for (0 when none).
func retryAfterOf(h http.Header) time.Duration {
	d, _ := retryafter.Parse(h, time.Now())
	return d
}
