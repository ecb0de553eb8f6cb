package stripe

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v82"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/retryafter"
)

// statuses maps a payout's status onto settle's
// (https://docs.stripe.com/api/payouts/object#payout_object-status):
//
//	pending     not yet submitted to the bank     → processing
//	in_transit  submitted, not yet arrived        → processing
//	paid        arrived (expected to have)        → settled
//	failed      did not arrive                    → failed
//	canceled    canceled before it was submitted  → failed
//
// A paid payout can still fail days later
// (https://docs.stripe.com/payouts#payout-failures): Stripe then reports
// failed, and the payout object does not say whether it had been paid. The
// settlement does: one confirmed whose payout now reads failed came back,
// which Capabilities.FailedAfterSettledIsReturn tells the engine (it books
// the return and its reversal).
var statuses = map[stripe.PayoutStatus]bankclient.Status{
	stripe.PayoutStatusPending:   bankclient.StatusProcessing,
	stripe.PayoutStatusInTransit: bankclient.StatusProcessing,
	stripe.PayoutStatusPaid:      bankclient.StatusSettled,
	stripe.PayoutStatusFailed:    bankclient.StatusFailed,
	stripe.PayoutStatusCanceled:  bankclient.StatusFailed,
}

// payment is the payout as settle's contract reports it. The reference is
// the one we sent, from metadata[reference].
func (c *Client) payment(po *stripe.Payout) (bankclient.Payment, error) {
	if po == nil || po.ID == "" {
		return bankclient.Payment{}, errors.New("payout without an id")
	}
	st, ok := statuses[po.Status]
	if !ok {
		return bankclient.Payment{}, fmt.Errorf("payout %s has unknown status %q", po.ID, bankclient.Sanitize(string(po.Status)))
	}
	if po.Amount <= 0 {
		return bankclient.Payment{}, fmt.Errorf("payout %s has amount %d", po.ID, po.Amount)
	}
	p := bankclient.Payment{
		ID:            po.ID,
		Reference:     po.Metadata["reference"],
		Status:        st,
		AmountCents:   po.Amount,
		Currency:      strings.ToUpper(string(po.Currency)),
		DebtorAccount: c.account,
		CreatedAt:     time.Unix(po.Created, 0).UTC(),
		UpdatedAt:     time.Unix(po.Created, 0).UTC(),
	}
	if po.Destination != nil {
		p.CreditorAccount = po.Destination.ID
	}
	if st == bankclient.StatusFailed {
		p.FailureReason = bankclient.Sanitize(strings.TrimPrefix(string(po.FailureCode)+": "+po.FailureMessage, ": "))
		if p.FailureReason == "" {
			p.FailureReason = string(po.Status)
		}
	}
	return p, nil
}

// malformed is the answer to a 2xx whose body is not a payout we can use.
func malformed(err error) answer {
	return answer{
		outcome: bankclient.OutcomeAmbiguous,
		err: &bankclient.AmbiguousError{StatusCode: http.StatusOK,
			Err: fmt.Errorf("%w: %w", bankclient.ErrMalformedResponse, err)},
	}
}

// classify turns an error of stripe-go into settle's answer classes, by
// the type of Stripe's error and the HTTP status, never by its text:
//
//   - 429 (Stripe sends it as an invalid_request_error with code
//     rate_limit): ambiguous, with the Retry-After it carries;
//   - 401, 403: ambiguous, matching bankclient.ErrUnauthorized;
//   - idempotency_error with 400 (the key was used with other
//     parameters): bankclient.ErrKeyReuse;
//   - on a send, invalid_request_error or card_error with 400 or 402: a
//     definitive *RejectedError (Stripe did not create the payout, and
//     replays the same error under the key);
//   - on a read, 404: bankclient.ErrPaymentNotFound;
//   - api_error, any 5xx, a 409 (a request under the key is still in
//     flight), a connection error, a timeout, a body that is not Stripe's
//     JSON: ambiguous, and another attempt under the same key may help.
func classify(err error, send bool) answer {
	var se *stripe.Error
	if !errors.As(err, &se) {
		// A transport error, a context ending, or a body stripe-go could
		// not decode (an untyped error): Stripe may have acted.
		var certErr *tls.CertificateVerificationError
		return answer{outcome: bankclient.OutcomeAmbiguous, err: &bankclient.AmbiguousError{Err: err}, retry: !errors.As(err, &certErr)}
	}
	status := se.HTTPStatusCode
	code := string(se.Code)
	amb := &bankclient.AmbiguousError{StatusCode: status, Err: &bankclient.StatusError{StatusCode: status, Code: bankclient.Sanitize(string(se.Type) + "/" + code)}}
	switch {
	case status == http.StatusTooManyRequests:
		if se.LastResponse != nil {
			amb.RetryAfter, _ = retryafter.Parse(se.LastResponse.Header, time.Now())
		}
		return answer{outcome: bankclient.OutcomeAmbiguous, err: amb, retry: true}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return answer{outcome: bankclient.OutcomeUnauthorized, err: amb}
	case se.Type == stripe.ErrorTypeIdempotency && status == http.StatusBadRequest:
		return answer{outcome: bankclient.OutcomeKeyReuse, err: bankclient.ErrKeyReuse}
	case send && (se.Type == stripe.ErrorTypeInvalidRequest || se.Type == stripe.ErrorTypeCard) &&
		(status == http.StatusBadRequest || status == http.StatusPaymentRequired):
		return answer{outcome: bankclient.OutcomeRejected, err: &bankclient.RejectedError{StatusCode: status, Code: bankclient.Sanitize(code), Reason: bankclient.Sanitize(se.Msg)}}
	case !send && status == http.StatusNotFound:
		return answer{outcome: bankclient.OutcomeNotFound, err: bankclient.ErrPaymentNotFound}
	case status >= 500 || status == http.StatusConflict || se.Type == stripe.ErrorTypeAPI:
		return answer{outcome: bankclient.OutcomeAmbiguous, err: amb, retry: true}
	default:
		return answer{outcome: bankclient.OutcomeAmbiguous, err: amb}
	}
}
