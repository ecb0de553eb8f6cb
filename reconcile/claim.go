package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/database/dberr"
)

// DefaultClaimGroup is the claim transactions a worker's concurrent sends
// keep in flight at once (Resolver.ClaimGroup).
const DefaultClaimGroup = 2

// maxClaimGroup is the most sends one shared claim transaction takes.
const maxClaimGroup = 100

// claimSQL claims the POST of one pending settlement: it starts the key
// TTL clock before any POST can reach the bank and gives the sweep the
// settlement after a lease. A POST under a used key is claimed only while
// it is replayable: sent now, it arrives (within RequestBound) before the
// bank forgets the key, so the bank answers with the first payment
// instead of making a second.
const claimSQL = `
	UPDATE settlements
	SET first_attempt_at = COALESCE(first_attempt_at, $2),
	    send_attempts = send_attempts + 1,
	    next_check_at = $3,
	    updated_at = $2
	WHERE settlement_id = $1 AND state = 'pending'
	  AND (first_attempt_at IS NULL OR first_attempt_at > $4)
	RETURNING first_attempt_at`

// claimManySQL is claimSQL and the attempts' rows for many settlements in
// one statement: the settlements of $1 (with their keys $2) that are still
// claimable, each with its attempt's id.
const claimManySQL = `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[]) AS i(settlement_id, bank_key)
), c AS (
	UPDATE settlements s
	SET first_attempt_at = COALESCE(s.first_attempt_at, $3),
	    send_attempts = s.send_attempts + 1,
	    next_check_at = $4,
	    updated_at = $3
	FROM input i
	WHERE s.settlement_id = i.settlement_id AND s.state = 'pending'
	  AND (s.first_attempt_at IS NULL OR s.first_attempt_at > $5)
	RETURNING s.settlement_id, s.first_attempt_at, i.bank_key
), a AS (
	INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at)
	SELECT settlement_id, '` + bankclient.OpSend + `', bank_key, $3 FROM c ORDER BY settlement_id
	RETURNING id, settlement_id
)
SELECT c.settlement_id, c.first_attempt_at, a.id FROM c JOIN a USING (settlement_id)`

// errNotClaimed reports a settlement that could not be claimed: it is no
// longer pending, or its key has aged past a safe resend.
var errNotClaimed = pgx.ErrNoRows

// claim claims the POST of f and records its attempt, committed before it
// returns: alone, or with the claims of the sends running at the same time
// when r.ClaimGroup is positive. It returns errNotClaimed when the
// settlement is no longer claimable.
func (r *Resolver) claim(ctx context.Context, f facts) (first time.Time, attemptID int64, err error) {
	if r.ClaimGroup > 0 {
		r.claimsOnce.Do(func() { r.claims = &claimGroup{r: r, inFlight: r.ClaimGroup} })
		return r.claims.claim(ctx, f.SettlementID, f.BankKey)
	}
	return r.claimOne(ctx, f.SettlementID, f.BankKey)
}

// claimOne is a claim in a transaction of its own.
func (r *Resolver) claimOne(ctx context.Context, id, key string) (first time.Time, attemptID int64, err error) {
	now := r.now()
	err = pgx.BeginFunc(ctx, r.DB, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, claimSQL, id, now, now.Add(r.lease()),
			now.Add(r.policy().RequestBound).Add(-r.policy().KeyTTL)).Scan(&first); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
			INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at)
			VALUES ($1, $2, $3, $4) RETURNING id`,
			id, bankclient.OpSend, key, now).Scan(&attemptID)
	})
	return first, attemptID, err
}

// claimGroup gathers the claims of concurrent sends into shared
// transactions, as intake gathers single events: at most inFlight claim
// transactions run at once, and every claim asked for meanwhile waits for
// the next, which takes them all (up to maxClaimGroup) in one statement and
// one commit. Each settlement's claim and attempt row are committed before
// its own POST leaves, as when it claims alone; a crash after the shared
// commit leaves every settlement of the group claimed, with its lease, to
// the lost-answer path. No goroutine of it outlives its work.
type claimGroup struct {
	r        *Resolver
	inFlight int

	mu      sync.Mutex
	waiting []*claimWaiter
	running int

	// queued, set only by tests, is called with the number of claims
	// waiting each time one is queued.
	queued func(waiting int)
}

// claimWaiter is one send waiting for its claim.
type claimWaiter struct {
	ctx     context.Context
	id, key string
	first   time.Time
	attempt int64
	err     error
	done    chan struct{}
}

func (w *claimWaiter) finish(first time.Time, attempt int64, err error) {
	w.first, w.attempt, w.err = first, attempt, err
	close(w.done)
}

func (g *claimGroup) claim(ctx context.Context, id, key string) (time.Time, int64, error) {
	w := &claimWaiter{ctx: ctx, id: id, key: key, done: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, w)
	if g.queued != nil {
		g.queued(len(g.waiting))
	}
	start := g.running < g.inFlight
	if start {
		g.running++
	}
	g.mu.Unlock()
	if start {
		go g.run()
	}
	select {
	case <-w.done:
		return w.first, w.attempt, w.err
	case <-ctx.Done():
		// The claim may still commit: the settlement is then left, with
		// its lease, to the lost-answer path, as after a crash.
		return time.Time{}, 0, fmt.Errorf("error waiting for the claim of settlement %s: %w", id, ctx.Err())
	}
}

// run commits groups of waiting claims until none is left. A settlement
// asked for twice waits for a later group, so that one statement never
// claims a settlement for two sends.
func (g *claimGroup) run() {
	for {
		g.mu.Lock()
		var group []*claimWaiter
		group, g.waiting = takeGroup(g.waiting, maxClaimGroup, func(w *claimWaiter) string { return w.id })
		if len(group) == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.commit(group)
	}
}

// takeGroup splits waiting into the next group (at most max, one waiter
// per settlement, in the order they came) and the rest, which waits for a
// later group.
func takeGroup[W any](waiting []W, max int, settlementID func(W) string) (group, rest []W) {
	seen := map[string]bool{}
	for _, w := range waiting {
		if id := settlementID(w); len(group) < max && !seen[id] {
			seen[id] = true
			group = append(group, w)
			continue
		}
		rest = append(rest, w)
	}
	return group, rest
}

// commit claims group's settlements in one statement and one commit.
// When that fails with anything but an unavailable database (which every
// send of the group gets, as it would alone), nothing was committed, and
// each claims alone, so that one bad settlement fails no other.
func (g *claimGroup) commit(group []*claimWaiter) {
	if len(group) == 1 {
		w := group[0]
		first, id, err := g.r.claimOne(w.ctx, w.id, w.key)
		w.finish(first, id, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), recordTimeout)
	defer cancel()
	var claimed map[string]claimedRow
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if claimed, err = g.claimMany(ctx, group); !deadlock(err) {
			break
		}
	}
	if err == nil {
		for _, w := range group {
			if c, ok := claimed[w.id]; ok {
				w.finish(c.first, c.attempt, nil)
			} else {
				w.finish(time.Time{}, 0, errNotClaimed)
			}
		}
		return
	}
	if errors.Is(dberr.Classify(err), dberr.ErrUnavailable) {
		for _, w := range group {
			w.finish(time.Time{}, 0, err)
		}
		return
	}
	var wg sync.WaitGroup
	for _, w := range group {
		wg.Go(func() {
			first, id, err := g.r.claimOne(w.ctx, w.id, w.key)
			w.finish(first, id, err)
		})
	}
	wg.Wait()
}

// claimedRow is one settlement a shared claim claimed.
type claimedRow struct {
	first   time.Time
	attempt int64
}

// claimMany runs claimManySQL for group in a transaction of its own.
func (g *claimGroup) claimMany(ctx context.Context, group []*claimWaiter) (map[string]claimedRow, error) {
	r := g.r
	now := r.now()
	ids, keys := make([]string, len(group)), make([]string, len(group))
	for i, w := range group {
		ids[i], keys[i] = w.id, w.key
	}
	claimed := make(map[string]claimedRow, len(group))
	err := pgx.BeginFunc(ctx, r.DB, func(tx pgx.Tx) error {
		clear(claimed)
		rows, err := tx.Query(ctx, claimManySQL, ids, keys, now, now.Add(r.lease()),
			now.Add(r.policy().RequestBound).Add(-r.policy().KeyTTL))
		if err != nil {
			return err
		}
		var id string
		var c claimedRow
		_, err = pgx.ForEachRow(rows, []any{&id, &c.first, &c.attempt}, func() error {
			claimed[id] = c
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("error claiming the sends of %d settlements: %w", len(group), err)
	}
	return claimed, nil
}

// deadlock reports whether err is a deadlock PostgreSQL broke by rolling
// the transaction back (two shared claims locking the same settlements in
// different orders): the claim is then simply run again.
func deadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DeadlockDetected
}
