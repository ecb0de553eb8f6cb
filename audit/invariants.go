package audit

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

// Payload is what a settlement must carry: the business fields of the
// event whose intake transaction committed first. A zero field is not
// checked (a caller may know only the amount it was acknowledged with).
type Payload struct {
	AccountID   string
	AmountCents int64
	Currency    string
	Beneficiary string
	// PayloadHash is the canonical hash the receipt must hold.
	PayloadHash string
}

// Expect is what CheckInvariants knows from outside the engine's tables.
// Its zero value checks the tables alone.
type Expect struct {
	// First maps a settlement_id to the payload it must carry.
	First map[string]Payload
	// AllCommitted says First names every settlement whose intake
	// transaction committed: any other settlement is a violation.
	AllCommitted bool
	// Delivered lists settlements that were acknowledged (or delivered
	// until acknowledged): each must exist.
	Delivered []string
	// CheckBank asks for the checks against Payments, the bank's books.
	CheckBank bool
	// Payments is every payment the bank ever executed, forgotten keys
	// included (the bank's statement).
	Payments []bankclient.Payment
	// Bank, when not empty, names the bank Payments come from (several
	// banks on one database): only its settlements are checked against
	// them, and a payment there of another bank's settlement is a
	// violation (paid at the wrong bank). Empty: every settlement.
	Bank string
	// KeyTTL, when positive, is the engine's --bank-key-ttl: no POST may
	// have been claimed once it had passed since the first attempt.
	KeyTTL time.Duration
	// ConflictsAcked counts the 409 answers intake gave per settlement;
	// each must be recorded in receipt_conflicts.
	ConflictsAcked map[string]int
	// Recovered asks for the liveness check: every settlement is terminal
	// or flagged needs_investigation.
	Recovered bool
	// PartialReturns lists the references of payments the bank returned
	// in part, each reported to the engine: such a settlement must be
	// flagged needs_investigation for a human to book (partial_return, or
	// another reason it was flagged for), never returned or failed on a
	// guess.
	PartialReturns []string
}

// CheckInvariants is the one exactly-once checker: the simulation, the
// end-to-end, fault and job tests, soak and `settle demo` all use it. It
// reads the engine's tables (and, with e.CheckBank, the bank's books) and
// returns one line per violation, empty when every invariant holds:
//
//   - every delivered settlement exists and carries its first payload
//     (receipt hash, account, amount, currency, beneficiary);
//   - a confirmed settlement has exactly one payout movement and no
//     reversal; a returned one exactly one of each; any other none; every
//     movement carries its settlement's account, amount and currency; no
//     movement exists without its settlement;
//   - the bank_key is the stable key of the settlement id;
//   - the history is one chain from its creation (→ pending) to the
//     current state, every step allowed by statemachine.Allowed;
//   - at most one payment per settlement at the bank, under its stable
//     key, for the first payload's amount, currency and accounts;
//   - a confirmed settlement has a settled payment at the bank, which its
//     movement names when any answer gave its id (one confirmed from a
//     statement line after a lost answer knows no id); a failed one has
//     none; after recovery a settled
//     payment belongs to a confirmed settlement or a flagged one;
//   - no POST (a send or a replay) was claimed once KeyTTL had passed since
//     the first attempt;
//   - every 409 answered was recorded in receipt_conflicts, against the
//     receipt's hash;
//   - a settlement whose payment came back in part is flagged
//     needs_investigation, neither returned nor failed;
//   - after recovery, nothing is open without needs_investigation;
//   - every transition has exactly one event, in the same order; a
//     settlement's events are numbered from 1 without a gap; a flag and a
//     recorded conflict each have theirs (DESIGN.md section 19);
//   - the ledger's rules (LedgerMismatches: balances sum to zero per
//     currency, postings and holds match each settlement's state, kept
//     balances equal the sums of postings and open holds).
//
// An error means the checker could not read the database.
func CheckInvariants(ctx context.Context, db inspect.Querier, e Expect) ([]string, error) {
	var v []string
	bad := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }

	type settlementRow struct {
		id, ref, account, currency, beneficiary, bankKey, receiptHash, flagReason, bank string
		state                                                                           settlement.State
		amount                                                                          int64
		flagged                                                                         bool
	}
	settlements, err := inspect.Collect(ctx, db, `
		SELECT s.settlement_id, coalesce(s.bank_reference, s.settlement_id), s.state, s.account_id, s.currency,
		       s.beneficiary, s.bank_key, coalesce(r.payload_hash, ''), s.amount_cents, s.needs_investigation,
		       coalesce(s.investigation_reason, ''), s.bank
		FROM settlements s LEFT JOIN settlement_receipts r USING (settlement_id)
		ORDER BY s.settlement_id`, func(row pgx.CollectableRow) (settlementRow, error) {
		var s settlementRow
		err := row.Scan(&s.id, &s.ref, &s.state, &s.account, &s.currency, &s.beneficiary, &s.bankKey,
			&s.receiptHash, &s.amount, &s.flagged, &s.flagReason, &s.bank)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	type movementRow struct {
		id, kind, account, currency, paymentID string
		amount                                 int64
	}
	movements, err := inspect.Collect(ctx, db, `
		SELECT settlement_id, kind, account_id, currency, amount_cents, coalesce(bank_payment_id, '')
		FROM ledger_movements ORDER BY id`, func(row pgx.CollectableRow) (movementRow, error) {
		var m movementRow
		err := row.Scan(&m.id, &m.kind, &m.account, &m.currency, &m.amount, &m.paymentID)
		return m, err
	})
	if err != nil {
		return nil, err
	}
	type transitionRow struct {
		id, why string
		from    *settlement.State
		to      settlement.State
	}
	transitions, err := inspect.Collect(ctx, db, `
		SELECT settlement_id, from_state, to_state, reason
		FROM settlement_transitions ORDER BY settlement_id, id`, func(row pgx.CollectableRow) (transitionRow, error) {
		var t transitionRow
		err := row.Scan(&t.id, &t.from, &t.to, &t.why)
		return t, err
	})
	if err != nil {
		return nil, err
	}
	var lateSends []string
	if e.KeyTTL > 0 {
		lateSends, err = inspect.Collect(ctx, db, `
			SELECT a.settlement_id || ' claimed a POST at ' || a.started_at::text ||
			       ', first attempt ' || s.first_attempt_at::text
			FROM bank_attempts a JOIN settlements s USING (settlement_id)
			WHERE a.op IN ('send', 'replay') AND a.started_at >= s.first_attempt_at + $1::float8 * interval '1 second'
			ORDER BY a.id`, pgx.RowTo[string], e.KeyTTL.Seconds())
		if err != nil {
			return nil, err
		}
	}
	type conflictRow struct {
		id              string
		matching, total int
	}
	conflicts, err := inspect.Collect(ctx, db, `
		SELECT c.settlement_id, count(*) FILTER (WHERE c.stored_hash = r.payload_hash)::int, count(*)::int
		FROM receipt_conflicts c LEFT JOIN settlement_receipts r USING (settlement_id)
		GROUP BY c.settlement_id ORDER BY c.settlement_id`, func(row pgx.CollectableRow) (conflictRow, error) {
		var c conflictRow
		err := row.Scan(&c.id, &c.matching, &c.total)
		return c, err
	})
	if err != nil {
		return nil, err
	}

	byID := map[string]settlementRow{}
	idOfRef := map[string]string{}   // the bank knows settlements by their reference
	otherBank := map[string]string{} // reference → bank, of the settlements of other banks
	for _, s := range settlements {
		byID[s.id] = s
		if e.Bank != "" && s.bank != e.Bank {
			otherBank[s.ref] = s.bank
			continue
		}
		idOfRef[s.ref] = s.id
	}
	movesOf := map[string][]movementRow{}
	for _, m := range movements {
		movesOf[m.id] = append(movesOf[m.id], m)
		if _, ok := byID[m.id]; !ok {
			bad("%s: %s movement without a settlement", m.id, m.kind)
		}
	}
	paysOf := map[string][]bankclient.Payment{}
	for _, p := range e.Payments {
		id, ok := idOfRef[p.Reference]
		switch other, isOther := otherBank[p.Reference]; {
		case !ok && isOther && e.CheckBank:
			bad("bank payment %s at bank %s for reference %s, a settlement of bank %s: PAID AT THE WRONG BANK", p.ID, e.Bank, p.Reference, other)
			continue
		case !ok && e.CheckBank:
			bad("bank payment %s for reference %s, which is no settlement's", p.ID, p.Reference)
		}
		paysOf[id] = append(paysOf[id], p)
	}
	for _, id := range e.Delivered {
		if _, ok := byID[id]; !ok {
			bad("%s: acknowledged (or delivered until acknowledged) but no settlement exists", id)
		}
	}

	for _, s := range settlements {
		first, known := e.First[s.id]
		switch {
		case !known && e.AllCommitted:
			bad("%s: exists but no intake transaction of it is known to have committed", s.id)
		case known:
			if first.PayloadHash != "" && s.receiptHash != first.PayloadHash {
				bad("%s: receipt hash %s is not the first committed payload's %s", s.id, s.receiptHash, first.PayloadHash)
			}
			if differs(s.account, first.AccountID) || (first.AmountCents != 0 && s.amount != first.AmountCents) ||
				differs(s.currency, first.Currency) || differs(s.beneficiary, first.Beneficiary) {
				bad("%s: settlement carries %s %d %s → %s, first payload was %s %d %s → %s", s.id,
					s.account, s.amount, s.currency, s.beneficiary, first.AccountID, first.AmountCents, first.Currency, first.Beneficiary)
			}
		}
		if s.bankKey != bankclient.KeyFor(s.id) {
			bad("%s: bank_key %s is not the stable key %s", s.id, s.bankKey, bankclient.KeyFor(s.id))
		}

		// Movements: payout with confirmed, payout and reversal with
		// returned, none otherwise.
		ms := movesOf[s.id]
		kinds := map[string]int{}
		for _, m := range ms {
			kinds[m.kind]++
			if m.account != s.account || m.amount != s.amount || m.currency != s.currency {
				bad("%s: %s movement %s %d %s differs from the settlement's %s %d %s", s.id, m.kind,
					m.account, m.amount, m.currency, s.account, s.amount, s.currency)
			}
		}
		want := map[settlement.State]string{settlement.Confirmed: "payout", settlement.Returned: "payout+reversal"}[s.state]
		if got := movementKinds(kinds); got != want {
			if want == "" {
				want = "none"
			}
			bad("%s: %s with %d ledger movement(s) (%s), want %s", s.id, s.state, len(ms), got, want)
		}

		if e.CheckBank && (e.Bank == "" || s.bank == e.Bank) {
			pays := paysOf[s.id]
			if len(pays) > 1 {
				var ids strings.Builder
				for _, p := range pays {
					fmt.Fprintf(&ids, " %s(%s, created %s)", p.ID, p.Status, p.CreatedAt.Format(time.RFC3339Nano))
				}
				bad("%s: PAID %d TIMES at the bank:%s", s.id, len(pays), ids.String())
			}
			settled := 0
			for _, p := range pays {
				if p.IdempotencyKey != "" && p.IdempotencyKey != bankclient.KeyFor(s.id) {
					bad("%s: bank payment %s under key %s, not the stable key", s.id, p.ID, p.IdempotencyKey)
				}
				if known && ((first.AmountCents != 0 && p.AmountCents != first.AmountCents) || differs(p.Currency, first.Currency) ||
					differs(p.DebtorAccount, first.AccountID) || differs(p.CreditorAccount, first.Beneficiary)) {
					bad("%s: bank payment %s is %d %s %s → %s, first payload was %d %s %s → %s", s.id, p.ID,
						p.AmountCents, p.Currency, p.DebtorAccount, p.CreditorAccount,
						first.AmountCents, first.Currency, first.AccountID, first.Beneficiary)
				}
				if p.AmountCents != s.amount {
					bad("%s: bank payment %s is for %d, the settlement for %d", s.id, p.ID, p.AmountCents, s.amount)
				}
				if p.Status == bankclient.StatusSettled {
					settled++
				}
			}
			switch s.state {
			case settlement.Confirmed:
				if settled == 0 {
					bad("%s: confirmed but the bank holds no settled payment for it (%d payment(s))", s.id, len(pays))
				}
				for _, m := range ms {
					if m.kind == "payout" && m.paymentID != "" && !hasPayment(pays, m.paymentID, bankclient.StatusSettled) {
						bad("%s: movement names bank payment %q, which is not a settled payment of it", s.id, m.paymentID)
					}
				}
			case settlement.Failed:
				if settled > 0 {
					bad("%s: failed but the bank settled a payment for it", s.id)
				}
			case settlement.Returned:
				if settled > 0 {
					bad("%s: returned but the bank holds its payment as settled", s.id)
				}
			default:
				if settled > 0 && !s.flagged && e.Recovered {
					bad("%s: %s after recovery, not flagged, while the bank settled its payment", s.id, s.state)
				}
			}
		}
		if e.Recovered && !s.state.Terminal() && !s.flagged {
			bad("%s: still %s after recovery and not flagged needs_investigation", s.id, s.state)
		}
	}

	// Transitions: one chain per settlement, every step allowed.
	last := map[string]settlement.State{}
	for _, t := range transitions {
		prev, seen := last[t.id]
		switch {
		case !seen && t.from != nil:
			bad("%s: history starts with %s → %s, not with its creation", t.id, *t.from, t.to)
		case !seen && t.to != settlement.Pending:
			bad("%s: created in %s, not pending", t.id, t.to)
		case seen && t.from == nil:
			bad("%s: a second creation transition (→ %s)", t.id, t.to)
		case seen && *t.from != prev:
			bad("%s: transition %s → %s does not follow the previous state %s", t.id, *t.from, t.to, prev)
		}
		if t.from != nil && !statemachine.Allowed(*t.from, t.to) {
			bad("%s: transition %s → %s is not allowed (%s)", t.id, *t.from, t.to, t.why)
		}
		last[t.id] = t.to
	}
	for _, s := range settlements {
		if to, ok := last[s.id]; !ok {
			bad("%s: no transition history", s.id)
		} else if to != s.state {
			bad("%s: state %s but the last transition went to %s", s.id, s.state, to)
		}
	}

	for _, ref := range e.PartialReturns {
		s, ok := byID[idOfRef[ref]]
		switch {
		case !ok:
			bad("bank returned part of a payment with reference %s, which is no settlement's", ref)
		case s.state == settlement.Returned || s.state == settlement.Failed || !s.flagged:
			bad("%s: the bank returned part of its payment, but it is %s (flag %q), not flagged for a human", s.id, s.state, s.flagReason)
		}
	}

	for _, l := range lateSends {
		bad("POST past the key TTL: %s", l)
	}

	recorded := map[string]int{}
	for _, c := range conflicts {
		recorded[c.id] = c.total
		if c.matching != c.total {
			bad("%s: %d recorded conflict(s) name a stored hash that is not the receipt's", c.id, c.total-c.matching)
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
	events, err := EventViolations(ctx, db)
	if err != nil {
		return nil, err
	}
	v = append(v, events...)
	ledger, err := inspect.LedgerMismatches(ctx, db)
	if err != nil {
		return nil, err
	}
	for _, m := range ledger {
		v = append(v, m.String())
	}
	return v, nil
}

// EventViolations returns one line per violation of the outbox's rules
// (part of CheckInvariants): a settlement's transitions and its transition
// events match one to one, in order; its events are numbered 1..n without
// a gap; a flagged settlement's last flag event names its reason; every
// recorded conflict with a settlement has its event (one with a receipt
// refused for want of funds has no settlement, so no event); its last
// event holds it as it is (its state, amount, currency and account, and
// every transition it has made): what a consumer last heard is the truth.
func EventViolations(ctx context.Context, db inspect.Querier) ([]string, error) {
	return inspect.Collect(ctx, db, eventViolationsSQL, pgx.RowTo[string])
}

// eventViolationsSQL returns one line per violation of the outbox's rules
// (DESIGN.md section 19): a settlement's transitions and its transition
// events match one to one, in order; its events are numbered 1..n with no
// gap, n being its event_seq; a flagged settlement's last flag event names
// its reason; every recorded conflict has its event; the last event holds
// the settlement's state, amount, currency, account and transitions.
const eventViolationsSQL = `
	WITH t AS (
		SELECT settlement_id, row_number() OVER (PARTITION BY settlement_id ORDER BY id) AS k,
		       coalesce(from_state, '') AS f, to_state
		FROM settlement_transitions
	), e AS (
		SELECT settlement_id, row_number() OVER (PARTITION BY settlement_id ORDER BY n) AS k,
		       coalesce(payload->>'from_state', '') AS f, substr(type, length('settlement.') + 1) AS to_state, event_id
		FROM settlement_events WHERE type NOT IN ('settlement.flagged', 'settlement.conflict')
	)
	SELECT coalesce(t.settlement_id, e.settlement_id) || ': transition ' || coalesce(t.k, e.k) || ' (' || coalesce(t.f, '') || ' → ' ||
	       coalesce(t.to_state, 'none') || ') has event ' || coalesce(e.event_id, 'none') || ' (' ||
	       coalesce(e.f, '') || ' → ' || coalesce(e.to_state, 'none') || ')'
	FROM t FULL JOIN e USING (settlement_id, k)
	WHERE t.to_state IS DISTINCT FROM e.to_state OR t.f IS DISTINCT FROM e.f
	UNION ALL
	SELECT s.settlement_id || ': events numbered ' || coalesce(min(ev.n), 0) || '..' || coalesce(max(ev.n), 0) ||
	       ' (' || count(ev.n) || ' rows), event_seq ' || s.event_seq
	FROM settlements s LEFT JOIN settlement_events ev USING (settlement_id)
	GROUP BY s.settlement_id, s.event_seq
	HAVING count(ev.n) <> s.event_seq OR coalesce(max(ev.n), 0) <> s.event_seq
	UNION ALL
	SELECT s.settlement_id || ': flagged ' || s.investigation_reason || ' but its last flag event says ' ||
	       coalesce((SELECT ev.payload->>'reason' FROM settlement_events ev
	                 WHERE ev.settlement_id = s.settlement_id AND ev.type = 'settlement.flagged' ORDER BY ev.n DESC LIMIT 1), 'nothing')
	FROM settlements s
	WHERE s.needs_investigation AND s.investigation_reason IS DISTINCT FROM
	      (SELECT ev.payload->>'reason' FROM settlement_events ev
	       WHERE ev.settlement_id = s.settlement_id AND ev.type = 'settlement.flagged' ORDER BY ev.n DESC LIMIT 1)
	UNION ALL
	SELECT c.settlement_id || ': ' || c.recorded || ' receipt conflict(s) recorded, ' || coalesce(ev.events, 0) || ' conflict event(s)'
	FROM (SELECT settlement_id, count(*) AS recorded FROM receipt_conflicts rc
	      WHERE EXISTS (SELECT 1 FROM settlements s WHERE s.settlement_id = rc.settlement_id)
	      GROUP BY settlement_id) c
	LEFT JOIN (SELECT settlement_id, count(*) AS events FROM settlement_events
	           WHERE type = 'settlement.conflict' GROUP BY settlement_id) ev USING (settlement_id)
	WHERE c.recorded <> coalesce(ev.events, 0)
	UNION ALL
	SELECT s.settlement_id || ': its last event ' || ev.event_id || ' holds it ' ||
	       coalesce(ev.payload->'settlement'->>'state', 'without a state') || ', ' ||
	       coalesce(ev.payload->'settlement'->>'amount_cents', '?') || ' ' || coalesce(ev.payload->'settlement'->>'currency', '?') ||
	       ' from ' || coalesce(ev.payload->'settlement'->>'account_id', '?') || ' after ' ||
	       coalesce(ev.transitions::text, '?') || ' transition(s); it is ' || s.state || ', ' || s.amount_cents || ' ' || s.currency ||
	       ' from ' || s.account_id || ' after ' || tr.n || ' transition(s)'
	FROM settlements s
	JOIN LATERAL (SELECT e.event_id, e.payload,
	                     CASE jsonb_typeof(e.payload->'transitions') WHEN 'array' THEN jsonb_array_length(e.payload->'transitions') END AS transitions
	              FROM settlement_events e WHERE e.settlement_id = s.settlement_id ORDER BY e.n DESC LIMIT 1) ev ON true
	CROSS JOIN LATERAL (SELECT count(*) AS n FROM settlement_transitions t WHERE t.settlement_id = s.settlement_id) tr
	WHERE ev.payload->'settlement'->>'state' IS DISTINCT FROM s.state
	   OR ev.payload->'settlement'->'amount_cents' IS DISTINCT FROM to_jsonb(s.amount_cents)
	   OR ev.payload->'settlement'->>'currency' IS DISTINCT FROM s.currency
	   OR ev.payload->'settlement'->>'account_id' IS DISTINCT FROM s.account_id
	   OR ev.transitions IS DISTINCT FROM tr.n`

// differs reports whether a stored value differs from an expected one that
// is known (not empty).
func differs(stored, expected string) bool { return expected != "" && stored != expected }

// movementKinds names a settlement's movements: "none", "payout",
// "payout+reversal", or what else it holds ("payout×2", …).
func movementKinds(kinds map[string]int) string {
	if len(kinds) == 0 {
		return ""
	}
	names := make([]string, 0, len(kinds))
	for k, n := range kinds {
		if n != 1 {
			k = fmt.Sprintf("%s×%d", k, n)
		}
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}

func hasPayment(ps []bankclient.Payment, id string, status bankclient.Status) bool {
	for _, p := range ps {
		if p.ID == id && p.Status == status {
			return true
		}
	}
	return false
}
