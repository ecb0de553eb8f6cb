package settlement

import (
	"errors"
	"time"
)

// ErrNotFound is matched (errors.Is) when a settlement does not exist.
var ErrNotFound = errors.New("settlement not found")

// Settlement is a stored settlement as the API shows it.
type Settlement struct {
	SettlementID string `json:"settlement_id"`
	AccountID    string `json:"account_id"`
	AmountCents  int64  `json:"amount_cents"`
	Currency     string `json:"currency"`
	Beneficiary  string `json:"beneficiary"`
	State        State  `json:"state"`
	PayloadHash  string `json:"payload_hash"`
	BankKey      string `json:"bank_key"`
	// Bank is the configured name of the connector that pays it (settle,
	// stripe, obie), bound at intake and never changed: only a worker of
	// that bank sends, checks or resolves it.
	Bank string `json:"bank"`
	// BankReference is the reference the settlement travels to the bank
	// under: its id when the bank's rules allow, else a stable short form.
	BankReference       string    `json:"bank_reference"`
	NeedsInvestigation  bool      `json:"needs_investigation"`
	InvestigationReason string    `json:"investigation_reason,omitempty"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
}

// View is everything settle knows about one settlement: what
// GET /v1/settlements/{id} answers and `settle reconcile show` prints.
type View struct {
	Settlement Settlement `json:"settlement"`
	// Bank is the progress of the settlement at the bank.
	Bank BankProgress `json:"bank"`
	// Receipt is nil when retention removed it.
	Receipt      *Receipt      `json:"receipt"`
	Transitions  []Transition  `json:"transitions"`
	BankAttempts []BankAttempt `json:"bank_attempts"`
	// Movement is nil until the bank confirmed the payment.
	Movement *Movement `json:"movement"`
}

// BankProgress is what settle last knew of a settlement at the bank.
type BankProgress struct {
	PaymentID      string     `json:"payment_id,omitempty"`
	Status         string     `json:"status,omitempty"`
	SendAttempts   int        `json:"send_attempts"`
	FirstAttemptAt *time.Time `json:"first_attempt_at"`
	CheckAttempts  int        `json:"check_attempts"`
	NextCheckAt    *time.Time `json:"next_check_at"`
}

// Receipt is the first delivery of a settlement's event and its replays.
type Receipt struct {
	PayloadHash  string     `json:"payload_hash"`
	ReceivedAt   time.Time  `json:"received_at"`
	FirstEventID string     `json:"first_event_id,omitempty"`
	OccurredAt   *time.Time `json:"occurred_at"`
	ReplayCount  int64      `json:"replay_count"`
	LastReplayAt *time.Time `json:"last_replay_at"`
}

// Transition is one row of a settlement's history. From is empty for the
// creation.
type Transition struct {
	From   State     `json:"from_state,omitempty"`
	To     State     `json:"to_state"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// BankAttempt is one call to the bank about a settlement.
type BankAttempt struct {
	Op         string     `json:"op"`
	BankKey    string     `json:"bank_key"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	Outcome    string     `json:"outcome,omitempty"`
	BankStatus string     `json:"bank_status,omitempty"`
	HTTPStatus *int       `json:"http_status"`
	Detail     string     `json:"detail,omitempty"`
}

// Movement is a settlement's ledger movement.
type Movement struct {
	AccountID     string    `json:"account_id"`
	AmountCents   int64     `json:"amount_cents"`
	Currency      string    `json:"currency"`
	BankPaymentID string    `json:"bank_payment_id,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
}
