package bankclient

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"
)

// Bank is how the engine reaches the bank. The HTTP [Client] implements it;
// a simulation may implement it in memory. Errors are classified as the
// package documentation describes.
type Bank interface {
	// Send asks the bank to execute req under the idempotency key (see
	// KeyFor). Sending the same key and body again is a replay.
	Send(ctx context.Context, key string, req PaymentRequest) (SendResult, error)
	// StatusByKey returns the payment the bank holds under key, or an error
	// matching ErrNotFound when the bank never saw (or forgot) the key.
	StatusByKey(ctx context.Context, key string) (Payment, error)
	// Statement returns one page of every payment the bank holds, starting
	// after the cursor (empty for the first page). limit 0 lets the bank choose.
	Statement(ctx context.Context, after string, limit int) (StatementPage, error)
}

// IDLookup is implemented by a Bank that looks payments up by its own
// payment id (Capabilities.LookupByID). A payment it does not hold is an
// error matching ErrPaymentNotFound.
type IDLookup interface {
	StatusByID(ctx context.Context, id string) (Payment, error)
}

// ReferenceLookup is implemented by a Bank that looks payments up by the
// reference we sent (Capabilities.LookupByReference). None held is an error
// matching ErrPaymentNotFound.
type ReferenceLookup interface {
	StatusByReference(ctx context.Context, reference string) (Payment, error)
}

// Searcher is implemented by a Bank whose list can be read from a point in
// time (Stripe's created[gte]): a search for a payment whose first attempt
// is known then reads only what was created since, not the whole history.
type Searcher interface {
	// StatementSince is Statement restricted to the payments created at
	// or after since.
	StatementSince(ctx context.Context, since time.Time, after string, limit int) (StatementPage, error)
}

// PaymentsSince is Payments restricted to the payments created at or after
// since, where the bank can (Searcher); elsewhere, or with a zero since,
// every payment.
func PaymentsSince(ctx context.Context, b Bank, since time.Time, limit int) iter.Seq2[Payment, error] {
	s, ok := b.(Searcher)
	if !ok || since.IsZero() {
		return Payments(ctx, b, limit)
	}
	return pages(func(after string) (StatementPage, error) { return s.StatementSince(ctx, since, after, limit) })
}

// ReturnLister is implemented by a Bank that can say, in one call (or a
// few pages), which of the payments created since a point in time have
// come back: the return watch then asks the bank about every watched
// payment at once instead of one payment at a time. A bank that does not
// serve the list (404, 405) answers an error matching ErrUnsupported;
// any other error is classified as Statement's are.
type ReturnLister interface {
	// ReturnedSince returns one page, after the cursor (empty for the
	// first), of the payments created at or after since that the bank
	// now reports as having come back: returned, or (Stripe) failed after
	// they were paid. limit 0 lets the bank choose.
	ReturnedSince(ctx context.Context, since time.Time, after string, limit int) (StatementPage, error)
}

// Returned iterates over every page of l.ReturnedSince(since), limit
// payments a page. Iteration stops at the first error, which is yielded
// with a zero Payment: a list that ends in an error is partial.
func Returned(ctx context.Context, l ReturnLister, since time.Time, limit int) iter.Seq2[Payment, error] {
	return pages(func(after string) (StatementPage, error) { return l.ReturnedSince(ctx, since, after, limit) })
}

// SendResult is the bank's acceptance of a payment.
type SendResult struct {
	// Payment is the payment as the bank reports it.
	Payment Payment
	// Replayed is true when the bank had already seen this key and body and
	// answered with the stored payment (200, Idempotent-Replayed: true). A
	// replay is normal after a lost answer or an in-call retry.
	Replayed bool
}

// The operations, as reported to Options.Observe and in AmbiguousError.Op.
const (
	OpSend      = "send"
	OpStatus    = "status"
	OpStatement = "statement"
	// OpReplay is a Send repeated under the same key to learn what became
	// of the first (recorded in bank_attempts; on the wire it is a send).
	OpReplay = "replay"
	// OpSearch is a search of the bank's list for our reference (recorded
	// in bank_attempts; on the wire it reads the statement).
	OpSearch = "search"
	// OpReturns is a page of the bank's list of returned payments
	// (ReturnLister), read by the return watch.
	OpReturns = "returns"
)

// The outcomes of one HTTP attempt, as reported to Options.Observe.
const (
	OutcomeAccepted     = "accepted"     // 201, or 200 on status and statement
	OutcomeReplayed     = "replayed"     // 200 replay on send
	OutcomeRejected     = "rejected"     // definitive rejection
	OutcomeKeyReuse     = "key_reuse"    // 422 idempotency_key_reuse
	OutcomeNotFound     = "not_found"    // 404 on status by key
	OutcomeUnauthorized = "unauthorized" // 401, 403
	OutcomeAmbiguous    = "ambiguous"    // anything else
)

// ErrCursorLoop is returned by Payments when the bank hands back the cursor it
// was given, which would loop for ever.
var ErrCursorLoop = errors.New("statement cursor did not advance")

// Payments iterates over the whole statement of b, page by page, limit
// payments a page. Iteration stops at the first error, which is yielded with
// a zero Payment.
func Payments(ctx context.Context, b Bank, limit int) iter.Seq2[Payment, error] {
	return pages(func(after string) (StatementPage, error) { return b.Statement(ctx, after, limit) })
}

// pages iterates over the payments of the pages read, starting after the
// empty cursor, until a page has no next cursor.
func pages(read func(after string) (StatementPage, error)) iter.Seq2[Payment, error] {
	return func(yield func(Payment, error) bool) {
		after := ""
		for {
			page, err := read(after)
			if err != nil {
				yield(Payment{}, fmt.Errorf("error reading statement after %q: %w", after, err))
				return
			}
			for _, p := range page.Payments {
				if !yield(p, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			if page.Next == after {
				yield(Payment{}, fmt.Errorf("error reading statement after %q: %w", after, ErrCursorLoop))
				return
			}
			after = page.Next
		}
	}
}

// AllPayments reads the bank's whole statement (see Payments) into a slice.
func AllPayments(ctx context.Context, b Bank) ([]Payment, error) {
	var out []Payment
	for p, err := range Payments(ctx, b, 1000) {
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ConsentStatus is where a bank's consent to one payment stands.
type ConsentStatus string

// The consent statuses, mapped by the connector from the bank's own codes.
const (
	// ConsentAwaiting: created, waiting for the customer to authorise it;
	// the payment must not be sent yet.
	ConsentAwaiting ConsentStatus = "awaiting_authorisation"
	// ConsentAuthorised: the payment may be sent under it.
	ConsentAuthorised ConsentStatus = "authorised"
	// ConsentConsumed: a payment was made under it.
	ConsentConsumed ConsentStatus = "consumed"
	// ConsentRejected: refused by the customer or the bank (or it expired
	// at the bank); no payment can be made under it.
	ConsentRejected ConsentStatus = "rejected"
	// ConsentUnknown: a code the connector does not know; not definitive.
	ConsentUnknown ConsentStatus = "unknown"
)

// Consent is a bank's consent to one payment.
type Consent struct {
	// ID is the bank's consent id (Open Banking's ConsentId).
	ID string
	// Status is the mapped status; BankStatus the bank's own code.
	Status     ConsentStatus
	BankStatus string
	// ExpiresAt is when the bank says the consent must be authorised by
	// (zero: it does not say).
	ExpiresAt time.Time
	// Replayed is true when the bank answered a consent request it had
	// already seen under the same key with the current consent.
	Replayed bool
}

// Consenter is implemented by a Bank whose payments need a consent first
// (Capabilities.Consent). Errors are classified like Send's: a definitive
// refusal matches IsRejected, an answer that is not definitive
// IsAmbiguous.
type Consenter interface {
	// CreateConsent asks for the consent to req under key (ConsentKeyFor);
	// the same key and body again answers with the consent it created.
	CreateConsent(ctx context.Context, key string, req PaymentRequest) (Consent, error)
	// ConsentByID reads a consent by the bank's id; one the bank does not
	// hold matches ErrPaymentNotFound.
	ConsentByID(ctx context.Context, id string) (Consent, error)
}

// The operations of the consent step, recorded in bank_attempts and
// reported to Options.Observe: the consent, and (Authoriser) the token
// requests of the account holder's authorisation.
const (
	OpConsent       = "consent"
	OpConsentStatus = "consent_status"
	OpToken         = "token"
	OpTokenRefresh  = "token_refresh"
)

// Authoriser is implemented by a Bank whose payments are made with the
// account holder's own token (Capabilities.Authorisation, UK Open
// Banking's authorization code grant): the account holder opens a link at
// their bank, authorises the consent there, and is sent back to settle's
// redirect URI with a one-time code, which settle exchanges for the
// account holder's tokens. The connector keeps those tokens sealed
// (encrypted and authenticated with a key of its own): the engine stores
// a Grant and hands it back in PaymentRequest.Grant without ever reading
// it. Errors are classified like Send's: a definitive refusal matches
// IsRejected, an answer that is not definitive IsAmbiguous.
type Authoriser interface {
	// AuthorisationURL is the link for the account holder to authorise
	// consent consentID: it names the consent, redirectURI and state,
	// and a PKCE challenge the connector derives from consentID and state.
	AuthorisationURL(consentID, state, redirectURI string) (string, error)
	// ExchangeCode trades the code the account holder's redirect brought
	// for their tokens (PKCE's verifier derived as for AuthorisationURL).
	ExchangeCode(ctx context.Context, consentID, state, code, redirectURI string) (Grant, error)
	// RefreshGrant gets a new access token for the grant of consentID.
	RefreshGrant(ctx context.Context, consentID string, g Grant) (Grant, error)
}

// Grant is the account holder's authorisation of one consent as the
// connector keeps it.
type Grant struct {
	// Sealed holds the tokens, encrypted and authenticated by the
	// connector and bound to the consent: opaque to the engine, never
	// stored in clear.
	Sealed string
	// ExpiresAt is when its access token expires (zero: the bank did not
	// say).
	ExpiresAt time.Time
	// Refreshable is true when the bank issued a refresh token.
	Refreshable bool
}
