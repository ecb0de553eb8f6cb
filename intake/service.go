package intake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/settlement/settlementdb"
	"github.com/settle/settle/statemachine"
)

// Defaults of Config.
const (
	// DefaultReplayHorizon is how old an event may be (--replay-horizon).
	DefaultReplayHorizon = 720 * time.Hour
	// DefaultPendingGrace is how long a new settlement waits for its
	// send_instruction job before the sweep looks at it (next_check_at).
	DefaultPendingGrace = time.Minute
	// DefaultTimeout bounds the database work of one call.
	DefaultTimeout = 10 * time.Second
	// MaxBatch is the largest number of events in one batch.
	MaxBatch = 1000
)

// SendJob is the send_instruction job of a new settlement: its id and the
// bank it is bound to, whose workers alone may take the job.
type SendJob struct {
	SettlementID string
	Bank         string
}

// JobInserter inserts the send_instruction jobs of new settlements inside
// the intake transaction. jobs.Inserter satisfies it.
type JobInserter interface {
	InsertSendTx(ctx context.Context, tx pgx.Tx, jobs []SendJob) error
}

// DB is what intake needs of a connection pool; *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Ping(ctx context.Context) error
}

// Config configures a Service. DB and Jobs are required.
type Config struct {
	DB   DB
	Jobs JobInserter
	// Metrics receives the intake metrics (default: registered nowhere).
	Metrics *metrics.Metrics
	// Now is the clock (default time.Now).
	Now func() time.Time
	// ReplayHorizon refuses events whose occurred_at is older (default 720h).
	ReplayHorizon time.Duration
	// PendingGrace sets next_check_at = now + PendingGrace on new
	// settlements (default 1m).
	PendingGrace time.Duration
	// Timeout bounds the database work of one call (default 10s); past it
	// the call fails with ErrUnavailable.
	Timeout time.Duration
	// Bank is the connector settlements are paid through (default
	// settle.Connector): it derives each settlement's bank
	// reference, and an event it could never send is refused (422).
	// Banks, when not empty, replaces it: the banks the worker serves
	// (--bank settle,stripe), each named by its connector.
	Bank  bankclient.Connector
	Banks []bankclient.Connector
	// Routes bind an event that names no bank (--route): by currency,
	// else the default rule, else the one bank served. A bank a rule names
	// may be one the worker does not serve: its settlements wait for a
	// worker of that bank.
	Routes Routes
	// Connectors are those a rule may name besides the banks served (the
	// program's list, bankclient.Connectors); nil: only the banks served.
	Connectors bankclient.Connectors
	// MaxAmounts are the operator's own ceilings by currency
	// (--max-amount): an event over its currency's is refused (422), as
	// one over the connector's own limit is.
	MaxAmounts MaxAmounts
	// FundsCheck refuses a payout its account's available balance does not
	// cover (--funds-check): an *InsufficientFundsError (422), recorded as
	// its receipt's outcome, nothing held. The payouts of one account are
	// decided one at a time, under the lock of the account's row.
	FundsCheck bool
	// GroupCommit, when positive, lets single events (Submit) share their
	// intake transaction: at most GroupCommit such transactions run at
	// once, and the events submitted meanwhile wait for the next one, which
	// takes them all (up to 100) and gives each its own outcome. Zero
	// commits every Submit alone. Batches (SubmitBatch) are not grouped.
	GroupCommit int
}

// Service takes settlement events in: the receipt transaction, replays and
// conflicts. It is safe for concurrent use and keeps no state of its own
// between calls: every decision is made by the database.
type Service struct {
	db      DB
	jobs    JobInserter
	m       *metrics.Metrics
	now     func() time.Time
	horizon time.Duration
	grace   time.Duration
	timeout time.Duration
	router  *router
	ceiling MaxAmounts
	funds   bool
	// group gathers single events into shared transactions (nil: each
	// commits alone).
	group *groupCommit
}

// NewService returns a Service for cfg.
func NewService(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.Jobs == nil {
		return nil, errors.New("error creating intake service: DB and Jobs are required")
	}
	for c, n := range cfg.MaxAmounts {
		if n <= 0 {
			return nil, fmt.Errorf("error creating intake service: the ceiling of %s, %d, is not positive", c, n)
		}
	}
	s := &Service{db: cfg.DB, jobs: cfg.Jobs, m: cfg.Metrics, now: cfg.Now,
		horizon: cfg.ReplayHorizon, grace: cfg.PendingGrace, timeout: cfg.Timeout,
		ceiling: maps.Clone(cfg.MaxAmounts), funds: cfg.FundsCheck}
	served := cfg.Banks
	if len(served) == 0 {
		served = []bankclient.Connector{cfg.Bank}
		if cfg.Bank.Name == "" {
			served[0] = settle.Connector
		}
	}
	var err error
	if s.router, err = newRouter(served, cfg.Connectors, cfg.Routes); err != nil {
		return nil, fmt.Errorf("error creating intake service: %w", err)
	}
	if s.m == nil {
		s.m = metrics.NewUnregistered()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.horizon == 0 {
		s.horizon = DefaultReplayHorizon
	}
	if s.grace == 0 {
		s.grace = DefaultPendingGrace
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if cfg.GroupCommit > 0 {
		s.group = &groupCommit{s: s, inFlight: cfg.GroupCommit}
	}
	return s, nil
}

// Result is the answer to an accepted event: a new settlement or a replay.
type Result struct {
	// Settlement is the stored settlement with its current state.
	Settlement settlement.Settlement
	// Replayed is true when the event had been received before.
	Replayed bool
	// ReceivedAt is when the first receipt was taken (replays only; zero
	// when unknown).
	ReceivedAt time.Time
}

// Outcome is the answer to one event of a batch: a Result, or Err (an
// *InvalidError for an event older than the replay horizon, a
// *ConflictError, or an *InsufficientFundsError).
type Outcome struct {
	Result Result
	Err    error
}

// Submit takes one event in: a new settlement (its receipt, row, creation
// transition and send_instruction job committed in one transaction), a
// replay of a stored one, or a conflict (*ConflictError, recorded in its
// own transaction). It returns an *InvalidError wrapping ErrTooOld for an
// event older than the replay horizon, and an error matching
// ErrUnavailable when the database could not answer; then nothing was
// acknowledged and the event should be delivered again.
//
// With Config.GroupCommit, events submitted at the same time share one
// transaction; each still gets the outcome it would have had alone, and
// one that fails the shared transaction is taken in again alone, so that
// it fails no other.
func (s *Service) Submit(ctx context.Context, ev Event) (Result, error) {
	if s.group != nil {
		return s.group.submit(ctx, ev)
	}
	outs, err := s.SubmitBatch(ctx, []Event{ev})
	if err != nil {
		return Result{}, err
	}
	return outs[0].Result, outs[0].Err
}

// lead is the first event of a batch for one settlement_id: the one whose
// receipt the transaction tries to insert.
type lead struct {
	ev   Event
	hash string
	// bank is the bank ev is bound to.
	bank bankclient.Connector
}

// replayKey counts the events of a batch per (settlement_id, hash).
type replayKey struct{ id, hash string }

// SubmitBatch takes many events in with Submit's semantics and one outcome
// per event, in order. All new settlements commit in one transaction;
// conflicts are then recorded in one more. Within a batch the first event
// of a settlement_id decides; later ones are replays of it or conflicts
// with it. An error (ErrUnavailable or another) concerns the whole batch:
// then nothing of it was acknowledged.
func (s *Service) SubmitBatch(ctx context.Context, evs []Event) ([]Outcome, error) {
	return s.SubmitBatchTx(ctx, evs, nil)
}

// InTx is work a caller adds to the receipt transaction of a batch
// (SubmitBatchTx): it runs inside that transaction, last before its
// commit, so that what it writes commits with the receipts or not at all.
// refused holds, per event, the *InvalidError of an event refused before
// the transaction (older than the replay horizon, or one the bank could
// never send), nil for the others. It may run more than once, each time in
// a new transaction, when a transaction is retried.
type InTx func(ctx context.Context, tx pgx.Tx, refused []error) error

// SubmitBatchTx is SubmitBatch with inTx run inside the receipt
// transaction (see InTx); with inTx not nil that transaction runs even when
// no event reaches it. Event sources record their rejects this way, in the
// transaction that records the batch (DESIGN.md section 18).
func (s *Service) SubmitBatchTx(ctx context.Context, evs []Event, inTx InTx) ([]Outcome, error) {
	return s.submit(ctx, evs, inTx, false)
}

// submit is SubmitBatchTx. With grouped (the events are independent
// producers' single requests sharing a transaction), what goes wrong after
// the commit concerns only the events it concerns: a conflict that could
// not be recorded fails that event alone (the others committed and get
// their answers). An error returned concerns every event, and then, except
// for ErrUnavailable, nothing was committed.
func (s *Service) submit(ctx context.Context, evs []Event, inTx InTx, grouped bool) ([]Outcome, error) {
	now := s.now()
	outs := make([]Outcome, len(evs))
	hashes := make([]string, len(evs))
	leads := make(map[string]*lead, len(evs))
	order := make([]*lead, 0, len(evs))
	counts := make(map[replayKey]int64)
	for i, ev := range evs {
		if err := ev.CheckHorizon(now, s.horizon); err != nil {
			outs[i].Err = err
			continue
		}
		bank, err := s.router.route(ev)
		if err == nil {
			err = s.checkBank(bank, ev)
		}
		if err != nil {
			outs[i].Err = err
			continue
		}
		hashes[i] = CanonicalHash(ev)
		counts[replayKey{ev.SettlementID, hashes[i]}]++
		if _, ok := leads[ev.SettlementID]; !ok {
			l := &lead{ev: ev, hash: hashes[i], bank: bank}
			leads[ev.SettlementID] = l
			order = append(order, l)
		}
	}
	// A fixed insertion order keeps concurrent batches from deadlocking
	// on the unique index.
	sort.Slice(order, func(i, j int) bool { return order[i].ev.SettlementID < order[j].ev.SettlementID })

	var res commitResult
	if len(order) > 0 || inTx != nil {
		refused := make([]error, len(evs))
		for i := range outs {
			refused[i] = outs[i].Err
		}
		add := func(ctx context.Context, tx pgx.Tx) error {
			if inTx == nil {
				return nil
			}
			return inTx(ctx, tx, refused)
		}
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		var err error
		for attempt := 0; ; attempt++ {
			if len(order) == 0 {
				err = s.commitOnly(ctx, add)
			} else {
				res, err = s.commit(ctx, order, counts, now, add)
			}
			if err == nil {
				break
			}
			if retryable(err) && attempt < 3 {
				continue
			}
			return nil, classify(fmt.Errorf("error committing intake transaction: %w", err))
		}
	}

	var conflicts []conflictRecord
	for i, ev := range evs {
		if outs[i].Err != nil {
			continue
		}
		st, ok := res.stored[ev.SettlementID]
		if rr, refused := res.refused[ev.SettlementID]; !ok && refused {
			// Refused for want of funds, now or before: the same answer
			// (a replay), or a conflict with the refused payload.
			if hashes[i] != rr.hash {
				ce := &ConflictError{SettlementID: ev.SettlementID, StoredHash: rr.hash, IncomingHash: hashes[i]}
				outs[i].Err = ce
				conflicts = append(conflicts, conflictRecord{i: i, ev: ev, err: ce})
				continue
			}
			outs[i].Err = &InsufficientFundsError{SettlementID: ev.SettlementID, AccountID: ev.AccountID, AmountMinor: ev.AmountCents, Currency: ev.Currency}
			continue
		}
		if !ok {
			err := fmt.Errorf("error reading settlement %s after intake: no stored row", ev.SettlementID)
			if !grouped {
				return nil, err
			}
			outs[i].Err = err
			continue
		}
		if hashes[i] != st.PayloadHash {
			ce := &ConflictError{SettlementID: ev.SettlementID, StoredHash: st.PayloadHash, IncomingHash: hashes[i]}
			outs[i].Err = ce
			conflicts = append(conflicts, conflictRecord{i: i, ev: ev, err: ce})
			continue
		}
		creator := res.created[ev.SettlementID] && leads[ev.SettlementID].hash == hashes[i] && !res.claimed[ev.SettlementID]
		if creator {
			res.claimed[ev.SettlementID] = true
			outs[i].Result = Result{Settlement: st}
			continue
		}
		outs[i].Result = Result{Settlement: st, Replayed: true, ReceivedAt: res.receivedAt[ev.SettlementID]}
	}
	if len(conflicts) > 0 {
		if err := s.recordConflicts(ctx, conflicts, now); err != nil {
			// Never answer 409 for a conflict that was not recorded: the
			// producer retries, and the replays in this batch stay replays.
			if !grouped {
				return nil, classify(err)
			}
			for _, c := range conflicts {
				outs[c.i].Err = classify(err)
			}
		}
	}
	for i := range outs {
		s.count(outs[i], now)
	}
	return outs, nil
}

// count records the metrics of one outcome.
func (s *Service) count(o Outcome, now time.Time) {
	switch {
	case errors.Is(o.Err, ErrTooOld):
		s.m.IntakeTotal.WithLabelValues("too_old").Inc()
	case errors.Is(o.Err, ErrConflict):
		s.m.IntakeTotal.WithLabelValues("conflict").Inc()
		s.m.ReceiptConflicts.Inc()
	case errors.Is(o.Err, ErrInsufficientFunds):
		s.m.IntakeTotal.WithLabelValues("insufficient_funds").Inc()
	case o.Err != nil:
		s.m.IntakeTotal.WithLabelValues("invalid").Inc()
	case o.Result.Replayed:
		s.m.IntakeTotal.WithLabelValues("replayed").Inc()
		if !o.Result.ReceivedAt.IsZero() {
			s.m.ReplayAge.Observe(now.Sub(o.Result.ReceivedAt).Seconds())
		}
	default:
		s.m.IntakeTotal.WithLabelValues("created").Inc()
	}
}

// commitResult is what the intake transaction found and wrote.
type commitResult struct {
	// stored holds every lead's settlement as committed.
	stored map[string]settlement.Settlement
	// created holds the settlement_ids created by this transaction.
	created map[string]bool
	// receivedAt holds the first receipt time of settlements received before.
	receivedAt map[string]time.Time
	// claimed marks which created settlement already had its 201.
	claimed map[string]bool
	// refused holds the receipts refused for want of funds, by this
	// transaction (refusedNow) or before.
	refused    map[string]refusedReceipt
	refusedNow map[string]bool
}

// refusedReceipt is a receipt refused for want of funds.
type refusedReceipt struct {
	hash string
}

// insertSQL inserts the receipts of the leads and, only for the receipts
// actually inserted, their settlements, each with its creation event
// counted (statemachine.CreationCounted: Created, in the same transaction,
// then writes that event without rewriting the row). A concurrent
// transaction inserting the same settlement_id makes ours wait on the
// unique index until it ends; if it committed, ON CONFLICT DO NOTHING skips
// the row. The NOT EXISTS covers a settlement whose receipt was removed by
// retention: it is never created twice.
const insertSQL = `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[],
		$7::bigint[], $8::text[], $9::text[], $12::text[], $13::text[])
		AS i(settlement_id, payload_hash, event_id, occurred_at, account_id, beneficiary, amount_cents, currency, bank_key, bank_reference, bank)
), r AS (
	INSERT INTO settlement_receipts (settlement_id, payload_hash, received_at, first_event_id, occurred_at)
	SELECT i.settlement_id, i.payload_hash, $10, NULLIF(i.event_id, ''), i.occurred_at
	FROM input i
	WHERE NOT EXISTS (SELECT 1 FROM settlements s WHERE s.settlement_id = i.settlement_id)
	ORDER BY i.settlement_id
	ON CONFLICT (settlement_id) DO NOTHING
	RETURNING settlement_id
)
INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state,
	bank_key, bank_reference, payload_hash, next_check_at, created_at, updated_at, bank, event_seq)
SELECT i.settlement_id, i.account_id, i.beneficiary, i.amount_cents, i.currency, 'pending',
	i.bank_key, i.bank_reference, i.payload_hash, $11, $10, $10, i.bank, ` + statemachine.CreationCounted + `
FROM input i JOIN r USING (settlement_id)
ORDER BY i.settlement_id
RETURNING ` + settlementdb.Columns

// insertOneSQL is insertSQL for a single event, with plain parameters: a
// one-row statement PostgreSQL plans cheaply (the unnest form is planned
// afresh on every execution, as its array lengths change the estimates).
const insertOneSQL = `
WITH r AS (
	INSERT INTO settlement_receipts (settlement_id, payload_hash, received_at, first_event_id, occurred_at)
	SELECT $1, $2, $10, NULLIF($3, ''), $4
	WHERE NOT EXISTS (SELECT 1 FROM settlements s WHERE s.settlement_id = $1)
	ON CONFLICT (settlement_id) DO NOTHING
	RETURNING settlement_id
)
INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state,
	bank_key, bank_reference, payload_hash, next_check_at, created_at, updated_at, bank, event_seq)
SELECT r.settlement_id, $5, $6, $7, $8, 'pending', $9, $12, $2, $11, $10, $10, $13, ` + statemachine.CreationCounted + `
FROM r
RETURNING ` + settlementdb.Columns

// replaySQL bumps the replay bookkeeping of receipts redelivered with their
// own hash and reads the stored settlements of the leads that were not new.
//
// The bump also makes a 200 durable under synchronous replication (DESIGN.md
// section 17): a receipt is visible on the primary as soon as it commits
// there, before its standby confirms it, so a redelivery can read a receipt
// whose first commit still waits for the standby (or whose answer was lost
// with a primary that then died). Because the replay writes, its own commit
// waits for the standby to hold the WAL up to it, which includes the
// receipt's commit: the 200 is answered only for a receipt the standby has.
// A replay must not become read-only.
const replaySQL = `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) AS i(settlement_id, payload_hash, n)
), bump AS (
	UPDATE settlement_receipts r SET replay_count = r.replay_count + i.n, last_replay_at = $4
	FROM input i
	WHERE r.settlement_id = i.settlement_id AND r.payload_hash = i.payload_hash
	RETURNING r.settlement_id
)
SELECT s.*, rc.received_at
FROM (SELECT ` + settlementdb.Columns + ` FROM settlements WHERE settlement_id = ANY($5::text[])) s
LEFT JOIN settlement_receipts rc USING (settlement_id)`

// replayOneSQL is replaySQL for a single event, with plain parameters.
const replayOneSQL = `
WITH bump AS (
	UPDATE settlement_receipts r SET replay_count = r.replay_count + $3, last_replay_at = $4
	WHERE r.settlement_id = $1 AND r.payload_hash = $2
	RETURNING r.settlement_id
)
SELECT s.*, rc.received_at
FROM (SELECT ` + settlementdb.Columns + ` FROM settlements WHERE settlement_id = $1) s
LEFT JOIN settlement_receipts rc USING (settlement_id)`

// commit runs the one intake transaction for the leads.
func (s *Service) commit(ctx context.Context, leads []*lead, counts map[replayKey]int64, now time.Time, inTx func(context.Context, pgx.Tx) error) (commitResult, error) {
	res := commitResult{
		stored:     make(map[string]settlement.Settlement, len(leads)),
		created:    make(map[string]bool, len(leads)),
		receivedAt: make(map[string]time.Time),
		claimed:    make(map[string]bool),
		refused:    make(map[string]refusedReceipt),
		refusedNow: make(map[string]bool),
	}

	// A single event, the common case of the HTTP API, takes statements
	// with plain parameters; a batch takes the unnest forms.
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("error beginning transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	all := leads
	if s.funds {
		if leads, err = s.checkFunds(ctx, tx, leads, now, &res); err != nil {
			return res, err
		}
	}
	n := len(leads)
	ids, hashes, eventIDs := make([]string, n), make([]string, n), make([]string, n)
	occurred := make([]pgtype.Timestamptz, n)
	accounts, beneficiaries, currencies, bankKeys, refs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	banks := make([]string, n)
	amounts := make([]int64, n)
	for i, l := range leads {
		ids[i], hashes[i], eventIDs[i] = l.ev.SettlementID, l.hash, l.ev.EventID
		occurred[i] = pgtype.Timestamptz{Time: l.ev.OccurredAt, Valid: !l.ev.OccurredAt.IsZero()}
		accounts[i], beneficiaries[i], amounts[i], currencies[i] = l.ev.AccountID, l.ev.Beneficiary, l.ev.AmountCents, l.ev.Currency
		bankKeys[i] = bankclient.KeyFor(l.ev.SettlementID)
		// The reference is derived once, for the bound bank's rules.
		refs[i] = l.bank.Capabilities.Reference(l.ev.SettlementID)
		banks[i] = l.bank.Name
	}

	var createdIDs []string
	var sendJobs []SendJob
	if n > 0 {
		var rows pgx.Rows
		if n == 1 {
			rows, err = tx.Query(ctx, insertOneSQL, ids[0], hashes[0], eventIDs[0], occurred[0], accounts[0], beneficiaries[0],
				amounts[0], currencies[0], bankKeys[0], now, now.Add(s.grace), refs[0], banks[0])
		} else {
			rows, err = tx.Query(ctx, insertSQL, ids, hashes, eventIDs, occurred, accounts, beneficiaries, amounts, currencies, bankKeys,
				now, now.Add(s.grace), refs, banks)
		}
		if err != nil {
			return res, fmt.Errorf("error inserting receipts: %w", err)
		}
		for rows.Next() {
			st, err := settlementdb.Scan(rows)
			if err != nil {
				rows.Close()
				return res, fmt.Errorf("error reading inserted settlement: %w", err)
			}
			res.stored[st.SettlementID] = st
			res.created[st.SettlementID] = true
			createdIDs = append(createdIDs, st.SettlementID)
			sendJobs = append(sendJobs, SendJob{SettlementID: st.SettlementID, Bank: st.Bank})
		}
		if err := rows.Err(); err != nil {
			return res, fmt.Errorf("error inserting receipts: %w", err)
		}
	}

	// The creation transitions, the replay read and the creation events go
	// in one round trip; the events last, so that each is written once with
	// its settlement as this transaction leaves it (replays counted).
	//
	// The creation and its events read the new settlements by id, in
	// statements of many relations (the ledger's hold; each settlement's
	// view). PostgreSQL planned both afresh on every transaction: a custom
	// plan for the ids given always looks cheaper than the generic one,
	// which assumes ten, so the generic plan was never kept, and a group of
	// a few single requests paid more for planning them (0.2 and 0.65 ms)
	// than for running them. For a few ids their generic plans (index scans
	// by settlement id) are forced, for these statements alone; a larger
	// batch pays for its plans over many events and keeps plans made for
	// its size (forced for the source loop's transactions of 250, the
	// drains measured 10 % slower).
	b := &pgx.Batch{}
	generic := len(createdIDs) > 0 && len(createdIDs) <= genericPlanMaxIDs
	if generic {
		b.Queue(forceGenericPlanSQL)
	}
	if err := statemachine.CreatedHeld(ctx, batchQueuer{b}, "received", now, createdIDs...); err != nil {
		return res, err
	}
	var oldIDs, bumpIDs, bumpHashes []string
	var bumpN []int64
	for _, l := range all {
		if !res.created[l.ev.SettlementID] && !res.refusedNow[l.ev.SettlementID] {
			oldIDs = append(oldIDs, l.ev.SettlementID)
		}
	}
	for k, c := range counts {
		if res.created[k.id] && k.hash == res.stored[k.id].PayloadHash || res.refusedNow[k.id] && k.hash == res.refused[k.id].hash {
			c-- // the creating (or refused) event is not a replay
		}
		if c > 0 {
			bumpIDs, bumpHashes, bumpN = append(bumpIDs, k.id), append(bumpHashes, k.hash), append(bumpN, c)
		}
	}
	readOld := len(oldIDs) > 0 || len(bumpIDs) > 0
	switch {
	case !readOld:
	case len(all) == 1 && len(oldIDs) == 1 && len(bumpIDs) == 1:
		b.Queue(replayOneSQL, bumpIDs[0], bumpHashes[0], bumpN[0], now)
	default:
		b.Queue(replaySQL, bumpIDs, bumpHashes, bumpN, now, oldIDs)
	}
	if err := statemachine.CreationEvents(ctx, batchQueuer{b}, "received", now, createdIDs...); err != nil {
		return res, err
	}
	if generic {
		b.Queue(resetPlanModeSQL)
	}
	if b.Len() > 0 {
		br := tx.SendBatch(ctx, b)
		if generic {
			if err := execQueued(br, "forcing the creation's generic plans"); err != nil {
				return res, err
			}
		}
		if len(createdIDs) > 0 {
			if err := execQueued(br, "recording creation transitions"); err != nil {
				return res, err
			}
		}
		if readOld {
			if err := s.readReplays(br, &res); err != nil {
				br.Close()
				return res, err
			}
		}
		if len(createdIDs) > 0 {
			if err := execQueued(br, "writing creation events"); err != nil {
				return res, err
			}
		}
		if generic {
			if err := execQueued(br, "resetting plan_cache_mode"); err != nil {
				return res, err
			}
		}
		if err := br.Close(); err != nil {
			return res, fmt.Errorf("error finishing intake batch: %w", err)
		}
	}
	var missing []string
	for _, id := range oldIDs {
		if _, ok := res.stored[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		// Not settlements: receipts refused for want of funds, now or in an
		// earlier run (which may have had --funds-check on).
		if err := readRefused(ctx, tx, missing, &res); err != nil {
			return res, err
		}
	}

	if len(createdIDs) > 0 {
		if err := s.jobs.InsertSendTx(ctx, tx, sendJobs); err != nil {
			return res, fmt.Errorf("error inserting send jobs: %w", err)
		}
		crash.Point(crash.IntakeBeforeCommit)
	}
	if err := inTx(ctx, tx); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("error committing: %w", err)
	}
	if len(createdIDs) > 0 {
		crash.Point(crash.IntakeAfterCommit)
	}
	return res, nil
}

// The statements around the creation and its events (commit):
// plan_cache_mode for those statements alone, when they create at most
// genericPlanMaxIDs settlements (the group commit's groups of single
// requests are mostly smaller).
// RESET gives back the session's own setting (the server's, or the
// connection string's).
const (
	genericPlanMaxIDs   = 16
	forceGenericPlanSQL = "SET LOCAL plan_cache_mode = force_generic_plan"
	resetPlanModeSQL    = "RESET plan_cache_mode"
)

// execQueued reads the result of the next statement of br, which it
// closes on an error, naming the statement by what it does.
func execQueued(br pgx.BatchResults, what string) error {
	if _, err := br.Exec(); err != nil {
		br.Close()
		return fmt.Errorf("error %s: %w", what, err)
	}
	return nil
}

// commitOnly runs inTx alone in a transaction: a batch of which no event
// reached the receipt insert.
func (s *Service) commitOnly(ctx context.Context, inTx func(context.Context, pgx.Tx) error) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("error beginning transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := inTx(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing: %w", err)
	}
	return nil
}

func (s *Service) readReplays(br pgx.BatchResults, res *commitResult) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("error reading stored settlements: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var received *time.Time
		st, err := settlementdb.Scan(rows, &received)
		if err != nil {
			return fmt.Errorf("error reading stored settlement: %w", err)
		}
		res.stored[st.SettlementID] = st
		if received != nil {
			res.receivedAt[st.SettlementID] = *received
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("error reading stored settlements: %w", err)
	}
	return nil
}

// batchQueuer lets the state machine's creation statements write into a
// pgx.Batch, so they and the replay read take one round trip while
// statemachine keeps owning their SQL. Exec only queues: errors come back
// when the batch is sent.
type batchQueuer struct{ b *pgx.Batch }

func (q batchQueuer) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

func (q batchQueuer) QueryRow(context.Context, string, ...any) pgx.Row {
	return errRow{errors.New("batchQueuer: QueryRow is not supported")}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// conflictRecord is one conflict to write to receipt_conflicts.
type conflictRecord struct {
	// i is the event's index in its batch.
	i   int
	ev  Event
	err *ConflictError
}

// recordConflicts writes the conflicts and their events in their own
// transaction (one statement), after the intake transaction: a conflict is never applied
// and never dropped silently.
func (s *Service) recordConflicts(ctx context.Context, cs []conflictRecord, now time.Time) error {
	conflicts := make([]statemachine.Conflict, len(cs))
	for i, c := range cs {
		conflicts[i] = statemachine.Conflict{SettlementID: c.ev.SettlementID, StoredHash: c.err.StoredHash,
			IncomingHash: c.err.IncomingHash, EventID: c.ev.EventID, Incoming: c.ev.businessJSON()}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	// The conflicts and their events commit together (the state machine
	// writes both).
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		return statemachine.RecordConflicts(ctx, tx, now, conflicts...)
	})
	if err != nil {
		return fmt.Errorf("error recording receipt conflicts: %w", err)
	}
	return nil
}

// ChecksFunds reports whether intake refuses payouts their account's
// available balance does not cover (Config.FundsCheck): then the order of
// an account's payouts decides which are refused.
func (s *Service) ChecksFunds() bool { return s.funds }

// Ping reports whether the database answers (for /readyz).
func (s *Service) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.db.Ping(ctx); err != nil {
		return classify(fmt.Errorf("error pinging the database: %w", err))
	}
	return nil
}

// View loads everything about settlement id (see LoadView).
func (s *Service) View(ctx context.Context, id string) (settlement.View, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := settlementdb.LoadView(ctx, s.db, id)
	if err != nil && !errors.Is(err, settlement.ErrNotFound) {
		return settlement.View{}, classify(err)
	}
	return v, err
}

// checkBank refuses an event its bank could never send (a currency it
// does not serve, a beneficiary it cannot route, an amount over its limit)
// or over the operator's ceiling with an *InvalidError naming the field
// (422).
func (s *Service) checkBank(bank bankclient.Connector, ev Event) error {
	err := bank.Check(ev.Currency, ev.Beneficiary)
	if err == nil {
		err = bank.CheckAmount(ev.Currency, ev.AmountCents)
	}
	if err == nil {
		err = s.ceiling.checkCeiling(ev)
	}
	var fe *bankclient.FieldError
	if errors.As(err, &fe) {
		return invalid(fe.Field, fe.Reason)
	}
	return err
}
