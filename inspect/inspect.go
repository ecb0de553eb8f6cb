package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/events"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/settlement/settlementdb"
)

// ListOptions selects the settlements of Inspector.List.
type ListOptions struct {
	// State is the state to list (required).
	State settlement.State
	// OlderThan, when positive, keeps only the settlements that entered the
	// state at least this long ago.
	OlderThan time.Duration
	// Limit, when positive, stops after this many settlements.
	Limit int
	// Bank, when set, keeps the settlements bound to that bank.
	Bank string
}

// SettlementRow is one settlement of a list: where it stands, since when,
// and what the bank last said.
type SettlementRow struct {
	SettlementID string `json:"settlement_id"`
	State        string `json:"state"`
	// Since is when it last entered State.
	Since      time.Time `json:"since"`
	AgeSeconds float64   `json:"age_seconds"`
	// CreatedAt is when it was received: the list order.
	CreatedAt time.Time `json:"created_at"`
	AccountID string    `json:"account_id"`
	// AmountCents is in minor units of Currency.
	AmountCents         int64      `json:"amount_cents"`
	Currency            string     `json:"currency"`
	SendAttempts        int        `json:"send_attempts"`
	FirstAttemptAt      *time.Time `json:"first_attempt_at"`
	CheckAttempts       int        `json:"check_attempts"`
	NextCheckAt         *time.Time `json:"next_check_at"`
	BankPaymentID       string     `json:"bank_payment_id,omitempty"`
	BankStatus          string     `json:"bank_status,omitempty"`
	NeedsInvestigation  bool       `json:"needs_investigation"`
	InvestigationReason string     `json:"investigation_reason,omitempty"`
	// Bank is the bank it is bound to.
	Bank string `json:"bank"`
}

// List streams the settlements in opts.State to fn, oldest first (by
// receipt, the order of Page), and returns how many it passed. It reads one
// snapshot and its memory does not grow with the count.
func (i *Inspector) List(ctx context.Context, opts ListOptions, fn func(SettlementRow) error) (int, error) {
	if !opts.State.Valid() {
		return 0, fmt.Errorf("error listing settlements: unknown state %q (want one of %v)", opts.State, settlement.States)
	}
	f := Filter{State: opts.State, OlderThan: opts.OlderThan, Bank: opts.Bank}
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("error listing settlements: %w", err)
	}
	n := 0
	now := i.now()
	err := i.readTx(ctx, func(tx pgx.Tx) error {
		return listRows(ctx, tx, f, Cursor{}, max(opts.Limit, 0), now, func(r SettlementRow) error {
			n++
			return fn(r)
		})
	})
	return n, err
}

// Story is everything settle knows about one settlement, and the same facts
// merged into one timeline: what `settle reconcile show` prints. It embeds
// the view of GET /v1/settlements/{id} (LoadView).
type Story struct {
	settlement.View
	// Conflicts are the events rejected for carrying another payload under
	// this settlement's id: the first MaxStoryConflicts of them (a producer
	// can send any number, and one story must stay readable).
	Conflicts []Conflict `json:"conflicts"`
	// ConflictsTotal is how many there are in all; the ones past
	// Conflicts are listed by `settle reconcile conflicts`.
	ConflictsTotal int `json:"conflicts_total"`
	// LastReplayAgeSeconds is how long ago the last replay arrived; nil when
	// there was none (or the receipt is gone).
	LastReplayAgeSeconds *float64 `json:"last_replay_age_seconds"`
	// Movements are every ledger movement, the payout and any reversal.
	Movements []MovementEntry `json:"movements"`
	// OperatorActions are the notes and actions of operators, in order.
	OperatorActions []OperatorAction `json:"operator_actions"`
	// Events are the settlement's outcome events (DESIGN.md section 19),
	// each with its delivery at every sink and every attempt made.
	Events []events.Listed `json:"events"`
	// Timeline is every event above in time order.
	Timeline []Event `json:"timeline"`
	// Waiting says why an open settlement does not move when no worker of
	// its bank runs ("waiting for a worker of bank stripe"); empty
	// otherwise.
	Waiting string `json:"waiting,omitempty"`
}

// MaxStoryConflicts is the most conflicts a Story holds.
const MaxStoryConflicts = 20

// Event is one line of a Story's timeline.
type Event struct {
	At time.Time `json:"at"`
	// Kind is receipt, replay, transition, bank_send, bank_status, movement,
	// conflict, event, operator or investigation.
	Kind string `json:"kind"`
	// Text says what happened, in words.
	Text string `json:"text"`
}

// Show reads the whole story of settlement id in one snapshot. It returns an
// error matching settlement.ErrNotFound when there is no such settlement.
func (i *Inspector) Show(ctx context.Context, id string) (Story, error) {
	var st Story
	now := i.now()
	err := i.readTx(ctx, func(tx pgx.Tx) error {
		v, err := settlementdb.LoadView(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("error showing settlement %s: %w", id, err)
		}
		st.View = v
		if st.Conflicts, err = conflictRows(ctx, tx, id, 0, MaxStoryConflicts, nil); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM receipt_conflicts WHERE settlement_id = $1`, id).Scan(&st.ConflictsTotal); err != nil {
			return fmt.Errorf("error counting the conflicts of %s: %w", id, err)
		}
		if st.Movements, err = movements(ctx, tx, id); err != nil {
			return err
		}
		if st.OperatorActions, err = operatorActions(ctx, tx, id); err != nil {
			return err
		}
		if st.Events, err = events.Story(ctx, tx, id); err != nil {
			return err
		}
		live, err := LiveBanks(ctx, tx)
		st.Waiting = waitingReason(string(v.Settlement.State), v.Settlement.Bank, live)
		return err
	})
	if err != nil {
		return Story{}, err
	}
	if r := st.Receipt; r != nil && r.LastReplayAt != nil {
		age := max(now.Sub(*r.LastReplayAt).Seconds(), 0)
		st.LastReplayAgeSeconds = &age
	}
	st.Timeline = timeline(st)
	return st, nil
}

// timeline merges the facts of a story in time order. Equal times keep the
// order in which they were recorded within each kind.
func timeline(st Story) []Event {
	var ev []Event
	if r := st.Receipt; r != nil {
		t := "received, payload " + r.PayloadHash
		if r.FirstEventID != "" {
			t += ", first event " + r.FirstEventID
		}
		ev = append(ev, Event{At: r.ReceivedAt, Kind: "receipt", Text: t})
		if r.LastReplayAt != nil {
			ev = append(ev, Event{At: *r.LastReplayAt, Kind: "replay",
				Text: fmt.Sprintf("last of %d replays (same payload, stored outcome returned)", r.ReplayCount)})
		}
	}
	for _, t := range st.Transitions {
		from := t.From
		if from == "" {
			from = "(new)"
		}
		ev = append(ev, Event{At: t.At, Kind: "transition", Text: fmt.Sprintf("%s → %s: %s", from, t.To, t.Reason)})
	}
	for _, a := range st.BankAttempts {
		text := a.Op + " key " + a.BankKey + ": "
		if a.FinishedAt == nil {
			text += "no answer recorded (in flight, or the process died)"
		} else {
			text += a.Outcome
			if a.BankStatus != "" {
				text += ", bank status " + a.BankStatus
			}
			if a.HTTPStatus != nil {
				text += ", HTTP " + strconv.Itoa(*a.HTTPStatus)
			}
			if a.Detail != "" {
				text += " (" + a.Detail + ")"
			}
			text += fmt.Sprintf(" after %s", a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond))
		}
		ev = append(ev, Event{At: a.StartedAt, Kind: "bank_" + a.Op, Text: text})
	}
	for _, m := range st.Movements {
		t := fmt.Sprintf("ledger %s %d %s on account %s", m.Kind, m.AmountCents, m.Currency, m.AccountID)
		if m.BankPaymentID != "" {
			t += ", bank payment " + m.BankPaymentID
		}
		ev = append(ev, Event{At: m.CreatedAt, Kind: "movement", Text: t})
	}
	for _, c := range st.Conflicts {
		ev = append(ev, Event{At: c.DetectedAt, Kind: "conflict", Text: "rejected another payload: " + c.describe()})
	}
	if more := st.ConflictsTotal - len(st.Conflicts); more > 0 && len(st.Conflicts) > 0 {
		last := st.Conflicts[len(st.Conflicts)-1].DetectedAt
		ev = append(ev, Event{At: last, Kind: "conflict", Text: fmt.Sprintf("… and %d more conflicts since, not shown (settle reconcile conflicts lists them all)", more)})
	}
	for _, e := range st.Events {
		t := e.EventID + " " + e.Type
		for _, d := range e.Deliveries {
			t += fmt.Sprintf("; %s %s after %d attempt(s)", d.Sink, d.State, d.Attempts)
		}
		ev = append(ev, Event{At: e.CreatedAt, Kind: "event", Text: t})
	}
	for _, a := range st.OperatorActions {
		t := a.Operator + " "
		switch a.Action {
		case OperatorNote:
			t += "noted: " + a.Detail
		case OperatorRedeliver, OperatorForgetSink:
			t += "asked to " + a.Detail + ": " + a.Result
		default:
			t += "asked to resolve now: " + a.Result
		}
		switch {
		case !a.OperatorVerified && a.SourceAddr != "":
			t += " [name self-asserted, from " + a.SourceAddr + "]"
		case !a.OperatorVerified:
			t += " [name self-asserted]"
		case a.SourceAddr != "":
			t += " [from " + a.SourceAddr + "]"
		}
		ev = append(ev, Event{At: a.At, Kind: "operator", Text: t})
	}
	sort.SliceStable(ev, func(a, b int) bool { return ev[a].At.Before(ev[b].At) })
	if s := st.Settlement; s.NeedsInvestigation {
		ev = append(ev, Event{At: s.UpdatedAt, Kind: "investigation", Text: "needs investigation: " + s.InvestigationReason})
	}
	return ev
}

// Conflict is one recorded receipt conflict: an event that reused a
// settlement id with another payload, rejected and never applied.
type Conflict struct {
	ID           int64     `json:"id"`
	SettlementID string    `json:"settlement_id"`
	DetectedAt   time.Time `json:"detected_at"`
	EventID      string    `json:"event_id,omitempty"`
	StoredHash   string    `json:"stored_hash"`
	IncomingHash string    `json:"incoming_hash"`
	// Incoming holds the business fields of the rejected event.
	Incoming json.RawMessage `json:"incoming"`
	// Differences are the business fields where the rejected event differs
	// from the stored settlement.
	Differences []FieldDiff `json:"differences"`
}

// FieldDiff is one business field that differs between the stored
// settlement and a rejected event.
type FieldDiff struct {
	Field    string `json:"field"`
	Stored   string `json:"stored"`
	Incoming string `json:"incoming"`
}

func (c Conflict) describe() string {
	if len(c.Differences) == 0 {
		return c.IncomingHash + " (stored " + c.StoredHash + ")"
	}
	s := ""
	for k, d := range c.Differences {
		if k > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s → %s", d.Field, d.Stored, d.Incoming)
	}
	return s
}

// Conflicts streams the recorded receipt conflicts, oldest first, to fn and
// returns how many it passed.
func (i *Inspector) Conflicts(ctx context.Context, fn func(Conflict) error) (int, error) {
	n := 0
	err := i.readTx(ctx, func(tx pgx.Tx) error {
		_, err := conflictRows(ctx, tx, "", 0, 0, func(c Conflict) error { n++; return fn(c) })
		return err
	})
	return n, err
}

// ConflictPage is one page of recorded conflicts, oldest first.
type ConflictPage struct {
	Conflicts []Conflict
	// Next continues after the last conflict (its id); 0 on the last page.
	Next int64
}

// ConflictsPage reads at most limit conflicts recorded after the one with
// id after (0: from the first), keyset by id.
func (i *Inspector) ConflictsPage(ctx context.Context, after int64, limit int) (ConflictPage, error) {
	if limit <= 0 || limit > maxPageSize {
		limit = maxPageSize
	}
	var p ConflictPage
	err := i.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		p.Conflicts, err = conflictRows(ctx, tx, "", after, limit+1, nil)
		return err
	})
	if err != nil {
		return ConflictPage{}, err
	}
	if len(p.Conflicts) > limit {
		p.Conflicts = p.Conflicts[:limit]
		p.Next = p.Conflicts[limit-1].ID
	}
	return p, nil
}

// conflictRows reads the conflicts of one settlement (id not empty) or of
// all, in the order they were recorded, after the one with id after, at
// most limit of them (0: all), passing each to fn, or collecting them when
// fn is nil.
func conflictRows(ctx context.Context, tx pgx.Tx, id string, after int64, limit int, fn func(Conflict) error) ([]Conflict, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := tx.Query(ctx, `
		SELECT c.id, c.settlement_id, c.detected_at, coalesce(c.event_id, ''), c.stored_hash, c.incoming_hash,
		       coalesce(c.incoming, 'null'::jsonb),
		       s.account_id, s.amount_cents, s.currency, s.beneficiary
		FROM receipt_conflicts c LEFT JOIN settlements s USING (settlement_id)
		WHERE ($1 = '' OR c.settlement_id = $1) AND c.id > $2
		ORDER BY c.id LIMIT $3`, id, after, lim)
	if err != nil {
		return nil, fmt.Errorf("error reading conflicts: %w", err)
	}
	var (
		out                      []Conflict
		c                        Conflict
		incoming                 []byte
		account, currency, benef *string
		amount                   *int64
	)
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.SettlementID, &c.DetectedAt, &c.EventID, &c.StoredHash,
		&c.IncomingHash, &incoming, &account, &amount, &currency, &benef}, func() error {
		c.Incoming = append(json.RawMessage(nil), incoming...)
		c.Differences = diff(c.Incoming, account, amount, currency, benef)
		if fn != nil {
			return fn(c)
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error reading conflicts: %w", err)
	}
	if out == nil {
		out = []Conflict{}
	}
	return out, nil
}

// diff compares the business fields of a rejected event with the stored
// settlement (nil fields: no settlement any more).
func diff(incoming json.RawMessage, account *string, amount *int64, currency, benef *string) []FieldDiff {
	d := []FieldDiff{}
	if account == nil {
		return d
	}
	var in map[string]any
	dec := json.NewDecoder(bytes.NewReader(incoming))
	dec.UseNumber() // amounts are int64: never through float64
	if dec.Decode(&in) != nil || in == nil {
		return d
	}
	stored := []struct{ field, value string }{
		{"account_id", *account},
		{"amount_cents", strconv.FormatInt(*amount, 10)},
		{"currency", *currency},
		{"beneficiary", *benef},
	}
	for _, f := range stored {
		v, ok := in[f.field]
		if !ok {
			continue
		}
		got := fmt.Sprint(v)
		if got != f.value {
			d = append(d, FieldDiff{Field: f.field, Stored: f.value, Incoming: got})
		}
	}
	return d
}
