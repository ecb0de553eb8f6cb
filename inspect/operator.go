package inspect

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/settle/settle/settlement"
)

// The actions an operator can take on a settlement (operator_actions.action).
const (
	// OperatorNote is a note added to a settlement's story.
	OperatorNote = "note"
	// OperatorResolve is "resolve now": the bank asked at once, through
	// Resolver.ResolveOne.
	OperatorResolve = "resolve"
	// OperatorRedeliver is `settle events redeliver`: a settlement's
	// outcome events queued again for its sinks.
	OperatorRedeliver = "redeliver"
	// OperatorForgetSink is `settle events forget-sink`: the settlement's
	// undelivered events at a sink taken out of the configuration dropped.
	OperatorForgetSink = "forget_sink"
)

// Limits of an OperatorAction, as the schema enforces them.
const (
	maxOperatorLen = 128
	maxNoteLen     = 4000
)

// OperatorAction is one recorded action of an operator on a settlement:
// who, when, what and what came of it. Recorded actions are never changed
// or removed.
type OperatorAction struct {
	ID           int64  `json:"id"`
	SettlementID string `json:"settlement_id"`
	// Operator is the operator's name (the HTTP Basic user name).
	Operator string `json:"operator"`
	// OperatorVerified is true when the name was checked against the
	// operator's own credential (--operators-file), false when it was only
	// asserted (a Basic user name given with the shared API token, a name
	// typed into an open console, $USER on the command line).
	OperatorVerified bool `json:"operator_verified"`
	// SourceAddr is the IP address the action came from; "" for an action
	// taken on the command line.
	SourceAddr string `json:"source_addr,omitempty"`
	// Action is OperatorNote, OperatorResolve, OperatorRedeliver or
	// OperatorForgetSink.
	Action string `json:"action"`
	// Detail is the note's text, or what was asked.
	Detail string `json:"detail"`
	// Result says what came of it; OK is false when the action failed.
	Result string    `json:"result"`
	OK     bool      `json:"ok"`
	At     time.Time `json:"at"`
}

// Validate reports an action the schema would refuse, in words an operator
// understands.
func (a OperatorAction) Validate() error {
	switch {
	case a.SettlementID == "":
		return errors.New("no settlement given")
	case strings.TrimSpace(a.Operator) == "":
		return errors.New("an action needs the operator's name")
	case utf8.RuneCountInString(a.Operator) > maxOperatorLen:
		return fmt.Errorf("operator name longer than %d characters", maxOperatorLen)
	case a.Action != OperatorNote && a.Action != OperatorResolve && a.Action != OperatorRedeliver && a.Action != OperatorForgetSink:
		return fmt.Errorf("unknown action %q", a.Action)
	case a.Action == OperatorNote && strings.TrimSpace(a.Detail) == "":
		return errors.New("the note is empty")
	case utf8.RuneCountInString(a.Detail) > maxNoteLen:
		return fmt.Errorf("note longer than %d characters", maxNoteLen)
	case !utf8.ValidString(a.Operator + a.Detail + a.Result):
		return errors.New("text is not valid UTF-8")
	case a.SourceAddr != "" && net.ParseIP(a.SourceAddr) == nil:
		return fmt.Errorf("source address %q is not an IP address", a.SourceAddr)
	}
	return nil
}

// RecordAction appends a to operator_actions and returns it with its id.
// It returns an error matching settlement.ErrNotFound when the settlement
// does not exist.
func RecordAction(ctx context.Context, db DB, a OperatorAction) (OperatorAction, error) {
	if err := a.Validate(); err != nil {
		return OperatorAction{}, fmt.Errorf("error recording operator action: %w", err)
	}
	err := db.QueryRow(ctx, `
		INSERT INTO operator_actions (settlement_id, operator, action, detail, result, ok, at, operator_verified, source_addr)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::inet) RETURNING id`,
		a.SettlementID, a.Operator, a.Action, a.Detail, a.Result, a.OK, a.At, a.OperatorVerified, nullable(a.SourceAddr)).Scan(&a.ID)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ForeignKeyViolation {
		return OperatorAction{}, fmt.Errorf("error recording operator action on %s: %w", a.SettlementID, settlement.ErrNotFound)
	}
	if err != nil {
		return OperatorAction{}, fmt.Errorf("error recording operator action on %s: %w", a.SettlementID, err)
	}
	return a, nil
}

// operatorActions reads the actions on settlement id in the order they
// were taken.
func operatorActions(ctx context.Context, tx pgx.Tx, id string) ([]OperatorAction, error) {
	rows, err := tx.Query(ctx, `
		SELECT id, settlement_id, operator, action, detail, result, ok, at, operator_verified, coalesce(host(source_addr), '')
		FROM operator_actions WHERE settlement_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("error reading operator actions of %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OperatorAction, error) {
		var a OperatorAction
		return a, row.Scan(&a.ID, &a.SettlementID, &a.Operator, &a.Action, &a.Detail, &a.Result, &a.OK, &a.At, &a.OperatorVerified, &a.SourceAddr)
	})
	if err != nil {
		return nil, fmt.Errorf("error reading operator actions of %s: %w", id, err)
	}
	if out == nil {
		out = []OperatorAction{}
	}
	return out, nil
}

// MovementEntry is one ledger movement of a settlement with its kind:
// payout (written with the move to confirmed) or reversal (with the move to
// returned).
type MovementEntry struct {
	Kind string `json:"kind"`
	settlement.Movement
}

// movements reads every ledger movement of settlement id, oldest first.
func movements(ctx context.Context, tx pgx.Tx, id string) ([]MovementEntry, error) {
	rows, err := tx.Query(ctx, `
		SELECT kind, account_id, amount_cents, currency, coalesce(bank_payment_id, ''), created_at
		FROM ledger_movements WHERE settlement_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("error reading movements of %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (MovementEntry, error) {
		var m MovementEntry
		return m, row.Scan(&m.Kind, &m.AccountID, &m.AmountCents, &m.Currency, &m.BankPaymentID, &m.CreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("error reading movements of %s: %w", id, err)
	}
	if out == nil {
		out = []MovementEntry{}
	}
	return out, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
