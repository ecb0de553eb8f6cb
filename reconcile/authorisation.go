package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/crash"
)

// The account holder's authorisation (DESIGN.md section 13, issue 33): at a
// bank whose payments are made with the account holder's own token
// (Capabilities.Authorisation, UK Open Banking's authorization code grant),
// a consent the bank created is also authorised by the account holder at
// their bank, through a link settle gives the operator to send them. Their
// bank sends them back to settle's redirect endpoint (the console's) with a
// one-time code and the link's state; settle exchanges the code for their
// token and keeps it sealed (consent_authorisations, migration 0017). The
// payment is claimed only once the consent is authorised at the bank AND
// the token is kept, and is sent with it.
//
// Nothing here moves a settlement: a redirect only stores the token (or the
// account holder's refusal) and asks for the settlement to be checked; the
// bank's word about the consent decides, as before. A redirect naming no
// state settle issued is refused; one handled already changes nothing; a
// code the bank refuses (spent, expired, not ours) leaves the link listed
// for the account holder to open again.

// The statuses of an authorisation (consent_authorisations.status).
const (
	AuthorisationAwaiting   = "awaiting"
	AuthorisationAuthorised = "authorised"
	AuthorisationRejected   = "rejected"
)

// AnswerGrant: the bank's token endpoint issued the account holder's
// token (the answer of a token attempt).
const AnswerGrant AnswerKind = "grant"

// RefreshSkew is how long before its expiry the account holder's access
// token is refreshed before a payment is sent with it.
const RefreshSkew = time.Minute

// ErrUnknownAuthorisation is matched by a redirect whose state names no
// authorisation settle started: forged, or from another installation.
var ErrUnknownAuthorisation = errors.New("no authorisation of settle's has this state")

// newState is a fresh OAuth state: 32 random bytes, base64url.
func newState() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// needsGrant reports whether the payment waits for the account holder's
// token too.
func (f Facts) needsGrant(p Policy) bool { return p.Bank.Authorisation && !f.Granted }

// ensureAuthorisation starts the account holder's authorisation of a
// settlement's consent, once its id is known: a row with a fresh state.
// Any number of calls make one row.
func (r *Resolver) ensureAuthorisation(ctx context.Context, settlementID string) error {
	_, err := r.DB.Exec(ctx, `
		INSERT INTO consent_authorisations (settlement_id, consent_id, state, created_at, updated_at)
		SELECT settlement_id, bank_consent_id, $2, $3, $3 FROM settlements
		WHERE settlement_id = $1 AND bank_consent_id IS NOT NULL
		ON CONFLICT (settlement_id) DO NOTHING`, settlementID, newState(), r.now())
	if err != nil {
		return fmt.Errorf("error starting the authorisation of settlement %s: %w", settlementID, err)
	}
	return nil
}

// authoriser is the Bank as an Authoriser.
func (r *Resolver) authoriser() (bankclient.Authoriser, error) {
	a, ok := r.Bank.(bankclient.Authoriser)
	if !ok {
		return nil, fmt.Errorf("%w: the bank's client cannot run the account holder's authorisation", bankclient.ErrUnsupported)
	}
	return a, nil
}

// freshGrant refreshes the account holder's access token of f when it
// expires within RefreshSkew, and stores the new grant. A refresh the bank
// refuses voids the grant: the authorisation is listed again for the
// account holder, and the error says so.
func (r *Resolver) freshGrant(ctx context.Context, f *facts) error {
	g := f.Grant
	if g.Sealed == "" || g.ExpiresAt.IsZero() || r.now().Add(RefreshSkew).Before(g.ExpiresAt) {
		return nil
	}
	au, err := r.authoriser()
	if err != nil {
		return err
	}
	att, err := r.tokenAttempt(ctx, f.SettlementID, bankclient.OpTokenRefresh)
	if err != nil {
		return err
	}
	var ng bankclient.Grant
	if g.Refreshable {
		ng, err = au.RefreshGrant(ctx, f.ConsentID, g)
	} else {
		err = &bankclient.RejectedError{Code: "no_refresh_token", Reason: "the bank issued no refresh token"}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	r.finishTokenAttempt(rctx, att, err)
	if bankclient.IsRejected(err) {
		_, xerr := r.DB.Exec(rctx, `
			UPDATE consent_authorisations
			SET status = 'awaiting', grant_sealed = NULL, token_expires_at = NULL, error = left($3, 500), updated_at = $4
			WHERE settlement_id = $1 AND grant_sealed = $2`,
			f.SettlementID, g.Sealed, "the bank refused to refresh the token: "+err.Error(), r.now())
		r.log().LogAttrs(ctx, slog.LevelWarn, "authorisation: refresh refused, the account holder must authorise again",
			slog.String("settlement_id", f.SettlementID), slog.String("error", err.Error()))
		if xerr != nil {
			return fmt.Errorf("error voiding the grant of settlement %s: %w", f.SettlementID, xerr)
		}
		return fmt.Errorf("error refreshing the account holder's token of settlement %s (the link is listed again): %w", f.SettlementID, err)
	}
	if err != nil {
		return fmt.Errorf("error refreshing the account holder's token of settlement %s: %w", f.SettlementID, err)
	}
	if _, err := r.DB.Exec(rctx, `
		UPDATE consent_authorisations SET grant_sealed = $3, token_expires_at = $4, updated_at = $5
		WHERE settlement_id = $1 AND grant_sealed = $2`,
		f.SettlementID, g.Sealed, ng.Sealed, nullTime(ng.ExpiresAt), r.now()); err != nil {
		return fmt.Errorf("error storing the refreshed grant of settlement %s: %w", f.SettlementID, err)
	}
	f.Grant = ng
	return nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// tokenAttempt records a request to the bank's token endpoint about a
// settlement (bank_attempts, under its consent key).
func (r *Resolver) tokenAttempt(ctx context.Context, settlementID, op string) (attempt, error) {
	att := attempt{op: op}
	if err := r.DB.QueryRow(ctx, `
		INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at)
		VALUES ($1, $2, $3, $4) RETURNING id`,
		settlementID, op, bankclient.ConsentKeyFor(settlementID), r.now()).Scan(&att.id); err != nil {
		return attempt{}, fmt.Errorf("error recording the token request of settlement %s: %w", settlementID, err)
	}
	return att, nil
}

// finishTokenAttempt records how a token request ended (never the token).
func (r *Resolver) finishTokenAttempt(ctx context.Context, att attempt, err error) {
	if err == nil {
		att.answer, att.sent = Answer{Kind: AnswerGrant}, true
	} else {
		att.answer, att.sent = classifyErr(err)
		att.answer.Detail = err.Error()
	}
	r.finishAttempt(ctx, att)
}

// Authorisation is one account holder's authorisation as the console shows
// it.
type Authorisation struct {
	SettlementID  string
	Bank          string
	ConsentID     string
	ConsentStatus string
	// Status is AuthorisationAwaiting, AuthorisationAuthorised or
	// AuthorisationRejected.
	Status string
	// State is the link's OAuth state.
	State       string
	AmountCents int64
	Currency    string
	Beneficiary string
	// Error is the last refusal (the account holder's or the bank's).
	Error     string
	Callbacks int
	CreatedAt time.Time
}

// AwaitingAuthorisations lists, oldest first, the authorisations the
// account holders have still to give: consents settle holds no token for,
// of pending settlements never attempted and not flagged (a flagged one
// is the operator's). At most limit.
func AwaitingAuthorisations(ctx context.Context, db Querier, limit int) ([]Authorisation, error) {
	rows, err := db.Query(ctx, `
		SELECT a.settlement_id, s.bank, a.consent_id, coalesce(s.consent_status, ''), a.status, a.state,
		       s.amount_cents, s.currency, s.beneficiary, coalesce(a.error, ''), a.callbacks, a.created_at
		FROM consent_authorisations a JOIN settlements s USING (settlement_id)
		WHERE a.status <> 'authorised' AND s.state = 'pending' AND s.first_attempt_at IS NULL
		  AND NOT s.needs_investigation
		ORDER BY a.created_at, a.settlement_id
		LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("error listing the authorisations awaited: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Authorisation, error) {
		var a Authorisation
		err := row.Scan(&a.SettlementID, &a.Bank, &a.ConsentID, &a.ConsentStatus, &a.Status, &a.State,
			&a.AmountCents, &a.Currency, &a.Beneficiary, &a.Error, &a.Callbacks, &a.CreatedAt)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("error listing the authorisations awaited: %w", err)
	}
	return out, nil
}

// AuthorisationLink is the link to send the account holder for a, its
// bank sending them back to redirectURI.
func (r *Resolver) AuthorisationLink(a Authorisation, redirectURI string) (string, error) {
	au, err := r.authoriser()
	if err != nil {
		return "", err
	}
	return au.AuthorisationURL(a.ConsentID, a.State, redirectURI)
}

// Redirect is what a redirect back from the account holder's bank did.
type Redirect struct {
	SettlementID string
	Bank         string
	ConsentID    string
	// Status is the authorisation's status afterwards.
	Status string
	// Replayed is true when the authorisation was complete already:
	// nothing was asked of the bank and nothing changed.
	Replayed bool
}

// findAuthorisation reads the authorisation of state.
func (r *Resolver) findAuthorisation(ctx context.Context, state string) (Redirect, error) {
	var rd Redirect
	err := r.DB.QueryRow(ctx, `
		UPDATE consent_authorisations a SET callbacks = callbacks + 1
		FROM settlements s
		WHERE a.state = $1 AND s.settlement_id = a.settlement_id
		RETURNING a.settlement_id, s.bank, a.consent_id, a.status`, state).
		Scan(&rd.SettlementID, &rd.Bank, &rd.ConsentID, &rd.Status)
	if errors.Is(err, pgx.ErrNoRows) || state == "" {
		return Redirect{}, ErrUnknownAuthorisation
	}
	if err != nil {
		return Redirect{}, fmt.Errorf("error reading an authorisation: %w", err)
	}
	if r.BankName != "" && rd.Bank != r.BankName {
		return Redirect{}, &WrongBankError{SettlementID: rd.SettlementID, Bank: rd.Bank, Served: r.BankName}
	}
	return rd, nil
}

// AuthorisationBank returns the bank of the authorisation of state, so
// that the caller can pick that bank's Resolver; ErrUnknownAuthorisation
// when settle started none under it.
func AuthorisationBank(ctx context.Context, db DB, state string) (string, error) {
	var bank string
	err := db.QueryRow(ctx, `
		SELECT s.bank FROM consent_authorisations a JOIN settlements s USING (settlement_id)
		WHERE a.state = $1`, state).Scan(&bank)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrUnknownAuthorisation
	}
	if err != nil {
		return "", fmt.Errorf("error reading an authorisation: %w", err)
	}
	return bank, nil
}

// CompleteAuthorisation handles the redirect of an account holder who
// authorised: the code is exchanged for their token (PKCE, with the
// verifier of the consent and state), which is stored sealed. The caller
// then has the settlement checked (the payment is claimed by the job, as
// ever). redirectURI must be the one of the link. Errors:
// ErrUnknownAuthorisation for a state settle never issued (nothing is
// asked of the bank); a bankclient refusal (IsRejected) for a code the
// bank does not take (spent, expired, another's): the link stays listed;
// an ambiguous one when the bank's answer was lost: the code may be spent,
// and the account holder opens the link again.
func (r *Resolver) CompleteAuthorisation(ctx context.Context, state, code, redirectURI string) (Redirect, error) {
	rd, err := r.findAuthorisation(ctx, state)
	if err != nil {
		return Redirect{}, err
	}
	log := r.log().With(slog.String("settlement_id", rd.SettlementID), slog.String("consent_id", rd.ConsentID))
	if rd.Status == AuthorisationAuthorised {
		log.LogAttrs(ctx, slog.LevelInfo, "authorisation: redirect again, the token is kept already: nothing done")
		rd.Replayed = true
		return rd, nil
	}
	au, err := r.authoriser()
	if err != nil {
		return Redirect{}, err
	}
	att, err := r.tokenAttempt(ctx, rd.SettlementID, bankclient.OpToken)
	if err != nil {
		return Redirect{}, err
	}
	g, err := au.ExchangeCode(ctx, rd.ConsentID, state, code, redirectURI)
	crash.Point(crash.AuthoriseAfterBank)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	r.finishTokenAttempt(rctx, att, err)
	if err != nil {
		_, xerr := r.DB.Exec(rctx, `
			UPDATE consent_authorisations SET error = left($2, 500), updated_at = $3
			WHERE state = $1 AND status <> 'authorised'`, state, "the bank did not exchange the code: "+err.Error(), r.now())
		log.LogAttrs(ctx, slog.LevelWarn, "authorisation: code not exchanged", slog.String("error", err.Error()),
			slog.Bool("refused", bankclient.IsRejected(err)))
		if xerr != nil {
			return Redirect{}, errors.Join(err, xerr)
		}
		return rd, fmt.Errorf("error exchanging the authorisation code of settlement %s: %w", rd.SettlementID, err)
	}
	now := r.now()
	tag, err := r.DB.Exec(rctx, `
		UPDATE consent_authorisations
		SET status = 'authorised', grant_sealed = $2, token_expires_at = $3, authorised_at = $4, updated_at = $4, error = NULL
		WHERE state = $1 AND status <> 'authorised'`, state, g.Sealed, nullTime(g.ExpiresAt), now)
	if err != nil {
		return Redirect{}, fmt.Errorf("error storing the account holder's token of settlement %s: %w", rd.SettlementID, err)
	}
	crash.Point(crash.AuthoriseAfterCommit)
	if tag.RowsAffected() == 0 {
		// Another redirect stored one first; ours is not needed.
		rd.Replayed = true
	}
	rd.Status = AuthorisationAuthorised
	log.LogAttrs(ctx, slog.LevelInfo, "authorisation: the account holder's token is kept", slog.Bool("replayed", rd.Replayed))
	return rd, nil
}

// RefuseAuthorisation handles the redirect of an account holder who did
// not authorise (RFC 6749 section 4.1.2.1: error, error_description):
// access_denied marks the authorisation rejected; any error is recorded.
// The settlement does not move: the caller has it checked, and the bank's
// word about the consent (Rejected) fails it.
func (r *Resolver) RefuseAuthorisation(ctx context.Context, state, code, description string) (Redirect, error) {
	rd, err := r.findAuthorisation(ctx, state)
	if err != nil {
		return Redirect{}, err
	}
	if rd.Status == AuthorisationAuthorised {
		rd.Replayed = true
		return rd, nil
	}
	msg := bankclient.Sanitize(code)
	if description != "" {
		msg += ": " + bankclient.Sanitize(description)
	}
	err = r.DB.QueryRow(ctx, `
		UPDATE consent_authorisations
		SET status = CASE WHEN $2 THEN 'rejected' ELSE status END, error = left($3, 500), updated_at = $4
		WHERE state = $1 AND status <> 'authorised'
		RETURNING status`, state, code == "access_denied", "the account holder's bank answered "+msg, r.now()).Scan(&rd.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		rd.Status, rd.Replayed = AuthorisationAuthorised, true
		return rd, nil
	}
	if err != nil {
		return Redirect{}, fmt.Errorf("error recording the refusal of settlement %s: %w", rd.SettlementID, err)
	}
	r.log().LogAttrs(ctx, slog.LevelInfo, "authorisation: the account holder did not authorise",
		slog.String("settlement_id", rd.SettlementID), slog.String("error", msg))
	return rd, nil
}
