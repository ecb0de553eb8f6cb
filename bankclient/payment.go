package bankclient

import (
	"time"

	"github.com/google/uuid"
)

// This file holds the payments of the contract: what the engine asks a
// bank for and what a bank reports. Their JSON is the wire format of
// settle's own protocol (DESIGN.md section 7, package bankclient/settle),
// shared with the fakebank, so the two can never disagree on a field
// name; other connectors map them to their bank's own.

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

// StatementPage is one page of GET /v1/statement.
type StatementPage struct {
	Payments []Payment `json:"payments"`
	// Next is the cursor for the following page; empty when this page is the last.
	Next string `json:"next"`
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
