package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

// Querier is what Check needs of the database; *pgxpool.Pool and pgx.Tx
// satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Expect is what the checker knows from outside the engine's tables.
type Expect struct {
	// KeyTTL is the engine's --bank-key-ttl.
	KeyTTL time.Duration
	// First maps a settlement_id to the payload whose intake transaction
	// committed first: the one the settlement, its movement and its payment
	// must carry.
	First map[string]intake.Event
	// Delivered lists the settlements with at least one delivery; after
	// recovery each must exist.
	Delivered []string
	// Payments is every payment the bank ever executed (the bank's books,
	// forgotten keys included).
	Payments []bankclient.Payment
	// ConflictsAcked counts the 409 answers intake gave per settlement.
	ConflictsAcked map[string]int
	// Recovered asks for the liveness check: every settlement terminal or
	// flagged needs_investigation.
	Recovered bool
}

// settlementRow is a settlement as the checker reads it.
type settlementRow struct {
	id, state, account, currency, beneficiary, bankKey, receiptHash string
	amount                                                          int64
	flagged                                                         bool
	reason                                                          *string
	firstAttempt                                                    *time.Time
}

type movementRow struct {
	id, account, currency string
	amount                int64
	paymentID             *string
}

type transitionRow struct {
	id       string
	from     *string
	to, why  string
	at       time.Time
	serialID int64
}

// Check verifies the exactly-once invariants against the engine's tables
// and the bank's books and returns one line per violation:
//
//   - every delivered settlement exists and carries the first committed
//     payload (receipt hash, account, amount, currency, beneficiary);
//   - one ledger movement per confirmed settlement and none otherwise,
//     with the first payload's account, amount and currency, naming the
//     bank's payment;
//   - at most one payment per settlement at the bank, under its stable
//     key, for the first payload's amount, currency and accounts;
//   - confirmed ⇔ the bank settled its payment: a confirmed settlement has
//     a settled payment; a failed one has none; a settled payment belongs
//     to a confirmed settlement, or to an open one flagged
//     needs_investigation;
//   - every transition is allowed by statemachine.Allowed, the history is
//     one chain from (none) → pending to the current state;
//   - no POST was ever claimed once the key TTL had passed since the
//     first attempt (bank_attempts);
//   - every 409 answered was recorded in receipt_conflicts;
//   - after recovery, nothing is open without needs_investigation.
//
// An error means the checker could not read the database.
func Check(ctx context.Context, db Querier, e Expect) ([]string, error) {
	var v []string
	bad := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }

	settlements, err := collect(ctx, db, `
		SELECT s.settlement_id, s.state, s.account_id, s.currency, s.beneficiary, s.bank_key,
		       COALESCE(r.payload_hash, ''), s.amount_cents, s.needs_investigation,
		       s.investigation_reason, s.first_attempt_at
		FROM settlements s LEFT JOIN settlement_receipts r USING (settlement_id)
		ORDER BY s.settlement_id`, func(row pgx.CollectableRow) (settlementRow, error) {
		var s settlementRow
		err := row.Scan(&s.id, &s.state, &s.account, &s.currency, &s.beneficiary, &s.bankKey,
			&s.receiptHash, &s.amount, &s.flagged, &s.reason, &s.firstAttempt)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	movements, err := collect(ctx, db, `
		SELECT settlement_id, account_id, currency, amount_cents, bank_payment_id
		FROM ledger_movements ORDER BY id`, func(row pgx.CollectableRow) (movementRow, error) {
		var m movementRow
		err := row.Scan(&m.id, &m.account, &m.currency, &m.amount, &m.paymentID)
		return m, err
	})
	if err != nil {
		return nil, err
	}
	transitions, err := collect(ctx, db, `
		SELECT settlement_id, from_state, to_state, reason, at, id
		FROM settlement_transitions ORDER BY settlement_id, id`, func(row pgx.CollectableRow) (transitionRow, error) {
		var t transitionRow
		err := row.Scan(&t.id, &t.from, &t.to, &t.why, &t.at, &t.serialID)
		return t, err
	})
	if err != nil {
		return nil, err
	}
	lateSends, err := collect(ctx, db, `
		SELECT a.settlement_id || ' claimed a POST at ' || a.started_at::text ||
		       ', first attempt ' || s.first_attempt_at::text
		FROM bank_attempts a JOIN settlements s USING (settlement_id)
		WHERE a.op = 'send' AND a.started_at >= s.first_attempt_at + $1::float8 * interval '1 second'
		ORDER BY a.id`, pgx.RowTo[string], e.KeyTTL.Seconds())
	if err != nil {
		return nil, err
	}
	conflicts, err := collect(ctx, db, `
		SELECT c.settlement_id, count(*) FILTER (WHERE c.stored_hash = r.payload_hash)::int, count(*)::int
		FROM receipt_conflicts c LEFT JOIN settlement_receipts r USING (settlement_id)
		GROUP BY c.settlement_id ORDER BY c.settlement_id`, func(row pgx.CollectableRow) ([3]any, error) {
		var id string
		var matching, total int
		err := row.Scan(&id, &matching, &total)
		return [3]any{id, matching, total}, err
	})
	if err != nil {
		return nil, err
	}

	byID := map[string]settlementRow{}
	for _, s := range settlements {
		byID[s.id] = s
	}
	movesOf := map[string][]movementRow{}
	for _, m := range movements {
		movesOf[m.id] = append(movesOf[m.id], m)
	}
	paysOf := map[string][]bankclient.Payment{}
	for _, p := range e.Payments {
		paysOf[p.Reference] = append(paysOf[p.Reference], p)
		if _, ok := byID[p.Reference]; !ok {
			bad("bank payment %s for %s, which is not a settlement", p.ID, p.Reference)
		}
	}

	for _, id := range e.Delivered {
		if _, ok := byID[id]; !ok {
			bad("%s: delivered (and redelivered until acknowledged) but no settlement exists", id)
		}
	}
	for _, s := range settlements {
		first, known := e.First[s.id]
		if !known {
			bad("%s: exists but no intake transaction of it is known to have committed", s.id)
		} else {
			if s.receiptHash != intake.CanonicalHash(first) {
				bad("%s: receipt hash %s is not the first committed payload's %s", s.id, s.receiptHash, intake.CanonicalHash(first))
			}
			if s.account != first.AccountID || s.amount != first.AmountCents || s.currency != first.Currency || s.beneficiary != first.Beneficiary {
				bad("%s: settlement carries %s %d %s → %s, first payload was %s %d %s → %s", s.id,
					s.account, s.amount, s.currency, s.beneficiary, first.AccountID, first.AmountCents, first.Currency, first.Beneficiary)
			}
		}
		if s.bankKey != bankclient.KeyFor(s.id) {
			bad("%s: bank_key %s is not the stable key %s", s.id, s.bankKey, bankclient.KeyFor(s.id))
		}

		// Movements.
		ms := movesOf[s.id]
		switch {
		case s.state == string(settlement.Confirmed) && len(ms) != 1:
			bad("%s: confirmed with %d ledger movements", s.id, len(ms))
		case s.state != string(settlement.Confirmed) && len(ms) != 0:
			bad("%s: %s with %d ledger movement(s)", s.id, s.state, len(ms))
		}
		for _, m := range ms {
			if known && (m.account != first.AccountID || m.amount != first.AmountCents || m.currency != first.Currency) {
				bad("%s: movement %s %d %s differs from the first payload %s %d %s", s.id,
					m.account, m.amount, m.currency, first.AccountID, first.AmountCents, first.Currency)
			}
		}

		// The bank.
		pays := paysOf[s.id]
		if len(pays) > 1 {
			ids := ""
			for _, p := range pays {
				ids += fmt.Sprintf(" %s(%s, created %s)", p.ID, p.Status, p.CreatedAt.Sub(Epoch))
			}
			bad("%s: PAID %d TIMES at the bank:%s", s.id, len(pays), ids)
		}
		settled := 0
		for _, p := range pays {
			if p.IdempotencyKey != bankclient.KeyFor(s.id) {
				bad("%s: bank payment %s under key %s, not the stable key", s.id, p.ID, p.IdempotencyKey)
			}
			if known && (p.AmountCents != first.AmountCents || p.Currency != first.Currency ||
				p.DebtorAccount != first.AccountID || p.CreditorAccount != first.Beneficiary) {
				bad("%s: bank payment %s is %d %s %s → %s, first payload was %d %s %s → %s", s.id, p.ID,
					p.AmountCents, p.Currency, p.DebtorAccount, p.CreditorAccount,
					first.AmountCents, first.Currency, first.AccountID, first.Beneficiary)
			}
			if p.Status == bankclient.StatusSettled {
				settled++
			}
		}
		switch settlement.State(s.state) {
		case settlement.Confirmed:
			if settled == 0 {
				bad("%s: confirmed but the bank holds no settled payment for it (%d payment(s))", s.id, len(pays))
			}
			for _, m := range ms {
				if m.paymentID == nil || !hasPayment(pays, *m.paymentID, bankclient.StatusSettled) {
					bad("%s: movement names bank payment %v, which is not a settled payment of it", s.id, deref(m.paymentID))
				}
			}
		case settlement.Failed:
			if settled > 0 {
				bad("%s: failed but the bank settled a payment for it", s.id)
			}
		default:
			if settled > 0 && !s.flagged && e.Recovered {
				bad("%s: %s after recovery, not flagged, while the bank settled its payment", s.id, s.state)
			}
		}

		// Liveness.
		if e.Recovered && !settlement.State(s.state).Terminal() && !s.flagged {
			bad("%s: still %s after recovery and not flagged needs_investigation", s.id, s.state)
		}
	}

	// Transitions: one chain per settlement, every step allowed.
	prev := map[string]transitionRow{}
	for _, t := range transitions {
		p, seen := prev[t.id]
		switch {
		case !seen && t.from != nil:
			bad("%s: history starts with %s → %s, not with its creation", t.id, *t.from, t.to)
		case !seen && t.to != string(settlement.Pending):
			bad("%s: created in %s, not pending", t.id, t.to)
		case seen && t.from == nil:
			bad("%s: a second creation transition (→ %s)", t.id, t.to)
		case seen && *t.from != p.to:
			bad("%s: transition %s → %s does not follow the previous state %s", t.id, *t.from, t.to, p.to)
		}
		if t.from != nil && !statemachine.Allowed(settlement.State(*t.from), settlement.State(t.to)) {
			bad("%s: transition %s → %s is not allowed (%s)", t.id, *t.from, t.to, t.why)
		}
		prev[t.id] = t
	}
	for _, s := range settlements {
		if last, ok := prev[s.id]; !ok {
			bad("%s: no transition history", s.id)
		} else if last.to != s.state {
			bad("%s: state %s but the last transition went to %s", s.id, s.state, last.to)
		}
	}

	for _, l := range lateSends {
		bad("POST past the key TTL: %s", l)
	}

	recorded := map[string]int{}
	for _, c := range conflicts {
		id, matching, total := c[0].(string), c[1].(int), c[2].(int)
		recorded[id] = total
		if matching != total {
			bad("%s: %d recorded conflict(s) name a stored hash that is not the receipt's", id, total-matching)
		}
	}
	ids := make([]string, 0, len(e.ConflictsAcked))
	for id := range e.ConflictsAcked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if n := e.ConflictsAcked[id]; recorded[id] < n {
			bad("%s: intake answered 409 %d time(s) but receipt_conflicts holds %d", id, n, recorded[id])
		}
	}
	return v, nil
}

func collect[T any](ctx context.Context, db Querier, sql string, fn pgx.RowToFunc[T], args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("error checking invariants: %w", err)
	}
	out, err := pgx.CollectRows(rows, fn)
	if err != nil {
		return nil, fmt.Errorf("error checking invariants: %w", err)
	}
	return out, nil
}

func hasPayment(ps []bankclient.Payment, id string, status bankclient.Status) bool {
	for _, p := range ps {
		if p.ID == id && p.Status == status {
			return true
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}
