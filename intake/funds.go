package intake

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// accountKey is one account in one currency.
type accountKey struct{ account, currency string }

// checkFunds decides, under the row locks of the leads' accounts, which
// new leads their accounts' available balances cover (DESIGN.md section
// 20, --funds-check), records the receipts of the others as refused for
// want of funds (res.refused, res.refusedNow) and returns the leads left to
// insert: the covered ones and those received before (replays or
// conflicts, decided as always).
//
// The accounts are created if need be, then their rows in ledger_accounts
// locked in one order (account, currency) FOR NO KEY UPDATE, which blocks
// only another funds-checked intake of the same account: payouts from
// different accounts never wait for each other, and neither holds,
// postings nor balances (ledger_balances, its key share locks) wait for
// it. Within a batch the leads
// are decided in settlement_id order, each against what the ones before it
// left.
func (s *Service) checkFunds(ctx context.Context, tx pgx.Tx, leads []*lead, now time.Time, res *commitResult) ([]*lead, error) {
	ids := make([]string, len(leads))
	accounts, currencies := make([]string, len(leads)), make([]string, len(leads))
	for i, l := range leads {
		ids[i], accounts[i], currencies[i] = l.ev.SettlementID, l.ev.AccountID, l.ev.Currency
	}
	b := &pgx.Batch{}
	b.Queue(`
		INSERT INTO ledger_accounts (account_id, currency, kind, allow_negative, created_at, updated_at)
		SELECT DISTINCT a, c, 'customer', false, $3::timestamptz, $3::timestamptz
		FROM unnest($1::text[], $2::text[]) AS x(a, c)
		ORDER BY a, c
		ON CONFLICT (account_id, currency) DO NOTHING`, accounts, currencies, now)
	b.Queue(`
		SELECT account_id, currency, allow_negative FROM ledger_accounts
		WHERE (account_id, currency) IN (SELECT a, c FROM unnest($1::text[], $2::text[]) AS x(a, c))
		ORDER BY account_id, currency
		FOR NO KEY UPDATE`, accounts, currencies)
	// Read once the locks are held (a statement of its own, so with a
	// snapshot taken after them): the holds of the intakes that held them
	// before have committed by then, and so has a concurrent intake of the
	// same settlement_id from the same account. A confirmation or a
	// failure committing meanwhile only raises the available balance: the
	// sum read may be lower than the truth, never higher.
	b.Queue(`
		SELECT account_id, currency, sum(posted_minor - held_minor)::bigint FROM ledger_balances
		WHERE (account_id, currency) IN (SELECT a, c FROM unnest($1::text[], $2::text[]) AS x(a, c))
		GROUP BY account_id, currency`, accounts, currencies)
	b.Queue(`
		SELECT settlement_id FROM settlement_receipts WHERE settlement_id = ANY($1::text[])
		UNION SELECT settlement_id FROM settlements WHERE settlement_id = ANY($1::text[])`, ids)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("error creating accounts: %w", err)
	}
	available := map[accountKey]int64{}
	unlimited := map[accountKey]bool{}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("error locking accounts: %w", err)
	}
	var k accountKey
	var avail int64
	var negative bool
	if _, err := pgx.ForEachRow(rows, []any{&k.account, &k.currency, &negative}, func() error {
		unlimited[k] = negative
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error locking accounts: %w", err)
	}
	if rows, err = br.Query(); err != nil {
		return nil, fmt.Errorf("error reading balances: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&k.account, &k.currency, &avail}, func() error {
		available[k] = avail
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error reading balances: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return nil, fmt.Errorf("error reading receipts: %w", err)
	}
	received, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error reading receipts: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("error checking funds: %w", err)
	}
	old := make(map[string]bool, len(received))
	for _, id := range received {
		old[id] = true
	}

	kept := make([]*lead, 0, len(leads))
	var refused []*lead
	for _, l := range leads {
		k := accountKey{l.ev.AccountID, l.ev.Currency}
		switch {
		case old[l.ev.SettlementID]:
		case unlimited[k] || available[k] >= l.ev.AmountCents:
			available[k] -= l.ev.AmountCents
		default:
			refused = append(refused, l)
			continue
		}
		kept = append(kept, l)
	}
	if len(refused) == 0 {
		return kept, nil
	}
	n := len(refused)
	rids, hashes, eventIDs := make([]string, n), make([]string, n), make([]string, n)
	occurred := make([]pgtype.Timestamptz, n)
	for i, l := range refused {
		rids[i], hashes[i], eventIDs[i] = l.ev.SettlementID, l.hash, l.ev.EventID
		occurred[i] = pgtype.Timestamptz{Time: l.ev.OccurredAt, Valid: !l.ev.OccurredAt.IsZero()}
	}
	rows, err = tx.Query(ctx, `
		INSERT INTO settlement_receipts (settlement_id, payload_hash, received_at, first_event_id, occurred_at, outcome)
		SELECT i.settlement_id, i.payload_hash, $5, NULLIF(i.event_id, ''), i.occurred_at, 'insufficient_funds'
		FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS i(settlement_id, payload_hash, event_id, occurred_at)
		WHERE NOT EXISTS (SELECT 1 FROM settlements s WHERE s.settlement_id = i.settlement_id)
		ORDER BY i.settlement_id
		ON CONFLICT (settlement_id) DO NOTHING
		RETURNING settlement_id, payload_hash`, rids, hashes, eventIDs, occurred, now)
	if err != nil {
		return nil, fmt.Errorf("error recording refused receipts: %w", err)
	}
	var id, hash string
	if _, err := pgx.ForEachRow(rows, []any{&id, &hash}, func() error {
		res.refused[id] = refusedReceipt{hash: hash}
		res.refusedNow[id] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error recording refused receipts: %w", err)
	}
	return kept, nil
}

// readRefused reads into res the receipts among ids refused for want of
// funds.
func readRefused(ctx context.Context, tx pgx.Tx, ids []string, res *commitResult) error {
	rows, err := tx.Query(ctx, `SELECT settlement_id, payload_hash FROM settlement_receipts
		WHERE settlement_id = ANY($1::text[]) AND outcome = 'insufficient_funds'`, ids)
	if err != nil {
		return fmt.Errorf("error reading refused receipts: %w", err)
	}
	var id, hash string
	if _, err := pgx.ForEachRow(rows, []any{&id, &hash}, func() error {
		res.refused[id] = refusedReceipt{hash: hash}
		return nil
	}); err != nil {
		return fmt.Errorf("error reading refused receipts: %w", err)
	}
	return nil
}
