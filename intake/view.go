package intake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Querier is what LoadView needs; *pgxpool.Pool, *pgx.Conn and pgx.Tx
// satisfy it.
type Querier interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
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
	From   string    `json:"from_state,omitempty"`
	To     string    `json:"to_state"`
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

// LoadView reads everything about settlement id in one round trip. It
// returns an error matching ErrNotFound when there is no such settlement.
func LoadView(ctx context.Context, q Querier, id string) (View, error) {
	var v View
	b := &pgx.Batch{}
	b.Queue(`SELECT `+settlementColumns+`, coalesce(bank_payment_id, ''), coalesce(bank_status, ''),
		send_attempts, first_attempt_at, check_attempts, next_check_at
		FROM settlements WHERE settlement_id = $1`, id)
	b.Queue(`SELECT payload_hash, received_at, coalesce(first_event_id, ''), occurred_at, replay_count, last_replay_at
		FROM settlement_receipts WHERE settlement_id = $1`, id)
	b.Queue(`SELECT coalesce(from_state, ''), to_state, reason, at FROM settlement_transitions
		WHERE settlement_id = $1 ORDER BY id`, id)
	b.Queue(`SELECT op, bank_key, started_at, finished_at, coalesce(outcome, ''), coalesce(bank_status, ''), http_status, coalesce(detail, '')
		FROM bank_attempts WHERE settlement_id = $1 ORDER BY id`, id)
	b.Queue(`SELECT account_id, amount_cents, currency, coalesce(bank_payment_id, ''), created_at
		FROM ledger_movements WHERE settlement_id = $1`, id)
	br := q.SendBatch(ctx, b)
	defer br.Close()

	st, err := scanSettlement(br.QueryRow(), &v.Bank.PaymentID, &v.Bank.Status, &v.Bank.SendAttempts,
		&v.Bank.FirstAttemptAt, &v.Bank.CheckAttempts, &v.Bank.NextCheckAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return View{}, fmt.Errorf("error loading settlement %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return View{}, fmt.Errorf("error loading settlement %s: %w", id, err)
	}
	v.Settlement = st

	var r Receipt
	err = br.QueryRow().Scan(&r.PayloadHash, &r.ReceivedAt, &r.FirstEventID, &r.OccurredAt, &r.ReplayCount, &r.LastReplayAt)
	switch {
	case err == nil:
		v.Receipt = &r
	case !errors.Is(err, pgx.ErrNoRows):
		return View{}, fmt.Errorf("error loading receipt of %s: %w", id, err)
	}

	rows, err := br.Query()
	if err != nil {
		return View{}, fmt.Errorf("error loading transitions of %s: %w", id, err)
	}
	v.Transitions, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Transition, error) {
		var t Transition
		return t, row.Scan(&t.From, &t.To, &t.Reason, &t.At)
	})
	if err != nil {
		return View{}, fmt.Errorf("error loading transitions of %s: %w", id, err)
	}

	rows, err = br.Query()
	if err != nil {
		return View{}, fmt.Errorf("error loading bank attempts of %s: %w", id, err)
	}
	v.BankAttempts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (BankAttempt, error) {
		var a BankAttempt
		return a, row.Scan(&a.Op, &a.BankKey, &a.StartedAt, &a.FinishedAt, &a.Outcome, &a.BankStatus, &a.HTTPStatus, &a.Detail)
	})
	if err != nil {
		return View{}, fmt.Errorf("error loading bank attempts of %s: %w", id, err)
	}

	var m Movement
	err = br.QueryRow().Scan(&m.AccountID, &m.AmountCents, &m.Currency, &m.BankPaymentID, &m.CreatedAt)
	switch {
	case err == nil:
		v.Movement = &m
	case !errors.Is(err, pgx.ErrNoRows):
		return View{}, fmt.Errorf("error loading movement of %s: %w", id, err)
	}
	return v, nil
}
