package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

// DB is what the Resolver needs of the database; *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TxHook runs inside the transaction that records the last outcome of a
// Send or Resolve, just before it commits, so that a caller can commit its
// own bookkeeping with it (a River job completes there, or inserts its
// follow-up). An error rolls the whole transaction back.
type TxHook func(ctx context.Context, tx pgx.Tx, out Outcome) error

// Defaults of the Resolver's zero fields.
const (
	DefaultKeyTTL = 24 * time.Hour
	// DefaultRequestBound is the longest a request takes from the decision
	// to send it to its arrival at the bank: a job's timeout and a bank call.
	DefaultRequestBound     = 2 * time.Minute
	DefaultCheckInterval    = 2 * time.Second
	DefaultMaxCheckInterval = 10 * time.Minute
	DefaultLease            = 2 * time.Minute
	// recordTimeout bounds the recording of a bank answer, which runs even
	// when the caller's context has ended: an answer once received is
	// written down if at all possible.
	recordTimeout = 15 * time.Second
	maxDetailLen  = 500
)

// Resolver carries the decisions out: it sends instructions, asks the bank
// for their status and applies the answers through statemachine, recording
// every bank call in bank_attempts. Send and Resolve are safe to run any
// number of times, concurrently, in any number of processes: the optimistic
// transitions and the unique ledger movement make a second run harmless.
type Resolver struct {
	// DB is the database (required).
	DB DB
	// Bank is the bank (required).
	Bank bankclient.Bank
	// BankName is the configured name of Bank (settlements.bank): the
	// Resolver sends, checks and resolves only the settlements bound to
	// it, and refuses any other with a *WrongBankError before the bank is
	// asked anything. Empty: a tool of one bank that does not say (tests);
	// workers and settle reconcile always set it.
	BankName string
	// Capabilities is what Bank can do; the decisions choose their
	// questions from it. Default: settle.Connector's (lookup by
	// our key).
	Capabilities *bankclient.Capabilities
	// ReturnWatch is how long after confirmation the bank is still asked
	// whether the payment came back (--return-watch); 0 never asks.
	ReturnWatch time.Duration
	// WatchInBulk, when true, watches the confirmed settlements for
	// returns in rounds (Watch, run by the bank's watch job) instead of
	// with a check of their own: a confirmation schedules no check (no
	// next_check_at, no job follows it), and a round asks the bank about
	// all of them at once where it lists its returns, else one by one on
	// the schedule their own checks would have kept, writing only what a
	// return changes. False: each confirmed settlement's own check asks,
	// and records every answer.
	WatchInBulk bool
	// RequestBound is the longest from deciding a request to its arrival at
	// the bank (Policy.RequestBound). Default DefaultRequestBound. (A
	// negative bound is a bug that only the simulation plants.)
	RequestBound time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// KeyTTL is --bank-key-ttl: never resend once this much time has passed
	// since the first attempt. Default DefaultKeyTTL.
	KeyTTL time.Duration
	// CheckInterval is the delay before the first status check of a sent or
	// uncertain settlement; each further check waits twice as long, up to
	// MaxCheckInterval. Defaults DefaultCheckInterval, DefaultMaxCheckInterval.
	CheckInterval, MaxCheckInterval time.Duration
	// ConsentWait is how long a consent may await the customer's
	// authorisation before the settlement is flagged (Policy.ConsentWait).
	// Default DefaultConsentWait; negative waits for ever.
	ConsentWait time.Duration
	// Lease is how long a job owns a settlement it is working on, or is
	// scheduled to check, before the sweep assumes the job is lost: stored
	// next_check_at is the time of the next check plus Lease. It must exceed
	// the job timeout. Default DefaultLease.
	Lease time.Duration
	// Metrics receives the counters. Nil counts nothing.
	Metrics *metrics.Metrics
	// Logger receives one event per decision. Nil discards.
	Logger *slog.Logger
	// QueueMovement, when set, queues the ledger movement of a decision in
	// place of the Resolver's own QueueMovement, into the batch of the
	// decision's transaction tx. It is where the simulation plants its
	// faults (a reversal written twice, or committed apart from its
	// transition); nothing else sets it. An error ends the decision before
	// its transaction commits.
	QueueMovement func(ctx context.Context, tx pgx.Tx, b *pgx.Batch, m Movement) error
	// ClaimGroup, when positive, lets concurrent Sends share the
	// transaction that claims their POSTs: at most ClaimGroup such
	// transactions run at once, and the claims asked for meanwhile wait for
	// the next, which claims them all in one statement and one commit. Each
	// claim is still committed before its own POST leaves. Zero claims
	// each send in a transaction of its own.
	ClaimGroup int

	// OutcomeGroup, when positive, lets concurrent Sends share the
	// transaction that records their answers: at most OutcomeGroup such
	// transactions run at once, and the outcomes answered meanwhile wait
	// for the next, which records them all, each with its hook, in one
	// commit (outcomes.go). Zero records each outcome in a transaction of
	// its own.
	OutcomeGroup int

	claimsOnce   sync.Once
	claims       *claimGroup
	outcomesOnce sync.Once
	outcomes     *outcomeGroup
}

// Movement is the ledger movement a decision writes, in the transaction
// that moves the settlement: the payout of a confirmation or the reversal
// of a return.
type Movement struct {
	SettlementID string
	// Kind is "payout" or "reversal".
	Kind string
	// PaymentID is the bank's payment id when the answer named one; nil
	// keeps the settlement's.
	PaymentID *string
	At        time.Time
	// State is the state the decision moves the settlement to: the
	// movement is written only if the settlement is in it.
	State settlement.State
}

// QueueMovement queues the statement that writes m into b.
func QueueMovement(b *pgx.Batch, m Movement) {
	b.Queue(`
		INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency, bank_payment_id, created_at)
		SELECT settlement_id, $4, account_id, amount_cents, currency, coalesce($2, bank_payment_id), $3
		FROM settlements WHERE settlement_id = $1 AND state = $5`,
		m.SettlementID, m.PaymentID, m.At, m.Kind, string(m.State))
}

// Outcome is the result of Send or Resolve.
type Outcome struct {
	SettlementID string
	// Action is what was done: send, check, or none.
	Action Action
	// From is the settlement's state when this call loaded it.
	From settlement.State
	// State is the settlement's state afterwards (as far as this call knows).
	State settlement.State
	// FlagReason is why the settlement needs investigation afterwards;
	// empty when it does not (or, after a lost race, when this call cannot
	// know).
	FlagReason string
	// Decision is the last decision applied (zero when none was).
	Decision Decision
	// Done is true when no further check is due from the caller: the
	// settlement is terminal, waits for a human, or another process moved
	// it first.
	Done bool
	// NextCheckAt is when the caller should check again (when not Done).
	NextCheckAt time.Time
	// LostRace is true when another process moved the settlement first.
	LostRace bool
}

// facts is a settlement as loaded for a decision.
type facts struct {
	Facts
	Bank         string
	AccountID    string
	Beneficiary  string
	BankKey      string
	FlagReason   string
	EnteredUncer time.Time
	// Grant is the account holder's sealed token (authorisation.go).
	Grant bankclient.Grant
}

func (r *Resolver) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Resolver) policy() Policy {
	p := Policy{KeyTTL: r.KeyTTL, CheckInterval: r.CheckInterval, MaxCheckInterval: r.MaxCheckInterval,
		Bank: settle.Connector.Capabilities}
	if r.Capabilities != nil {
		p.Bank = *r.Capabilities
	}
	p.ReturnWatch = r.ReturnWatch
	switch {
	case r.ConsentWait > 0:
		p.ConsentWait = r.ConsentWait
	case r.ConsentWait == 0:
		p.ConsentWait = DefaultConsentWait
	}
	p.RequestBound = r.RequestBound
	if p.RequestBound == 0 {
		p.RequestBound = DefaultRequestBound
	}
	if p.KeyTTL <= 0 {
		p.KeyTTL = DefaultKeyTTL
	}
	if p.CheckInterval <= 0 {
		p.CheckInterval = DefaultCheckInterval
	}
	if p.MaxCheckInterval <= 0 {
		p.MaxCheckInterval = DefaultMaxCheckInterval
	}
	return p
}

func (r *Resolver) lease() time.Duration {
	if r.Lease > 0 {
		return r.Lease
	}
	return DefaultLease
}

func (r *Resolver) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Send is the body of the send_instruction job: it POSTs a pending
// settlement that was never attempted under its stable key and applies the
// answer. A pending one that was attempted before is checked by key first
// (its answer may have been lost after the bank executed it); a settlement
// that is no longer pending is left alone (reconciliation owns it). hook
// may be nil.
func (r *Resolver) Send(ctx context.Context, settlementID string, hook TxHook) (Outcome, error) {
	return r.start(ctx, settlementID, hook, StartSend, "send")
}

// Resolve asks the bank for a settlement's status by key now and applies
// the answer: the body of the reconcile_settlement job and of
// `settle reconcile resolve`. A pending settlement that was never attempted
// is sent; one the bank never saw is resent under the same key while the key
// is young. hook may be nil.
func (r *Resolver) Resolve(ctx context.Context, settlementID string, hook TxHook) (Outcome, error) {
	return r.start(ctx, settlementID, hook, StartResolve, "resolve")
}

// start loads a settlement and does what decide says: send, check, or
// nothing.
func (r *Resolver) start(ctx context.Context, settlementID string, hook TxHook, decide func(Facts) Action, what string) (Outcome, error) {
	f, err := r.load(ctx, settlementID)
	if err != nil {
		return Outcome{}, err
	}
	if r.BankName != "" && f.Bank != r.BankName {
		return Outcome{}, &WrongBankError{SettlementID: settlementID, Bank: f.Bank, Served: r.BankName}
	}
	var out Outcome
	switch decide(f.Facts) {
	case ActionSend:
		out, err = r.send(ctx, f, hook)
	case ActionCheck:
		out, err = r.check(ctx, f, hook)
	default:
		r.log().LogAttrs(ctx, slog.LevelDebug, what+": nothing to do",
			slog.String("settlement_id", settlementID), slog.String("state", string(f.State)))
		out = Outcome{SettlementID: settlementID, Action: ActionNone, State: f.State, FlagReason: f.FlagReason, Done: true}
	}
	out.From = f.State
	return out, err
}

// load reads what the decisions need. A missing settlement wraps
// settlement.ErrNotFound.
func (r *Resolver) load(ctx context.Context, id string) (facts, error) {
	var (
		f         facts
		state     string
		first     *time.Time
		reason    *string
		entered   *time.Time
		confirmed *time.Time

		consentStatus                    string
		consentRequested, consentExpires *time.Time
		grantExpires                     *time.Time
	)
	err := r.DB.QueryRow(ctx, `
		SELECT s.state, s.account_id, s.beneficiary, s.amount_cents, s.currency, s.bank_key,
		       coalesce(s.bank_reference, s.settlement_id), coalesce(s.bank_payment_id, ''),
		       s.first_attempt_at, s.check_attempts, s.investigation_reason,
		       (SELECT max(t.at) FROM settlement_transitions t
		         WHERE t.settlement_id = s.settlement_id AND t.to_state = 'uncertain'),
		       (SELECT max(t.at) FROM settlement_transitions t
		         WHERE t.settlement_id = s.settlement_id AND t.to_state = 'confirmed'),
		       coalesce(s.bank_consent_id, ''), coalesce(s.consent_status, ''),
		       s.consent_requested_at, s.consent_expires_at, s.bank,
		       coalesce(a.grant_sealed, ''), a.token_expires_at
		FROM settlements s LEFT JOIN consent_authorisations a ON a.settlement_id = s.settlement_id
		WHERE s.settlement_id = $1`, id).
		Scan(&state, &f.AccountID, &f.Beneficiary, &f.AmountCents, &f.Currency, &f.BankKey,
			&f.BankReference, &f.BankPaymentID, &first, &f.CheckAttempts, &reason, &entered, &confirmed,
			&f.ConsentID, &consentStatus, &consentRequested, &consentExpires, &f.Bank,
			&f.Grant.Sealed, &grantExpires)
	if errors.Is(err, pgx.ErrNoRows) {
		return facts{}, fmt.Errorf("error loading settlement %s: %w", id, settlement.ErrNotFound)
	}
	if err != nil {
		return facts{}, fmt.Errorf("error loading settlement %s: %w", id, err)
	}
	f.SettlementID = id
	f.State = settlement.State(state)
	f.ConsentStatus = bankclient.ConsentStatus(consentStatus)
	if consentRequested != nil {
		f.ConsentRequestedAt = *consentRequested
	}
	if consentExpires != nil {
		f.ConsentExpiresAt = *consentExpires
	}
	if grantExpires != nil {
		f.Grant.ExpiresAt = *grantExpires
	}
	// A grant is sealed with its refresh token when the bank issued one;
	// the connector says which when asked to refresh.
	f.Grant.Refreshable = f.Grant.Sealed != ""
	f.Granted = f.Grant.Sealed != ""
	if first != nil {
		f.FirstAttemptAt = *first
	}
	if reason != nil {
		f.FlagReason, f.Flagged = *reason, true
	}
	if entered != nil {
		f.EnteredUncer = *entered
	}
	if confirmed != nil {
		f.ConfirmedAt = *confirmed
		p := r.policy()
		f.Watched = f.State == settlement.Confirmed && !f.Flagged && p.ReturnWatch > 0 && r.now().Before(f.ConfirmedAt.Add(p.ReturnWatch))
	}
	return f, nil
}

// attempt is one recorded bank call.
type attempt struct {
	id     int64
	op     string
	answer Answer
	// sent is false when nothing reached the bank.
	sent bool
}

// send claims the POST (committing first_attempt_at before anything can
// reach the bank), POSTs, and applies the answer. At a bank that needs a
// consent first, the consent step comes before the claim, and the payment
// is claimed only once the consent is authorised.
func (r *Resolver) send(ctx context.Context, f facts, hook TxHook) (Outcome, error) {
	if f.consentPending(r.policy()) {
		if err := takeSlot(ctx); err != nil {
			return Outcome{}, fmt.Errorf("error waiting for a bank slot for settlement %s: %w", f.SettlementID, err)
		}
		out, pay, err := r.consent(ctx, f, hook)
		if err != nil || !pay {
			return out, err
		}
		if f, err = r.load(ctx, f.SettlementID); err != nil {
			return Outcome{}, err
		}
		if f.State != settlement.Pending || !f.FirstAttemptAt.IsZero() || f.ConsentStatus != bankclient.ConsentAuthorised || f.needsGrant(r.policy()) {
			return Outcome{SettlementID: f.SettlementID, Action: ActionNone, State: f.State, Done: true, LostRace: true}, nil
		}
	}
	if f.Granted {
		// Nothing is claimed with a token about to expire.
		if err := takeSlot(ctx); err != nil {
			return Outcome{}, fmt.Errorf("error waiting for a bank slot for settlement %s: %w", f.SettlementID, err)
		}
		if err := r.freshGrant(ctx, &f); err != nil {
			return Outcome{}, err
		}
	}
	att := attempt{op: bankclient.OpSend}
	// The key TTL clock starts before any POST can reach the bank, and the
	// sweep takes over if this job dies before recording an answer
	// (claimSQL).
	first, attemptID, err := r.claim(ctx, f)
	att.id = attemptID
	if errors.Is(err, errNotClaimed) {
		// Moved by another process (or its key aged) since we looked.
		r.log().LogAttrs(ctx, slog.LevelInfo, "send: settlement no longer pending, not sending",
			slog.String("settlement_id", f.SettlementID))
		return Outcome{SettlementID: f.SettlementID, Action: ActionNone, State: f.State, Done: true, LostRace: true}, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("error claiming the send of settlement %s: %w", f.SettlementID, err)
	}
	f.FirstAttemptAt = first
	if err := takeSlot(ctx); err != nil {
		// Claimed, never sent: the lost-answer path's, after the lease.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		att.answer.Detail = err.Error()
		r.finishAttempt(rctx, att)
		return Outcome{}, fmt.Errorf("error waiting for a bank slot for settlement %s: %w", f.SettlementID, err)
	}

	crash.Point(crash.SendBeforeBank)
	res, err := r.Bank.Send(ctx, f.BankKey, f.request())
	crash.Point(crash.SendAfterBank)
	// The bank is done with this send: its slot may serve the next one
	// while the answer is recorded.
	giveSlot(ctx)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	ans, ok := ClassifySend(res, err)
	att.answer, att.sent = ans, ok
	if !ok {
		r.finishAttempt(rctx, att)
		return Outcome{}, fmt.Errorf("error sending settlement %s: %w", f.SettlementID, err)
	}
	d := DecideSend(f.Facts, r.policy(), r.now(), ans)
	out, err := r.record(rctx, f, d, att, hook)
	if err != nil {
		return Outcome{}, err
	}
	if !out.LostRace {
		crash.Point(crash.SendAfterCommit)
	}
	out.Action = ActionSend
	return out, nil
}

// request is the payment request of a settlement: identical every time it
// is sent, under its stable key.
func (f facts) request() bankclient.PaymentRequest {
	return bankclient.PaymentRequest{
		AmountCents:     f.AmountCents,
		Currency:        f.Currency,
		DebtorAccount:   f.AccountID,
		CreditorAccount: f.Beneficiary,
		Reference:       f.reference(),
		SettlementID:    f.SettlementID,
		ConsentID:       f.ConsentID,
		Grant:           f.Grant.Sealed,
	}
}

// check asks the bank the strongest safe question about a settlement
// (ChooseQuestion) and applies the answer; a key the bank never saw is
// resent while young; with no safe question left the settlement is flagged.
func (r *Resolver) check(ctx context.Context, f facts, hook TxHook) (Outcome, error) {
	now := r.now()
	q := ChooseQuestion(f.Facts, r.policy(), now)
	if q == AskNothing {
		d := flag(f.Facts, ReasonNoSafeQuestion, "the bank can be asked only by its payment id, which no answer gave us, and the key may be forgotten: never resend")
		out, err := r.apply(ctx, f, d, attempt{}, hook)
		out.Action = ActionCheck
		return out, err
	}
	att := attempt{op: map[Question]string{AskReplay: bankclient.OpReplay, AskSearch: bankclient.OpSearch}[q]}
	if att.op == "" {
		att.op = bankclient.OpStatus
	}
	if err := takeSlot(ctx); err != nil {
		return Outcome{}, fmt.Errorf("error waiting for a bank slot for settlement %s: %w", f.SettlementID, err)
	}
	if err := r.DB.QueryRow(ctx, `
		INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at)
		VALUES ($1, $2, $3, $4) RETURNING id`,
		f.SettlementID, att.op, f.BankKey, now).Scan(&att.id); err != nil {
		return Outcome{}, fmt.Errorf("error recording status check of settlement %s: %w", f.SettlementID, err)
	}
	ans, ok, err := r.ask(ctx, f, q)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	ans.Question = q
	att.answer, att.sent = ans, ok
	if !ok {
		r.finishAttempt(rctx, att)
		return Outcome{}, fmt.Errorf("error checking settlement %s: %w", f.SettlementID, err)
	}
	var d Decision
	if q == AskReplay {
		d = DecideReplay(f.Facts, r.policy(), r.now(), ans)
	} else {
		d = DecideStatus(f.Facts, r.policy(), r.now(), ans)
	}
	if !d.Resend {
		out, err := r.apply(rctx, f, d, att, hook)
		out.Action = ActionCheck
		return out, err
	}
	// Back to pending (recorded with the answer), then POST under the same
	// key. The bank said it never saw the key while the key was young, so
	// nothing was executed under it and this POST is a first execution;
	// the claim in send re-checks the key's age against the committed
	// first_attempt_at all the same.
	out, err := r.apply(rctx, f, d, att, nil)
	if err != nil || out.LostRace {
		out.Action = ActionCheck
		return out, err
	}
	if ctx.Err() != nil {
		return Outcome{}, fmt.Errorf("error resending settlement %s: %w", f.SettlementID, ctx.Err())
	}
	f, err = r.load(ctx, f.SettlementID)
	if err != nil {
		return Outcome{}, err
	}
	if f.State != settlement.Pending {
		return Outcome{SettlementID: f.SettlementID, Action: ActionNone, State: f.State, Done: true, LostRace: true}, nil
	}
	return r.send(ctx, f, hook)
}

// ask puts question q to the bank and classifies its answer; ok is false
// (with err) when nothing reached the bank.
func (r *Resolver) ask(ctx context.Context, f facts, q Question) (Answer, bool, error) {
	var (
		p   bankclient.Payment
		err error
	)
	switch q {
	case AskReplay:
		if f.Granted {
			// A replay is the same request; its token may be a new one.
			if err := r.freshGrant(ctx, &f); err != nil {
				return Answer{}, false, err
			}
		}
		res, err := r.Bank.Send(ctx, f.BankKey, f.request())
		a, ok := ClassifySend(res, err)
		return a, ok, err
	case AskSearch:
		return r.search(ctx, f)
	case AskByID:
		l, can := r.Bank.(bankclient.IDLookup)
		if !can {
			return Answer{}, false, fmt.Errorf("%w: status by payment id", bankclient.ErrUnsupported)
		}
		p, err = l.StatusByID(ctx, f.BankPaymentID)
	case AskByReference:
		l, can := r.Bank.(bankclient.ReferenceLookup)
		if !can {
			return Answer{}, false, fmt.Errorf("%w: status by reference", bankclient.ErrUnsupported)
		}
		p, err = l.StatusByReference(ctx, f.reference())
	default:
		p, err = r.Bank.StatusByKey(ctx, f.BankKey)
	}
	a, ok := ClassifyStatus(p, err)
	return a, ok, err
}

// searchSlack is how long before the first attempt a search of the bank's
// list starts, for the clocks of settle and the bank to disagree.
const searchSlack = time.Hour

// search looks for the settlement's reference in the bank's list (from an
// hour before the first attempt where the bank can read its list from a
// point in time, else all of it): one payment is the answer, none is
// AnswerNotFound, several flag it.
func (r *Resolver) search(ctx context.Context, f facts) (Answer, bool, error) {
	var since time.Time
	if !f.FirstAttemptAt.IsZero() {
		since = f.FirstAttemptAt.Add(-searchSlack)
	}
	var found []bankclient.Payment
	for p, err := range bankclient.PaymentsSince(ctx, r.Bank, since, 1000) {
		if err != nil {
			a, ok := classifyErr(err)
			return a, ok, err
		}
		if p.Reference == f.reference() {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return Answer{Kind: AnswerNotFound, Detail: "no payment with reference " + f.reference() + " in the bank's list"}, true, nil
	case 1:
		return Answer{Kind: AnswerPayment, Payment: found[0]}, true, nil
	default:
		return Answer{Kind: AnswerDuplicate, Payment: found[0], Detail: fmt.Sprintf("%d payments with reference %s in the bank's list", len(found), f.reference())}, true, nil
	}
}

// apply records the attempt's answer and carries decision d out in one
// transaction: the transition, the ledger movement when confirmed, the
// bank's facts, the flag and the next check, then hook. A lost race rolls
// it back, records the answer alone and reports Done.
func (r *Resolver) apply(ctx context.Context, f facts, d Decision, att attempt, hook TxHook) (Outcome, error) {
	return r.applyOutcome(ctx, r.prepare(ctx, f, d, att, hook))
}

// applyOutcome records a prepared outcome in a transaction of its own.
func (r *Resolver) applyOutcome(ctx context.Context, o *outcome) (Outcome, error) {
	f, att := o.f, o.att
	tx, err := r.DB.Begin(ctx)
	if err != nil {
		return Outcome{}, fmt.Errorf("error recording the answer for settlement %s: %w", f.SettlementID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	lost, err := r.write(ctx, tx, o)
	if err != nil {
		return Outcome{}, err
	}
	if lost {
		_ = tx.Rollback(ctx)
		r.finishAttempt(ctx, att)
		return r.lost(ctx, o), nil
	}
	o.beforeCommit()
	if err := tx.Commit(ctx); err != nil {
		return Outcome{}, fmt.Errorf("error committing the answer for settlement %s: %w", f.SettlementID, err)
	}
	r.committed(ctx, o)
	return o.out, nil
}

// outcome is a decision about to be recorded, with everything its
// statements need: apply writes one in a transaction of its own, an
// outcome group several in one (outcomes.go).
type outcome struct {
	f    facts
	d    Decision
	att  attempt
	hook TxHook
	now  time.Time
	// out is what the caller gets once the outcome committed.
	out        Outcome
	flagReason string
	nextCheck  *time.Time
	checks     int
	// paymentID and bankStatus are the bank's answer, when it named a
	// payment.
	paymentID, bankStatus *string
	// The consent's columns (consentColumns).
	consentID, consentStatus         *string
	consentRequested, consentExpires *time.Time
	// lostState is the state another process left the settlement in,
	// when it moved it first (empty when unknown).
	lostState settlement.State
	// source is who asked for the decision (WithSource).
	source settlement.Source
}

// prepare works out what recording decision d about f means: the outcome
// the caller gets, the flag, the next check and the bank's facts, and
// who asked for it (the source ctx names, WithSource).
func (r *Resolver) prepare(ctx context.Context, f facts, d Decision, att attempt, hook TxHook) *outcome {
	now := r.now()
	flagReason := f.FlagReason
	switch {
	case d.Flag != "":
		flagReason = d.Flag
	case d.Definitive || d.To.Terminal():
		flagReason = ""
	}
	if d.To == settlement.Confirmed && flagReason == "" && !r.WatchInBulk {
		// Confirmed is final for the instruction, not for the money: during
		// the return watch the sweep asks the bank again, ever less often
		// (with WatchInBulk, the watch rounds do, and it schedules nothing).
		fc := f.Facts
		if fc.ConfirmedAt.IsZero() {
			fc.ConfirmedAt = now
		}
		d.NextCheckAt = r.policy().watchDelay(fc, now)
	}
	o := &outcome{f: f, d: d, att: att, hook: hook, now: now, flagReason: flagReason, source: sourceOf(ctx)}
	o.out = Outcome{SettlementID: f.SettlementID, State: d.To, FlagReason: flagReason, Decision: d, NextCheckAt: d.NextCheckAt}
	o.out.Done = d.To.Terminal() || (d.NextCheckAt.IsZero() && !d.Resend && !d.Pay)
	if !d.NextCheckAt.IsZero() && (!d.To.Terminal() || d.To == settlement.Confirmed) {
		t := d.NextCheckAt.Add(r.lease())
		o.nextCheck = &t
	}
	if d.Resend || d.Pay {
		// The (re)send that follows sets its own; until then the sweep may
		// take over after a lease.
		t := now.Add(r.lease())
		o.nextCheck = &t
	}
	if att.id != 0 && att.op != bankclient.OpSend && !att.answer.RateLimited() {
		o.checks = 1
	}
	if att.answer.Kind == AnswerPayment {
		o.paymentID, o.bankStatus = &att.answer.Payment.ID, (*string)(&att.answer.Payment.Status)
	}
	o.consentID, o.consentStatus, o.consentRequested, o.consentExpires = consentColumns(att, now)
	return o
}

// write writes outcome o in tx, hook included, and reports lost when
// another process moved the settlement first: the caller must then undo
// what tx wrote of it (roll tx back) and record the attempt's answer
// alone. It commits nothing.
func (r *Resolver) write(ctx context.Context, tx pgx.Tx, o *outcome) (lost bool, err error) {
	f, d, att, now := o.f, o.d, o.att, o.now
	o.lostState = ""
	// The bank's facts and the next check: written by the transition's own
	// UPDATE when the decision moves the settlement (the row is rewritten
	// once), else by an UPDATE of their own, conditioned on the state.
	facts := []any{o.paymentID, o.bankStatus, o.nextCheck, o.checks, o.consentID, o.consentStatus, o.consentRequested, o.consentExpires, d.Pay}
	moves := d.Moves(f.State)
	var held []statemachine.Held
	if moves {
		h, err := statemachine.TransitionHeld(ctx, tx, statemachine.Change{
			SettlementID: f.SettlementID, From: f.State, To: d.To, Reason: d.Reason, At: now, Source: o.source,
			Set: bankFactsSet(6), SetArgs: facts,
		})
		if errors.Is(err, statemachine.ErrLostRace) || errors.Is(err, statemachine.ErrForbidden) {
			// Another process moved it: its decision stands, ours is stale.
			var te *statemachine.TransitionError
			if errors.As(err, &te) && te.Actual != "" {
				o.lostState = te.Actual
			}
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("error applying decision for settlement %s: %w", f.SettlementID, err)
		}
		held = append(held, h)
	}
	// The attempt's answer, the bank's facts (unless the transition wrote
	// them), the movement, then the flag and the events travel in one round
	// trip. Each statement is conditioned on the settlement being in the
	// decided state, so a lost race writes nothing that is kept: the caller
	// undoes it.
	b := &pgx.Batch{}
	if att.id != 0 {
		q, args := finishAttemptQuery(att, now)
		b.Queue(q, args...)
	}
	if !moves {
		b.Queue(`UPDATE settlements SET `+bankFactsSet(4)+`, updated_at = $3
			WHERE settlement_id = $1 AND state = $2`,
			append([]any{f.SettlementID, string(d.To), now}, facts...)...)
	}
	kind := ""
	if d.WriteMovement || d.WriteReversal {
		kind = "payout"
		if d.WriteReversal {
			kind = "reversal"
		}
		m := Movement{SettlementID: f.SettlementID, Kind: kind, PaymentID: o.paymentID, At: now, State: d.To}
		if r.QueueMovement == nil {
			QueueMovement(b, m)
		} else if err := r.QueueMovement(ctx, tx, b, m); err != nil {
			return false, fmt.Errorf("error writing the %s movement of settlement %s: %w", kind, f.SettlementID, err)
		}
	}
	// The flag goes through the state machine, which writes its event
	// (filled in at commit). The transition's event goes last: it is
	// written once, with the settlement as this transaction leaves it (the
	// hook writes only River's rows).
	statemachine.QueueFlag(b, f.SettlementID, o.flagReason, now)
	statemachine.QueueEvents(b, held...)
	br := tx.SendBatch(ctx, b)
	if att.id != 0 {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return false, fmt.Errorf("error recording bank attempt %d: %w", att.id, err)
		}
	}
	if !moves {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return false, fmt.Errorf("error recording the answer for settlement %s: %w", f.SettlementID, err)
		}
		if tag.RowsAffected() == 0 {
			// It stayed in its state in our decision, but not in the
			// database.
			br.Close()
			return true, nil
		}
	}
	if kind != "" {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return false, fmt.Errorf("error writing the %s movement of settlement %s: %w", kind, f.SettlementID, err)
		}
	}
	if _, err := br.Exec(); err != nil {
		br.Close()
		return false, fmt.Errorf("error flagging settlement %s: %w", f.SettlementID, err)
	}
	if len(held) > 0 {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return false, fmt.Errorf("error writing the events of settlement %s: %w", f.SettlementID, err)
		}
	}
	if err := br.Close(); err != nil {
		return false, fmt.Errorf("error recording the answer for settlement %s: %w", f.SettlementID, err)
	}
	if o.hook != nil {
		if err := o.hook(ctx, tx, o.out); err != nil {
			return false, fmt.Errorf("error in the transaction of settlement %s: %w", f.SettlementID, err)
		}
	}
	return false, nil
}

// lost is the outcome of o when another process moved the settlement
// first (its decision stands, ours is stale), once the attempt's answer is
// recorded alone.
func (r *Resolver) lost(ctx context.Context, o *outcome) Outcome {
	out := o.out
	if o.lostState != "" {
		out.State = o.lostState
	}
	out.Done, out.LostRace, out.FlagReason = true, true, ""
	if o.d.Moves(o.f.State) {
		r.log().LogAttrs(ctx, slog.LevelInfo, "decision dropped: settlement moved by another process",
			slog.String("settlement_id", o.f.SettlementID), slog.String("from", string(o.f.State)),
			slog.String("to", string(o.d.To)), slog.String("actual", string(out.State)),
			slog.String("answer", string(o.att.answer.Kind)))
	} else {
		r.log().LogAttrs(ctx, slog.LevelInfo, "decision dropped: settlement moved by another process",
			slog.String("settlement_id", o.f.SettlementID), slog.String("state", string(o.f.State)),
			slog.String("answer", string(o.att.answer.Kind)))
	}
	return out
}

// beforeCommit is reached just before the transaction that writes o
// commits.
func (o *outcome) beforeCommit() {
	if o.d.WriteMovement {
		crash.Point(crash.ConfirmBeforeCommit)
	}
	if o.d.WriteReversal {
		crash.Point(crash.ReturnBeforeCommit)
	}
}

// committed is reached once the transaction that wrote o committed.
func (r *Resolver) committed(ctx context.Context, o *outcome) {
	if o.d.WriteMovement {
		crash.Point(crash.ConfirmAfterCommit)
	}
	if o.d.WriteReversal {
		crash.Point(crash.ReturnAfterCommit)
	}
	r.observe(o.f, o.d, o.flagReason)
	r.logDecision(ctx, o.f, o.d, o.att)
}

// bankFactsSet is the assignments that record a decision's bank facts and
// next check on its settlements row, their parameters numbered from k: the
// bank's payment id and status ($k, $k+1, each kept when nil), the next
// check ($k+2), the status checks to add ($k+3; reset when $k+8, a consent
// that lets the payment go), and the consent's id, status, request and
// expiry ($k+4 to $k+7, the id and the request kept once set).
func bankFactsSet(k int) string {
	p := func(i int) string { return "$" + strconv.Itoa(k+i) }
	return `bank_payment_id = COALESCE(` + p(0) + `, bank_payment_id),
		    bank_status = COALESCE(` + p(1) + `, bank_status),
		    next_check_at = ` + p(2) + `,
		    check_attempts = CASE WHEN ` + p(8) + ` THEN 0 ELSE check_attempts + ` + p(3) + ` END,
		    bank_consent_id = COALESCE(bank_consent_id, ` + p(4) + `),
		    consent_status = COALESCE(` + p(5) + `, consent_status),
		    consent_requested_at = COALESCE(consent_requested_at, ` + p(6) + `),
		    consent_expires_at = COALESCE(` + p(7) + `, consent_expires_at)`
}

// observe counts a committed decision.
func (r *Resolver) observe(f facts, d Decision, flagReason string) {
	m := r.Metrics
	if m == nil {
		return
	}
	if d.Moves(f.State) {
		m.Transitions.WithLabelValues(r.BankName, string(d.To)).Inc()
		if d.To == settlement.Returned {
			source := d.Source
			if source == "" {
				source = "status"
			}
			m.Returns.WithLabelValues(source).Inc()
		}
		if d.To == settlement.Uncertain {
			m.UncertainTotal.Inc()
		}
		if d.To.Terminal() && !f.EnteredUncer.IsZero() {
			m.Resolution.Observe(r.now().Sub(f.EnteredUncer).Seconds())
		}
	}
	if d.Flag != "" && !f.Flagged {
		m.NeedsInvestigation.Inc()
	}
}

func (r *Resolver) logDecision(ctx context.Context, f facts, d Decision, att attempt) {
	level := slog.LevelInfo
	if d.Flag != "" {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String("settlement_id", f.SettlementID),
		slog.String("op", att.op),
		slog.String("answer", string(att.answer.Kind)),
		slog.String("from", string(f.State)),
		slog.String("to", string(d.To)),
		slog.String("reason", d.Reason),
	}
	if att.answer.Kind == AnswerPayment {
		attrs = append(attrs, slog.String("bank_payment_id", att.answer.Payment.ID), slog.String("bank_status", string(att.answer.Payment.Status)))
	}
	if d.WriteMovement {
		attrs = append(attrs, slog.Int64("movement_amount_cents", f.AmountCents), slog.String("currency", f.Currency))
	}
	if d.Resend {
		attrs = append(attrs, slog.Bool("resend", true))
	}
	if d.Flag != "" {
		attrs = append(attrs, slog.String("needs_investigation", d.Flag))
	}
	if !d.NextCheckAt.IsZero() {
		attrs = append(attrs, slog.Time("next_check_at", d.NextCheckAt))
	}
	r.log().LogAttrs(ctx, level, "settlement decision", attrs...)
}

// finishAttempt records an attempt's answer on its own, best effort: used
// when no decision is applied (nothing was sent, or the race was lost).
func (r *Resolver) finishAttempt(ctx context.Context, att attempt) {
	tx, err := r.DB.Begin(ctx)
	if err == nil {
		err = finishAttempt(ctx, tx, att, r.now())
		if err == nil {
			err = tx.Commit(ctx)
		} else {
			_ = tx.Rollback(ctx)
		}
	}
	if err != nil {
		r.log().LogAttrs(ctx, slog.LevelWarn, "error recording bank attempt",
			slog.Int64("attempt_id", att.id), slog.String("error", err.Error()))
	}
}

func finishAttempt(ctx context.Context, tx pgx.Tx, att attempt, now time.Time) error {
	q, args := finishAttemptQuery(att, now)
	if _, err := tx.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("error recording bank attempt %d: %w", att.id, err)
	}
	return nil
}

// finishAttemptQuery is the statement that records an attempt's answer.
func finishAttemptQuery(att attempt, now time.Time) (string, []any) {
	outcome := string(att.answer.Kind)
	if !att.sent {
		outcome = "not_sent"
	}
	var bankStatus *string
	if att.answer.Kind == AnswerPayment {
		bankStatus = (*string)(&att.answer.Payment.Status)
	}
	var httpStatus *int
	if att.answer.HTTPStatus != 0 {
		httpStatus = &att.answer.HTTPStatus
	}
	detail := att.answer.Detail
	if len(detail) > maxDetailLen {
		detail = strings.ToValidUTF8(detail[:maxDetailLen], "")
	}
	return `
		UPDATE bank_attempts SET finished_at = $2, outcome = $3, bank_status = $4, http_status = $5, detail = $6
		WHERE id = $1`, []any{att.id, now, outcome, bankStatus, httpStatus, nullable(detail)}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// ApplyReturn books a credit line reported by another source than the
// bank's status API (source names it: "statement") as DecideReturn
// decides: a return of a confirmed settlement's amount in its currency
// moves it to returned with its reversal, in one transaction; an unknown
// or zero amount, another currency or another amount is flagged; a credit
// without return information, a settlement never confirmed, or one
// already returned or failed is left as it is. Any number of sources may
// report the same return, in any order, at once: the optimistic transition
// and UNIQUE (settlement_id, kind) book one reversal.
func (r *Resolver) ApplyReturn(ctx context.Context, settlementID, source string, l LineFacts) (Outcome, error) {
	f, err := r.load(ctx, settlementID)
	if err != nil {
		return Outcome{}, err
	}
	d := DecideReturn(f.Facts, l)
	d.Source = source
	d.Reason = source + ": " + d.Reason
	if !d.Moves(f.State) && d.Flag == "" {
		return Outcome{SettlementID: settlementID, From: f.State, State: f.State, Done: true}, nil
	}
	out, err := r.apply(WithSource(ctx, settlement.Source(source)), f, d, attempt{}, nil)
	out.From = f.State
	return out, err
}
