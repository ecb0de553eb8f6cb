package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
)

// WatchResult is what one round of the return watch did (Resolver.Watch).
type WatchResult struct {
	// Watched is how many confirmed settlements were in their return watch.
	Watched int `json:"watched"`
	// Listed is true when the bank's list of returns answered in full:
	// every watched payment was asked about in one go.
	Listed bool `json:"listed"`
	// ListCalls is how many pages of the list were asked for.
	ListCalls int `json:"list_calls"`
	// Checked is how many settlements were asked about one by one (the
	// bank has no list, or it failed or came back partial).
	Checked int `json:"checked"`
	// Unanswered is how many of those checks got no answer.
	Unanswered int `json:"unanswered"`
	// Changed is how many settlements a return (or a flag) moved: the only
	// ones written.
	Changed int `json:"changed"`
	// ListError is why the list did not answer in full (empty when it did,
	// or when the bank has none).
	ListError string `json:"list_error,omitempty"`
}

// watched is a confirmed settlement in its return watch.
type watched struct {
	id, reference string
	firstAttempt  *time.Time
	confirmedAt   time.Time
}

// Watch is one round of the return watch of a Resolver with WatchInBulk:
// it asks the bank whether any payment of the confirmed settlements in
// their watch (ReturnWatch) came back, and books what a return changes
// exactly as a status check would (DecideStatus: confirmed → returned
// with its reversal, in one transaction, or a flag), writing nothing for a
// settlement nothing happened to. Where the bank lists its returns
// (bankclient.ReturnLister), one list since the oldest watched payment's
// first attempt answers for all of them. Where it has no list, or the
// list fails or comes back partial, the settlements due a check this
// round are asked one by one, on the schedule their own checks would
// have kept (10 minutes after confirmation, 20, 40, …, and once more in
// the last period of the watch), so that no return goes unseen; the
// returns of the pages read are booked all the same. period is how long
// until the next round.
func (r *Resolver) Watch(ctx context.Context, period time.Duration) (WatchResult, error) {
	var res WatchResult
	p := r.policy()
	if p.ReturnWatch <= 0 {
		return res, nil
	}
	now := r.now()
	ws, err := r.watchedSettlements(ctx, now.Add(-p.ReturnWatch))
	if err != nil {
		return res, err
	}
	res.Watched = len(ws)
	if len(ws) == 0 {
		return res, nil
	}
	if l, ok := r.Bank.(bankclient.ReturnLister); ok {
		listErr, err := r.watchByList(ctx, l, ws, &res)
		if err != nil {
			return res, err
		}
		if listErr == nil {
			res.Listed = true
			return res, nil
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("error listing the bank's returns: %w", listErr)
		}
		res.ListError = listErr.Error()
		level := slog.LevelWarn
		if errors.Is(listErr, bankclient.ErrUnsupported) {
			level = slog.LevelDebug
		}
		r.log().LogAttrs(ctx, level, "return watch: the bank's list of returns did not answer in full; asking payment by payment",
			slog.String("bank", r.BankName), slog.String("error", listErr.Error()))
	}
	for _, w := range ws {
		if ctx.Err() != nil {
			return res, fmt.Errorf("error watching for returns: %w", ctx.Err())
		}
		if !p.watchDue(w.confirmedAt, now, period) {
			continue
		}
		res.Checked++
		changed, answered, err := r.watchCheck(ctx, w.id)
		if err != nil {
			return res, err
		}
		if !answered {
			res.Unanswered++
		}
		if changed {
			res.Changed++
		}
	}
	return res, nil
}

// watchedSettlements loads the confirmed settlements of the Resolver's
// bank confirmed after from and not flagged. A confirmed settlement
// watched in bulk is not written after its confirmation, so updated_at
// (indexed with state) bounds the scan.
func (r *Resolver) watchedSettlements(ctx context.Context, from time.Time) ([]watched, error) {
	tx, err := r.DB.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("error loading the settlements in their return watch: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only
	rows, err := tx.Query(ctx, `
		SELECT s.settlement_id, coalesce(s.bank_reference, s.settlement_id), s.first_attempt_at, c.at
		FROM settlements s
		CROSS JOIN LATERAL (SELECT max(t.at) AS at FROM settlement_transitions t
		                    WHERE t.settlement_id = s.settlement_id AND t.to_state = 'confirmed') c
		WHERE s.state = 'confirmed' AND s.updated_at > $1 AND s.investigation_reason IS NULL
		  AND ($2::text = '' OR s.bank = $2) AND c.at > $1
		ORDER BY c.at`, from, r.BankName)
	if err != nil {
		return nil, fmt.Errorf("error loading the settlements in their return watch: %w", err)
	}
	ws, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (watched, error) {
		var w watched
		return w, row.Scan(&w.id, &w.reference, &w.firstAttempt, &w.confirmedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("error loading the settlements in their return watch: %w", err)
	}
	return ws, nil
}

// watchByList reads the bank's list of the returns of payments created
// since the oldest watched payment was first attempted, and books each one
// of a watched settlement. It returns the list's error, if any, once the
// pages read are booked (listErr), or the error that kept them from being
// booked (err).
func (r *Resolver) watchByList(ctx context.Context, l bankclient.ReturnLister, ws []watched, res *WatchResult) (listErr, err error) {
	byRef := make(map[string]string, len(ws))
	var since time.Time
	oldest := true
	for _, w := range ws {
		byRef[w.reference] = w.id
		switch {
		case w.firstAttempt == nil:
			oldest, since = false, time.Time{} // unknown: the whole list
		case oldest && (since.IsZero() || w.firstAttempt.Before(since)):
			since = *w.firstAttempt
		}
	}
	if !since.IsZero() {
		since = since.Add(-searchSlack)
	}
	counted := countingLister{l: l, calls: &res.ListCalls}
	for pay, listErr := range bankclient.Returned(ctx, counted, since, 1000) {
		if listErr != nil {
			return listErr, nil
		}
		id, ok := byRef[pay.Reference]
		if !ok {
			continue
		}
		// Recorded in bank_attempts as what it is: an answer from the
		// bank's list.
		changed, err := r.watchApply(ctx, id, Answer{Kind: AnswerPayment, Payment: pay, Question: AskSearch}, bankclient.OpSearch)
		if err != nil {
			return nil, err
		}
		if changed {
			res.Changed++
		}
	}
	return nil, nil
}

// countingLister counts the pages asked of a ReturnLister.
type countingLister struct {
	l     bankclient.ReturnLister
	calls *int
}

func (c countingLister) ReturnedSince(ctx context.Context, since time.Time, after string, limit int) (bankclient.StatementPage, error) {
	*c.calls++
	return c.l.ReturnedSince(ctx, since, after, limit)
}

// watchDue reports whether a settlement confirmed at confirmed is due a
// check of its own in the round at now, the next round coming period
// later: a check its own schedule (watchDelay: 10 minutes after
// confirmation, then each as long after as the one before) would have
// made since the last round, or the last round before its watch ends.
func (p Policy) watchDue(confirmed, now time.Time, period time.Duration) bool {
	end := confirmed.Add(p.ReturnWatch)
	if !now.Before(end) {
		return false
	}
	if !now.Add(period).Before(end) {
		return true
	}
	step := max(p.MaxCheckInterval, p.CheckInterval, time.Nanosecond)
	for at := confirmed.Add(step); !at.After(now); at = confirmed.Add(2 * at.Sub(confirmed)) {
		if at.After(now.Add(-period)) {
			return true
		}
	}
	return false
}

// watchCheck asks the bank about one watched settlement, as its own check
// would, and books what the answer changes; an answer that changes nothing
// writes nothing. answered is false when the bank gave no answer.
func (r *Resolver) watchCheck(ctx context.Context, id string) (changed, answered bool, err error) {
	f, err := r.load(ctx, id)
	if err != nil {
		return false, false, err
	}
	if !f.Watched {
		return false, true, nil // moved, flagged or out of its watch since the round began
	}
	q := ChooseQuestion(f.Facts, r.policy(), r.now())
	if q == AskNothing || q == AskReplay {
		// No question that writes nothing: the settlement's own check
		// (which records its attempt) decides.
		out, err := r.check(ctx, f, nil)
		return out.State != f.State || out.FlagReason != "", err == nil, err
	}
	ans, ok, askErr := r.ask(ctx, f, q)
	if !ok {
		if ctx.Err() != nil {
			return false, false, fmt.Errorf("error checking settlement %s for a return: %w", id, askErr)
		}
		return false, false, nil
	}
	ans.Question = q
	op := bankclient.OpStatus
	if q == AskSearch {
		op = bankclient.OpSearch
	}
	changed, err = r.watchApplyFacts(ctx, f, ans, op)
	return changed, ans.Kind != AnswerAmbiguous && ans.Kind != AnswerUnauthorized, err
}

// watchApply books what the bank's answer about a watched settlement
// changes, if anything.
func (r *Resolver) watchApply(ctx context.Context, id string, ans Answer, op string) (bool, error) {
	f, err := r.load(ctx, id)
	if err != nil {
		return false, err
	}
	if !f.Watched {
		return false, nil
	}
	return r.watchApplyFacts(ctx, f, ans, op)
}

// watchApplyFacts decides a watched settlement on the bank's answer as a
// status check does (DecideStatus). Nothing changed (still confirmed, no
// flag) writes nothing; a change records the bank call that brought it in
// bank_attempts and is applied as a check's: the transition, the reversal
// and the flag in one transaction, exactly once.
func (r *Resolver) watchApplyFacts(ctx context.Context, f facts, ans Answer, op string) (bool, error) {
	now := r.now()
	d := DecideStatus(f.Facts, r.policy(), now, ans)
	if !d.Moves(f.State) && d.Flag == "" {
		return false, nil
	}
	att := attempt{op: op, answer: ans, sent: true}
	if err := r.DB.QueryRow(ctx, `
		INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at)
		VALUES ($1, $2, $3, $4) RETURNING id`,
		f.SettlementID, op, f.BankKey, now).Scan(&att.id); err != nil {
		return false, fmt.Errorf("error recording the return watch's answer for settlement %s: %w", f.SettlementID, err)
	}
	out, err := r.apply(ctx, f, d, att, nil)
	if err != nil {
		return false, err
	}
	return !out.LostRace, nil
}
