package bankclient

import (
	"time"

	"github.com/google/uuid"
)

// This file holds the wire types of the bank protocol (DESIGN.md section 7).
// They are shared by the client in this package and by the fakebank
// simulator, so the two can never disagree on a field name.

// Status is the lifecycle status of a payment at the bank.
type Status string

// The payment statuses the bank reports.
const (
	StatusAccepted   Status = "accepted"
	StatusProcessing Status = "processing"
	StatusSettled    Status = "settled"
	StatusFailed     Status = "failed"
	StatusReturned   Status = "returned"
)

// Final reports whether the status can no longer change at the bank.
func (s Status) Final() bool {
	return s == StatusSettled || s == StatusFailed || s == StatusReturned
}

// Valid reports whether s is one of the statuses of the protocol.
func (s Status) Valid() bool {
	switch s {
	case StatusAccepted, StatusProcessing, StatusSettled, StatusFailed, StatusReturned:
		return true
	}
	return false
}

// PaymentRequest is the body of POST /v1/payments.
type PaymentRequest struct {
	AmountCents     int64  `json:"amount_cents"`
	Currency        string `json:"currency"`
	DebtorAccount   string `json:"debtor_account"`
	CreditorAccount string `json:"creditor_account"`
	// Reference carries the business identity (the settlement id); the
	// ledger-vs-bank reconciliation matches on it.
	Reference string `json:"reference"`
	// SettlementID is the settlement the payment is for, for banks that
	// carry it beside the reference (Stripe's metadata[settlement_id]).
	// It is not part of settle's own protocol.
	SettlementID string `json:"-"`
	// ConsentID is the bank's id of the authorised consent the payment is
	// made under, for banks that need one (Capabilities.Consent); empty
	// otherwise. It is stored with the settlement, so a replay carries the
	// same one. It is not part of settle's own protocol.
	ConsentID string `json:"-"`
	// Grant is the sealed Grant of the account holder's authorisation of
	// the consent (Capabilities.Authorisation): the payment is made with
	// its token. It is not part of settle's own protocol, and not part of
	// the request's identity: a replay may carry a refreshed one.
	Grant string `json:"-"`
}

// Payment is a payment as the bank reports it.
type Payment struct {
	ID              string    `json:"id"`
	IdempotencyKey  string    `json:"idempotency_key"`
	Reference       string    `json:"reference"`
	Status          Status    `json:"status"`
	AmountCents     int64     `json:"amount_cents"`
	Currency        string    `json:"currency"`
	DebtorAccount   string    `json:"debtor_account"`
	CreditorAccount string    `json:"creditor_account"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	// FailureReason is set when Status is failed or returned.
	FailureReason string `json:"failure_reason,omitempty"`
}

// ErrorBody is the JSON body of a 4xx answer from the bank, for example
// {"error":"idempotency_key_reuse"} or {"error":"rejected","reason":"..."}.
type ErrorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason,omitempty"`
}

// The error codes of ErrorBody.Error that the protocol defines.
const (
	ErrorCodeKeyReuse = "idempotency_key_reuse"
	ErrorCodeRejected = "rejected"
)

// StatementPage is one page of GET /v1/statement.
type StatementPage struct {
	Payments []Payment `json:"payments"`
	// Next is the cursor for the following page; empty when this page is the last.
	Next string `json:"next"`
}

// Faults is the fault profile of GET/PUT /admin/faults. Rates are
// probabilities in [0, 1].
type Faults struct {
	FailBeforeRate        float64 `json:"fail_before_rate"`
	DropResponseRate      float64 `json:"drop_response_rate"`
	StatusErrorRate       float64 `json:"status_error_rate"`
	RejectRate            float64 `json:"reject_rate"`
	SettlementFailureRate float64 `json:"settlement_failure_rate"`
	LatencyMinMS          int64   `json:"latency_min_ms"`
	LatencyMaxMS          int64   `json:"latency_max_ms"`
	SettleDelayMS         int64   `json:"settle_delay_ms"`
	KeyTTLMS              int64   `json:"key_ttl_ms"`
	// RateLimitPerS > 0 answers 429 with Retry-After to requests past that
	// many a second.
	RateLimitPerS float64 `json:"rate_limit_per_s"`
	// ReturnRate of the payments that settle come back ReturnAfterMS after
	// they settled (returned, as ACH and SEPA returns do).
	ReturnRate    float64 `json:"return_rate"`
	ReturnAfterMS int64   `json:"return_after_ms"`
	// ConsentDelayMS is how long after it was created an Open Banking
	// consent is decided (Authorised, or Rejected at ConsentRejectRate):
	// a real bank waits for its customer. 0 decides it at once.
	ConsentDelayMS int64 `json:"consent_delay_ms"`
	// ConsentRejectRate of the consents are Rejected by the customer
	// instead of Authorised.
	ConsentRejectRate float64 `json:"consent_reject_rate"`
	// The obie profile's token endpoint: TokenErrorRate of its requests
	// are answered 500 before anything is issued; TokenDropRate of the
	// tokens issued lose their answer (the code is spent: the account
	// holder must authorise again).
	TokenErrorRate float64 `json:"token_error_rate"`
	TokenDropRate  float64 `json:"token_drop_rate"`
	// The bank's pushes (settle fakebank --webhook-url): WebhookLossRate
	// of the status changes are never pushed, WebhookDuplicateRate are
	// pushed twice, and each push leaves after a delay drawn from
	// [0, WebhookDelayMaxMS], so pushes arrive late and out of order.
	WebhookLossRate      float64 `json:"webhook_loss_rate"`
	WebhookDuplicateRate float64 `json:"webhook_duplicate_rate"`
	WebhookDelayMaxMS    int64   `json:"webhook_delay_max_ms"`
}

// Stats is the body of GET /admin/stats.
type Stats struct {
	Payments          int64 `json:"payments"`
	Replays           int64 `json:"replays"`
	KeyReuseConflicts int64 `json:"key_reuse_conflicts"`
	// MaxExecutionsPerKey is the largest number of payments ever created
	// under one idempotency key (above 1 only after the bank forgot a key).
	MaxExecutionsPerKey int64 `json:"max_executions_per_key"`
	// MaxPaymentsPerReference above 1 means one settlement was paid twice.
	MaxPaymentsPerReference int64 `json:"max_payments_per_reference"`
}

// keyNamespace is the UUIDv5 namespace of settle's bank idempotency keys.
// It must never change: a key derived under another namespace would let a
// retry pay a settlement twice.
var keyNamespace = uuid.MustParse("6f1c1d9e-5c1a-4f43-9a43-6b8f0e7d2a51")

// KeyFor returns the stable idempotency key for a settlement: a UUIDv5 of
// its business identity, identical on every retry, in every process, after
// every restart.
func KeyFor(settlementID string) string {
	return uuid.NewSHA1(keyNamespace, []byte("settlement:"+settlementID)).String()
}

// ConsentKeyFor returns the idempotency key of a settlement's consent, for
// banks that need one before the payment (Capabilities.Consent): like
// KeyFor, stable and derived from the settlement id alone, and never equal
// to its payment key.
func ConsentKeyFor(settlementID string) string {
	return uuid.NewSHA1(keyNamespace, []byte("consent:"+settlementID)).String()
}
