package settle

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
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
func parsePayment(body []byte) (bankclient.Payment, error) {
	var p bankclient.Payment
	if err := checkDuplicateKeys(body); err != nil {
		return bankclient.Payment{}, err
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return bankclient.Payment{}, fmt.Errorf("%w: error decoding payment: %w", bankclient.ErrMalformedResponse, err)
	}
	if err := validatePayment(p); err != nil {
		return bankclient.Payment{}, err
	}
	return p, nil
}

// checkDuplicateKeys is CheckJSONKeys, its error wrapping
// ErrMalformedResponse.
func checkDuplicateKeys(body []byte) error {
	if err := bankhttp.CheckJSONKeys(body); err != nil {
		return fmt.Errorf("%w: %w", bankclient.ErrMalformedResponse, err)
	}
	return nil
}

// validatePayment checks the fields the engine relies on.
func validatePayment(p bankclient.Payment) error {
	if p.ID == "" {
		return fmt.Errorf("%w: payment without id", bankclient.ErrMalformedResponse)
	}
	if !p.Status.Valid() {
		return fmt.Errorf("%w: payment %q with unknown status %q", bankclient.ErrMalformedResponse, bankclient.Sanitize(p.ID), bankclient.Sanitize(string(p.Status)))
	}
	if p.AmountCents < 0 {
		return fmt.Errorf("%w: payment %q with negative amount", bankclient.ErrMalformedResponse, bankclient.Sanitize(p.ID))
	}
	return nil
}

// parseStatement decodes and validates a statement page. Every error wraps
// ErrMalformedResponse.
func parseStatement(body []byte) (bankclient.StatementPage, error) {
	var page struct {
		Payments *[]bankclient.Payment `json:"payments"`
		Next     string                `json:"next"`
	}
	if err := checkDuplicateKeys(body); err != nil {
		return bankclient.StatementPage{}, err
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return bankclient.StatementPage{}, fmt.Errorf("%w: error decoding statement: %w", bankclient.ErrMalformedResponse, err)
	}
	if page.Payments == nil {
		return bankclient.StatementPage{}, fmt.Errorf("%w: statement without payments", bankclient.ErrMalformedResponse)
	}
	for i, p := range *page.Payments {
		if err := validatePayment(p); err != nil {
			return bankclient.StatementPage{}, fmt.Errorf("error in statement entry %d: %w", i, err)
		}
	}
	return bankclient.StatementPage{Payments: *page.Payments, Next: page.Next}, nil
}

// checkEcho verifies that a payment answered for key and req is that
// payment: a bank that answers with another key, reference or amount is not
// giving an answer we can act on. Fields the bank left empty are not
// checked. Every error wraps ErrMalformedResponse.
func checkEcho(p bankclient.Payment, key string, req *bankclient.PaymentRequest) error {
	if key != "" && p.IdempotencyKey != "" && p.IdempotencyKey != key {
		return fmt.Errorf("%w: payment %q carries another idempotency key", bankclient.ErrMalformedResponse, bankclient.Sanitize(p.ID))
	}
	if req == nil {
		return nil
	}
	if p.Reference != "" && p.Reference != req.Reference {
		return fmt.Errorf("%w: payment %q carries another reference", bankclient.ErrMalformedResponse, bankclient.Sanitize(p.ID))
	}
	if p.AmountCents != 0 && p.AmountCents != req.AmountCents {
		return fmt.Errorf("%w: payment %q carries another amount", bankclient.ErrMalformedResponse, bankclient.Sanitize(p.ID))
	}
	if p.Currency != "" && p.Currency != req.Currency {
		return fmt.Errorf("%w: payment %q carries another currency", bankclient.ErrMalformedResponse, bankclient.Sanitize(p.ID))
	}
	return nil
}

// classifySend turns an answer to POST /v1/payments into its outcome.
func classifySend(a answer, key string, req bankclient.PaymentRequest) (bankclient.SendResult, string, error) {
	switch a.status {
	case http.StatusCreated, http.StatusOK:
		p, err := parseAccepted(a, key, &req)
		if err != nil {
			return bankclient.SendResult{}, bankclient.OutcomeAmbiguous, err
		}
		replayed := a.status == http.StatusOK || a.header.Get("Idempotent-Replayed") == "true"
		if replayed {
			return bankclient.SendResult{Payment: p, Replayed: true}, bankclient.OutcomeReplayed, nil
		}
		return bankclient.SendResult{Payment: p}, bankclient.OutcomeAccepted, nil

	case http.StatusUnprocessableEntity:
		eb, ok := parseErrorBody(a)
		if !ok {
			// Without the code we cannot tell a rejection from key reuse,
			// and key reuse means a payment may exist under this key.
			return bankclient.SendResult{}, bankclient.OutcomeAmbiguous, ambiguousStatus(a, "", false)
		}
		if eb.Error == ErrorCodeKeyReuse {
			return bankclient.SendResult{}, bankclient.OutcomeKeyReuse, bankclient.ErrKeyReuse
		}
		return bankclient.SendResult{}, bankclient.OutcomeRejected, &bankclient.RejectedError{StatusCode: a.status, Code: bankclient.Sanitize(eb.Error), Reason: bankclient.Sanitize(eb.Reason)}

	case http.StatusBadRequest:
		eb, _ := parseErrorBody(a)
		return bankclient.SendResult{}, bankclient.OutcomeRejected, &bankclient.RejectedError{StatusCode: a.status, Code: bankclient.Sanitize(eb.Error), Reason: bankclient.Sanitize(eb.Reason)}
	}
	outcome, err := classifyOther(a)
	return bankclient.SendResult{}, outcome, err
}

// classifyStatus turns an answer to GET /v1/payments/by-key/{key} into its
// outcome.
func classifyStatus(a answer, key string) (bankclient.Payment, string, error) {
	switch a.status {
	case http.StatusOK:
		p, err := parseAccepted(a, key, nil)
		if err != nil {
			return bankclient.Payment{}, bankclient.OutcomeAmbiguous, err
		}
		return p, bankclient.OutcomeAccepted, nil
	case http.StatusNotFound:
		return bankclient.Payment{}, bankclient.OutcomeNotFound, bankclient.ErrNotFound
	}
	outcome, err := classifyOther(a)
	return bankclient.Payment{}, outcome, err
}

// classifyStatement turns an answer to GET /v1/statement into its outcome.
func classifyStatement(a answer) (bankclient.StatementPage, string, error) {
	if a.status == http.StatusOK {
		if a.tooLarge {
			return bankclient.StatementPage{}, bankclient.OutcomeAmbiguous, ambiguousMalformed(a, fmt.Errorf("%w: statement larger than the size limit", bankclient.ErrMalformedResponse))
		}
		page, err := parseStatement(a.body)
		if err != nil {
			return bankclient.StatementPage{}, bankclient.OutcomeAmbiguous, ambiguousMalformed(a, err)
		}
		return page, bankclient.OutcomeAccepted, nil
	}
	outcome, err := classifyOther(a)
	return bankclient.StatementPage{}, outcome, err
}

// parseAccepted parses and checks the payment of a 2xx answer; its errors
// are ambiguous and retryable.
func parseAccepted(a answer, key string, req *bankclient.PaymentRequest) (bankclient.Payment, error) {
	if a.tooLarge {
		return bankclient.Payment{}, ambiguousMalformed(a, fmt.Errorf("%w: body larger than the size limit", bankclient.ErrMalformedResponse))
	}
	p, err := parsePayment(a.body)
	if err == nil {
		err = checkEcho(p, key, req)
	}
	if err != nil {
		return bankclient.Payment{}, ambiguousMalformed(a, err)
	}
	return p, nil
}

// classifyOther classifies the answers that mean the same for every
// operation: everything but the definitive ones.
func classifyOther(a answer) (string, error) {
	eb, _ := parseErrorBody(a)
	switch {
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
		return bankclient.OutcomeUnauthorized, ambiguousStatus(a, eb.Error, false)
	case a.status >= 500,
		a.status == http.StatusTooManyRequests,
		a.status == http.StatusRequestTimeout,
		a.status == http.StatusConflict, // a concurrent request with this key is in flight
		a.status == http.StatusTooEarly,
		a.status >= 200 && a.status < 300: // 202, 204: an answer we cannot act on
		return bankclient.OutcomeAmbiguous, ambiguousStatus(a, eb.Error, true)
	}
	return bankclient.OutcomeAmbiguous, ambiguousStatus(a, eb.Error, false)
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
func ambiguousStatus(a answer, code string, retry bool) error {
	return ambiguous(&bankclient.AmbiguousError{
		StatusCode: a.status,
		RetryAfter: retryAfterOf(a.header),
		Err:        &bankclient.StatusError{StatusCode: a.status, Code: bankclient.Sanitize(code)},
	}, retry)
}

// ambiguousMalformed builds the error of a 2xx answer that is not valid.
func ambiguousMalformed(a answer, err error) error {
	return ambiguous(&bankclient.AmbiguousError{StatusCode: a.status, Err: err}, true)
}

// retryable is an ambiguous answer and whether another attempt under the
// same key may clear it up, which call's retry loop reads; errors.As finds
// the *AmbiguousError inside, which is what call returns.
type retryable struct {
	ae    *bankclient.AmbiguousError
	retry bool
}

func (e *retryable) Error() string { return e.ae.Error() }

func (e *retryable) Unwrap() error { return e.ae }

// ambiguous is ae, marked as worth another attempt or not.
func ambiguous(ae *bankclient.AmbiguousError, retry bool) error {
	return &retryable{ae: ae, retry: retry}
}

// mayRetry reports whether err is an ambiguous answer another attempt may
// clear up.
func mayRetry(err error) bool {
	var r *retryable
	return errors.As(err, &r) && r.retry
}

// retryAfterOf is the wait a bank's Retry-After asks for (0 when none).
func retryAfterOf(h http.Header) time.Duration {
	d, _ := retryafter.Parse(h, time.Now())
	return d
}
