package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/settle/settle/settlement"
)

// DB is what the ledger needs of the database; *pgxpool.Pool and pgx.Tx
// satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CreditRequest brings AmountMinor of Currency into AccountID, once per Ref.
type CreditRequest struct {
	AccountID   string
	AmountMinor int64
	Currency    string
	// Ref identifies the credit: the same Ref is never posted twice.
	Ref string
	// At is the posting's time (default time.Now).
	At time.Time
}

// ErrRefMismatch is matched (errors.Is) when a credit's Ref was posted
// before with another account, amount or currency: nothing was posted.
var ErrRefMismatch = errors.New("the ref was credited before with another account, amount or currency")

// ErrInvalid is matched (errors.Is) by a credit request that can never be
// posted (an empty or reserved account, a non-positive amount, an unknown
// currency).
var ErrInvalid = errors.New("invalid credit")

// CreditResult is what Credit did.
type CreditResult struct {
	// Posting is the credit's posting (the stored one on a replay).
	Posting Posting
	// Replayed is true when Ref had been credited before, identically.
	Replayed bool
}

// check validates r.
func (r CreditRequest) check() error {
	switch {
	case r.AccountID == "" || len(r.AccountID) > 128:
		return fmt.Errorf("%w: the account must be 1 to 128 characters", ErrInvalid)
	case CheckAccountID(r.AccountID) != nil:
		return fmt.Errorf("%w: %w", ErrInvalid, CheckAccountID(r.AccountID))
	case r.AmountMinor <= 0:
		return fmt.Errorf("%w: the amount must be a positive number of minor units, not %d", ErrInvalid, r.AmountMinor)
	case r.Ref == "" || len(r.Ref) > 256:
		return fmt.Errorf("%w: the ref must be 1 to 256 characters", ErrInvalid)
	}
	if _, err := settlement.PayoutCurrency(r.Currency); err != nil {
		return fmt.Errorf("%w: currency: %w", ErrInvalid, err)
	}
	return nil
}

// Credit posts a credit from FundingAccount to r.AccountID (creating either
// account on first use) and raises the account's posted balance, in one
// transaction; a Ref posted before is a replay when it matches and
// ErrRefMismatch when it does not (nothing posted either way).
func Credit(ctx context.Context, db DB, r CreditRequest) (CreditResult, error) {
	if err := r.check(); err != nil {
		return CreditResult{}, err
	}
	if r.At.IsZero() {
		r.At = time.Now()
	}
	var res CreditResult
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// The posting goes in first: a concurrent credit with the same ref
		// waits on the unique index and then finds it.
		err := tx.QueryRow(ctx, `
			WITH funding AS (
				INSERT INTO ledger_accounts (account_id, currency, kind, allow_negative, created_at, updated_at)
				VALUES ($1, $4, 'funding', true, $6, $6)
				ON CONFLICT (account_id, currency) DO NOTHING
			), customer AS (
				INSERT INTO ledger_accounts (account_id, currency, kind, allow_negative, created_at, updated_at)
				VALUES ($2, $4, 'customer', false, $6, $6)
				ON CONFLICT (account_id, currency) DO NOTHING
			)
			INSERT INTO ledger_postings (kind, ref, debit_account, credit_account, amount_minor, currency, created_at)
			VALUES ('credit', $5, $1, $2, $3, $4, $6)
			ON CONFLICT (ref) DO NOTHING
			RETURNING id, created_at`,
			FundingAccount, r.AccountID, r.AmountMinor, r.Currency, r.Ref, r.At).Scan(&res.Posting.ID, &res.Posting.CreatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			p, err := postingByRef(ctx, tx, r.Ref)
			if err != nil {
				return err
			}
			if p.CreditAccount != r.AccountID || p.AmountMinor != r.AmountMinor || p.Currency != r.Currency {
				return fmt.Errorf("ref %q credited %d %s to %s, not %d %s to %s: %w", r.Ref,
					p.AmountMinor, p.Currency, p.CreditAccount, r.AmountMinor, r.Currency, r.AccountID, ErrRefMismatch)
			}
			res.Posting, res.Replayed = p, true
			return nil
		}
		if err != nil {
			return fmt.Errorf("error posting credit %s: %w", r.Ref, err)
		}
		res.Posting.Kind, res.Posting.Ref = PostingCredit, r.Ref
		res.Posting.DebitAccount, res.Posting.CreditAccount = FundingAccount, r.AccountID
		res.Posting.AmountMinor, res.Posting.Currency = r.AmountMinor, r.Currency
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_balances AS b (account_id, currency, shard, posted_minor)
			VALUES ($1, $2, `+ShardSQL+`, $3)
			ON CONFLICT (account_id, currency, shard) DO UPDATE SET posted_minor = b.posted_minor + EXCLUDED.posted_minor`,
			r.AccountID, r.Currency, r.AmountMinor); err != nil {
			return fmt.Errorf("error crediting account %s: %w", r.AccountID, err)
		}
		return nil
	})
	if err != nil {
		return CreditResult{}, err
	}
	return res, nil
}

const postingColumns = `id, coalesce(settlement_id, ''), kind, coalesce(ref, ''), debit_account, credit_account, amount_minor, currency, created_at`

func scanPosting(row pgx.CollectableRow) (Posting, error) {
	var p Posting
	err := row.Scan(&p.ID, &p.SettlementID, &p.Kind, &p.Ref, &p.DebitAccount, &p.CreditAccount, &p.AmountMinor, &p.Currency, &p.CreatedAt)
	return p, err
}

func postingByRef(ctx context.Context, db DB, ref string) (Posting, error) {
	rows, err := db.Query(ctx, `SELECT `+postingColumns+` FROM ledger_postings WHERE ref = $1`, ref)
	if err != nil {
		return Posting{}, fmt.Errorf("error reading credit %s: %w", ref, err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanPosting)
	if err != nil {
		return Posting{}, fmt.Errorf("error reading credit %s: %w", ref, err)
	}
	return p, nil
}

// Balances returns the balance of every account in every currency, or of
// accountID alone when it is not empty, ordered by account and currency.
// A customer account's balance is the one kept in its shards
// (ledger_balances); a system account's is the sum of its postings.
func Balances(ctx context.Context, db DB, accountID string) ([]Balance, error) {
	rows, err := db.Query(ctx, `
		SELECT a.account_id, a.currency, a.kind,
		       CASE WHEN a.kind = 'customer' THEN coalesce(b.posted, 0) ELSE (
		           SELECT coalesce(sum(p.amount_minor), 0) FROM ledger_postings p
		           WHERE p.credit_account = a.account_id AND p.currency = a.currency) - (
		           SELECT coalesce(sum(p.amount_minor), 0) FROM ledger_postings p
		           WHERE p.debit_account = a.account_id AND p.currency = a.currency) END::bigint,
		       coalesce(b.held, 0)::bigint
		FROM ledger_accounts a
		LEFT JOIN LATERAL (SELECT sum(posted_minor) AS posted, sum(held_minor) AS held FROM ledger_balances lb
		                   WHERE lb.account_id = a.account_id AND lb.currency = a.currency) b ON true
		WHERE $1 = '' OR a.account_id = $1
		ORDER BY a.account_id, a.currency`, accountID)
	if err != nil {
		return nil, fmt.Errorf("error reading balances: %w", err)
	}
	bs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Balance, error) {
		var b Balance
		err := row.Scan(&b.AccountID, &b.Currency, &b.Kind, &b.Posted, &b.Held)
		b.Available = b.Posted - b.Held
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("error reading balances: %w", err)
	}
	return bs, nil
}

// PostingFilter selects postings. Its zero value selects the first
// DefaultPostingLimit of all.
type PostingFilter struct {
	// AccountID selects the postings debiting or crediting it.
	AccountID string
	// SettlementID selects one settlement's postings.
	SettlementID string
	// Currency selects one currency.
	Currency string
	// AfterID selects postings with a greater id (the next page).
	AfterID int64
	// Limit caps the number returned (default DefaultPostingLimit).
	Limit int
}

// DefaultPostingLimit is PostingFilter's default Limit.
const DefaultPostingLimit = 100

// Postings returns the postings f selects, in id order (the order they
// were written in).
func Postings(ctx context.Context, db DB, f PostingFilter) ([]Posting, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultPostingLimit
	}
	rows, err := db.Query(ctx, `SELECT `+postingColumns+` FROM ledger_postings
		WHERE ($1 = '' OR debit_account = $1 OR credit_account = $1)
		  AND ($2 = '' OR settlement_id = $2)
		  AND ($3 = '' OR currency = $3)
		  AND id > $4
		ORDER BY id LIMIT $5`, f.AccountID, f.SettlementID, f.Currency, f.AfterID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("error reading postings: %w", err)
	}
	ps, err := pgx.CollectRows(rows, scanPosting)
	if err != nil {
		return nil, fmt.Errorf("error reading postings: %w", err)
	}
	return ps, nil
}

// Hold is an open hold: a payout in flight reserving its amount.
type Hold struct {
	SettlementID string    `json:"settlement_id"`
	AccountID    string    `json:"account_id"`
	Currency     string    `json:"currency"`
	AmountMinor  int64     `json:"amount_minor"`
	CreatedAt    time.Time `json:"created_at"`
}

// OpenHolds returns up to limit open holds of accountID, oldest first.
func OpenHolds(ctx context.Context, db DB, accountID string, limit int) ([]Hold, error) {
	rows, err := db.Query(ctx, `SELECT settlement_id, account_id, currency, amount_minor, created_at FROM ledger_holds
		WHERE account_id = $1 AND state = 'held' ORDER BY created_at, settlement_id LIMIT $2`, accountID, limit)
	if err != nil {
		return nil, fmt.Errorf("error reading holds: %w", err)
	}
	hs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Hold, error) {
		var h Hold
		err := row.Scan(&h.SettlementID, &h.AccountID, &h.Currency, &h.AmountMinor, &h.CreatedAt)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("error reading holds: %w", err)
	}
	return hs, nil
}
