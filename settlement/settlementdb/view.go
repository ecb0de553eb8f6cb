package settlementdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/settlement"
)

// Batcher is what LoadView needs; *pgxpool.Pool, *pgx.Conn and pgx.Tx
// satisfy it.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// viewColumns are the settlement columns LoadView reads, in the order it
// scans them: Columns, then the bank's side.
const viewColumns = Columns + `,
	coalesce(bank_payment_id, ''), coalesce(bank_status, ''), send_attempts, first_attempt_at, check_attempts, next_check_at`

// LoadView reads everything about settlement id in one round trip. It
// returns an error matching settlement.ErrNotFound when there is no such settlement.
func LoadView(ctx context.Context, q Batcher, id string) (settlement.View, error) {
	var v settlement.View
	b := &pgx.Batch{}
	b.Queue(`SELECT `+viewColumns+` FROM settlements WHERE settlement_id = $1`, id)
	b.Queue(`SELECT payload_hash, received_at, coalesce(first_event_id, ''), occurred_at, replay_count, last_replay_at
		FROM settlement_receipts WHERE settlement_id = $1`, id)
	b.Queue(`SELECT coalesce(from_state, ''), to_state, reason, at FROM settlement_transitions
		WHERE settlement_id = $1 ORDER BY id`, id)
	b.Queue(`SELECT op, bank_key, started_at, finished_at, coalesce(outcome, ''), coalesce(bank_status, ''), http_status, coalesce(detail, '')
		FROM bank_attempts WHERE settlement_id = $1 ORDER BY id`, id)
	b.Queue(`SELECT account_id, amount_cents, currency, coalesce(bank_payment_id, ''), created_at
		FROM ledger_movements WHERE settlement_id = $1 AND kind = 'payout'`, id)
	br := q.SendBatch(ctx, b)
	defer br.Close()

	st := &v.Settlement
	err := br.QueryRow().Scan(append(Targets(st),
		&v.Bank.PaymentID, &v.Bank.Status, &v.Bank.SendAttempts, &v.Bank.FirstAttemptAt, &v.Bank.CheckAttempts, &v.Bank.NextCheckAt)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return settlement.View{}, fmt.Errorf("error loading settlement %s: %w", id, settlement.ErrNotFound)
	}
	if err != nil {
		return settlement.View{}, fmt.Errorf("error loading settlement %s: %w", id, err)
	}

	var r settlement.Receipt
	err = br.QueryRow().Scan(&r.PayloadHash, &r.ReceivedAt, &r.FirstEventID, &r.OccurredAt, &r.ReplayCount, &r.LastReplayAt)
	switch {
	case err == nil:
		v.Receipt = &r
	case !errors.Is(err, pgx.ErrNoRows):
		return settlement.View{}, fmt.Errorf("error loading receipt of %s: %w", id, err)
	}

	rows, err := br.Query()
	if err != nil {
		return settlement.View{}, fmt.Errorf("error loading transitions of %s: %w", id, err)
	}
	v.Transitions, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (settlement.Transition, error) {
		var t settlement.Transition
		return t, row.Scan(&t.From, &t.To, &t.Reason, &t.At)
	})
	if err != nil {
		return settlement.View{}, fmt.Errorf("error loading transitions of %s: %w", id, err)
	}

	rows, err = br.Query()
	if err != nil {
		return settlement.View{}, fmt.Errorf("error loading bank attempts of %s: %w", id, err)
	}
	v.BankAttempts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (settlement.BankAttempt, error) {
		var a settlement.BankAttempt
		return a, row.Scan(&a.Op, &a.BankKey, &a.StartedAt, &a.FinishedAt, &a.Outcome, &a.BankStatus, &a.HTTPStatus, &a.Detail)
	})
	if err != nil {
		return settlement.View{}, fmt.Errorf("error loading bank attempts of %s: %w", id, err)
	}

	var m settlement.Movement
	err = br.QueryRow().Scan(&m.AccountID, &m.AmountCents, &m.Currency, &m.BankPaymentID, &m.CreatedAt)
	switch {
	case err == nil:
		v.Movement = &m
	case !errors.Is(err, pgx.ErrNoRows):
		return settlement.View{}, fmt.Errorf("error loading movement of %s: %w", id, err)
	}
	return v, nil
}
