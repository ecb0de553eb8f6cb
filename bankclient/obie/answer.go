package obie

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/obie/obwire"
	"github.com/settle/settle/internal/retryafter"
)

// statuses maps the Status of a domestic payment (OBWriteDomesticResponse5,
// OBTransactionIndividualStatus1Code; payment initiation profile, Static
// Enumerations; domestic payments, State Model) onto settle's:
//
//	Pending                            "pending. Further checks and status update will be performed"  → processing
//	AcceptedSettlementInProcess        "accepted for execution"                                       → processing
//	AcceptedWithoutPosting             "accepted without being posted to the creditor customer's
//	                                    account"                                                      → processing
//	AcceptedSettlementCompleted        "Settlement on the debtor's account has been completed"         → settled
//	AcceptedCreditSettlementCompleted  "Settlement on the creditor's account has been completed"       → settled (final)
//	Rejected                           "has been rejected"                                            → failed
//
// AcceptedCreditSettlementCompleted is the one treated as final: the money
// has reached the creditor's account. AcceptedSettlementCompleted is
// settled for settle's books because it says our (the debtor's) account
// has been debited, which is what the payout movement records; but the
// profile warns: "this status is provided for transaction status reasons,
// not for financial information. It can only be used after bilateral
// agreement. PISPs must not use this status as confirmation that
// settlement is complete on the creditor's account." A payment that
// fails on the creditor's side after it comes back as a return, and Open
// Banking reports returns only on statements (ReturnsOnStatementsOnly):
// statement matching, not this status, is the last word.
//
// A status not in the table is not definitive: the payment exists (the
// bank gave its id), so it is reported as accepted, never settled or
// failed.
var statuses = map[string]bankclient.Status{
	"Pending":                           bankclient.StatusProcessing,
	"AcceptedSettlementInProcess":       bankclient.StatusProcessing,
	"AcceptedWithoutPosting":            bankclient.StatusProcessing,
	"AcceptedSettlementCompleted":       bankclient.StatusSettled,
	"AcceptedCreditSettlementCompleted": bankclient.StatusSettled,
	"Rejected":                          bankclient.StatusFailed,
}

// PaymentStatus maps a domestic payment's Status (see statuses); a code
// it does not know is StatusAccepted, which is not final.
func PaymentStatus(code string) bankclient.Status {
	if st, ok := statuses[code]; ok {
		return st
	}
	return bankclient.StatusAccepted
}

// consentStatuses maps the Status of a domestic payment consent
// (OBWriteDomesticConsentResponse5) onto settle's.
var consentStatuses = map[string]bankclient.ConsentStatus{
	"AwaitingAuthorisation": bankclient.ConsentAwaiting,
	"Authorised":            bankclient.ConsentAuthorised,
	"Consumed":              bankclient.ConsentConsumed,
	"Rejected":              bankclient.ConsentRejected,
}

// ConsentStatus maps a consent's Status; a code it does not know is
// ConsentUnknown, which is not definitive.
func ConsentStatus(code string) bankclient.ConsentStatus {
	if st, ok := consentStatuses[code]; ok {
		return st
	}
	return bankclient.ConsentUnknown
}

// The OBIE error codes (OBError1.ErrorCode, OpenAPI document) that
// classify a 400 answer to a POST. The profile says of a 400 that "The
// requested operation will not be carried out"; these codes say why, and
// each is a refusal of this request as it stands. Not among them:
// UK.OBIE.Resource.InvalidConsentStatus, the answer to a payment whose
// consent is not Authorised. The consent may be Consumed by a payment made
// under it — ours, sent under this key before the bank forgot the key — so
// it says nothing definite about this settlement's payment, and is
// ambiguous. (The engine POSTs a payment only once it saw its consent
// Authorised; one Rejected since ends flagged for the operator.)
var refusalCodes = map[string]bool{
	"UK.OBIE.Field.Expected":                         true,
	"UK.OBIE.Field.Invalid":                          true,
	"UK.OBIE.Field.InvalidDate":                      true,
	"UK.OBIE.Field.Missing":                          true,
	"UK.OBIE.Field.Unexpected":                       true,
	"UK.OBIE.Header.Invalid":                         true,
	"UK.OBIE.Header.Missing":                         true,
	"UK.OBIE.Resource.ConsentMismatch":               true,
	"UK.OBIE.Resource.InvalidFormat":                 true,
	"UK.OBIE.Resource.NotFound":                      true,
	"UK.OBIE.Rules.AfterCutOffDateTime":              true,
	"UK.OBIE.Unsupported.AccountIdentifier":          true,
	"UK.OBIE.Unsupported.AccountSecondaryIdentifier": true,
	"UK.OBIE.Unsupported.Currency":                   true,
	"UK.OBIE.Unsupported.Frequency":                  true,
	"UK.OBIE.Unsupported.LocalInstrument":            true,
	"UK.OBIE.Unsupported.Scheme":                     true,
}

// signatureCodes are the codes of a request refused for its signature
// ("If the signature fails validation, the ASPSP must respond with a 400
// (Bad Request)"; "must reject any API requests that should be signed but
// do not contain a signature ... with a 400").
var signatureCodes = map[string]bool{
	"UK.OBIE.Signature.Invalid":      true,
	"UK.OBIE.Signature.InvalidClaim": true,
	"UK.OBIE.Signature.Malformed":    true,
	"UK.OBIE.Signature.Missing":      true,
	"UK.OBIE.Signature.MissingClaim": true,
	"UK.OBIE.Signature.Unexpected":   true,
}

// codeResourceNotFound answers a GET of an id the bank does not hold: "the
// ASPSP must respond with a 400 (Bad Request) rather than a 404".
const codeResourceNotFound = "UK.OBIE.Resource.NotFound"

// ErrSignatureRefused is matched (errors.Is) by the refusal of a request
// whose x-jws-signature the bank did not accept (400 with a
// UK.OBIE.Signature.* code). The error is also a definitive
// *bankclient.RejectedError: the bank did nothing with the request. It
// usually means our signing configuration (key, kid, iss, tan) is wrong.
var ErrSignatureRefused = errors.New("the bank refused the request's signature (x-jws-signature)")

// classifyPost classifies an answer to a POST other than 201:
//
//	400, an error names x-idempotency-key       bankclient.ErrKeyReuse: the bank holds another
//	                                            body under the key (the profile fixes no code for
//	                                            it; the Path of the error is what says so)
//	400, a UK.OBIE.Signature.* code             *RejectedError + ErrSignatureRefused
//	400, every code a field/format/rules one    *RejectedError (refusalCodes)
//	400, UnexpectedError, DuplicateReference,   *AmbiguousError, not retried: the bank may hold
//	     InvalidConsentStatus, an unknown code    a payment for this request (DuplicateReference
//	     or no OB error body                      says one exists with our reference; a consent
//	                                            no longer Authorised may be consumed by ours)
//	anything else                               as classifyOther
func classifyPost(a httpAnswer) answer {
	if a.status != http.StatusBadRequest {
		return classifyOther(a)
	}
	er, ok := parseErrors(a)
	if !ok {
		return answer{outcome: bankclient.OutcomeAmbiguous, err: ambiguous(a, "")}
	}
	for _, e := range er.Errors {
		if strings.EqualFold(strings.TrimSpace(e.Path), HeaderIdempotencyKey) {
			return answer{outcome: bankclient.OutcomeKeyReuse, err: fmt.Errorf("%w (%s at %s; %s %s)",
				bankclient.ErrKeyReuse, bankclient.Sanitize(e.ErrorCode), HeaderIdempotencyKey, HeaderInteractionID, a.interactionID)}
		}
	}
	var sig string
	definitive := true
	for _, e := range er.Errors {
		switch {
		case signatureCodes[e.ErrorCode]:
			if sig == "" {
				sig = e.ErrorCode
			}
		case !refusalCodes[e.ErrorCode]:
			definitive = false
		}
	}
	if !definitive {
		return answer{outcome: bankclient.OutcomeAmbiguous, err: ambiguous(a, codes(er))}
	}
	re := &bankclient.RejectedError{StatusCode: a.status, Code: bankclient.Sanitize(er.Errors[0].ErrorCode), Reason: reason(er, a.interactionID)}
	if sig != "" {
		re.Code = sig
		return answer{outcome: bankclient.OutcomeRejected, err: fmt.Errorf("%w: %w", ErrSignatureRefused, re)}
	}
	return answer{outcome: bankclient.OutcomeRejected, err: re}
}

// classifyGet classifies an answer to a GET other than 200: an id the bank
// does not hold (400 UK.OBIE.Resource.NotFound, as the profile requires;
// or 404) is bankclient.ErrPaymentNotFound; any other 400 is ambiguous and
// not retried; the rest as classifyOther.
func classifyGet(a httpAnswer) answer {
	switch a.status {
	case http.StatusNotFound:
		return answer{outcome: bankclient.OutcomeNotFound, err: bankclient.ErrPaymentNotFound}
	case http.StatusBadRequest:
		er, ok := parseErrors(a)
		if ok {
			for _, e := range er.Errors {
				if e.ErrorCode == codeResourceNotFound {
					return answer{outcome: bankclient.OutcomeNotFound, err: bankclient.ErrPaymentNotFound}
				}
			}
		}
		return answer{outcome: bankclient.OutcomeAmbiguous, err: ambiguous(a, codes(er))}
	}
	return classifyOther(a)
}

// classifyOther classifies what means the same for every request:
//
//	401, 403                          ambiguous + bankclient.ErrUnauthorized, not retried
//	429                               ambiguous with its Retry-After, retried (waited out)
//	408, 425, 5xx, an unexpected 2xx  ambiguous, retried
//	anything else (3xx, 404 on a      ambiguous, not retried: configuration, and the bank
//	  POST, 405, 406, 415, …)           may or may not have acted
func classifyOther(a httpAnswer) answer {
	er, _ := parseErrors(a)
	switch {
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
		return answer{outcome: bankclient.OutcomeUnauthorized, err: ambiguous(a, codes(er))}
	case a.status == http.StatusTooManyRequests,
		a.status == http.StatusRequestTimeout,
		a.status == http.StatusTooEarly,
		a.status >= 500,
		a.status >= 200 && a.status < 300:
		return answer{outcome: bankclient.OutcomeAmbiguous, err: ambiguous(a, codes(er)), retry: true}
	}
	return answer{outcome: bankclient.OutcomeAmbiguous, err: ambiguous(a, codes(er))}
}

// ambiguous is the error of an answer that is not definitive, carrying the
// interaction id for the bank's support.
func ambiguous(a httpAnswer, code string) *bankclient.AmbiguousError {
	d, _ := retryafter.Parse(a.header, time.Now())
	return &bankclient.AmbiguousError{
		StatusCode: a.status,
		RetryAfter: d,
		Err:        fmt.Errorf("%w (%s %s)", &bankclient.StatusError{StatusCode: a.status, Code: code}, HeaderInteractionID, a.interactionID),
	}
}

// malformed is the answer to a 2xx whose body is not an answer we can act
// on: ambiguous, and another attempt may help.
func malformed(a httpAnswer, err error) answer {
	return answer{
		outcome: bankclient.OutcomeAmbiguous,
		err: &bankclient.AmbiguousError{StatusCode: a.status,
			Err: fmt.Errorf("%w: %w (%s %s)", bankclient.ErrMalformedResponse, err, HeaderInteractionID, a.interactionID)},
		retry: true,
	}
}

// parseErrors reads an OBErrorResponse1; ok is false when the body is not
// one with at least one error code.
func parseErrors(a httpAnswer) (ErrorResponse, bool) {
	var er ErrorResponse
	if a.tooLarge || bankhttp.CheckJSONKeys(a.body) != nil || json.Unmarshal(a.body, &er) != nil || len(er.Errors) == 0 {
		return ErrorResponse{}, false
	}
	for _, e := range er.Errors {
		if e.ErrorCode == "" {
			return ErrorResponse{}, false
		}
	}
	return er, true
}

// codes lists the error codes of er, for an error's text.
func codes(er ErrorResponse) string {
	cs := make([]string, 0, len(er.Errors))
	for _, e := range er.Errors {
		cs = append(cs, e.ErrorCode)
	}
	return bankclient.Sanitize(strings.Join(cs, ","))
}

// reason is the bank's account of a refusal, for people: each error's
// path and message, and the interaction id. It is never classified on.
func reason(er ErrorResponse, iid string) string {
	parts := make([]string, 0, len(er.Errors))
	for _, e := range er.Errors {
		p := e.ErrorCode
		if e.Path != "" {
			p += " at " + e.Path
		}
		if e.Message != "" {
			p += ": " + e.Message
		}
		parts = append(parts, p)
	}
	return bankclient.Sanitize(HeaderInteractionID + " " + iid + "; " + strings.Join(parts, "; "))
}

// decode decodes body, the answer about a what ("payment"), into a T
// once its keys are checked (bankhttp.CheckJSONKeys).
func decode[T any](body []byte, what string) (T, error) {
	var r T
	if err := bankhttp.CheckJSONKeys(body); err != nil {
		return r, err
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("error decoding the %s: %w", what, err)
	}
	return r, nil
}

// checkResource checks what every answer about a what ("payment") must
// hold: its id, the field idField of at most max characters, an
// Initiation and a Status.
func checkResource(what, idField, id string, maxLen int, status string, in *Initiation) error {
	switch {
	case id == "":
		return fmt.Errorf("%s without %s", what, idField)
	case len(id) > maxLen:
		return fmt.Errorf("%s longer than %d", idField, maxLen)
	case in == nil:
		return fmt.Errorf("%s %s without Initiation", what, bankclient.Sanitize(id))
	case status == "":
		return fmt.Errorf("%s %s without Status", what, bankclient.Sanitize(id))
	}
	return nil
}

// parsePayment reads an OBWriteDomesticResponse5. With consentID and in
// (the answer to our POST), it must be the payment we asked for: that
// consent, that EndToEndIdentification, amount, currency and creditor.
func parsePayment(body []byte, consentID string, in *Initiation) (bankclient.Payment, error) {
	r, err := decode[paymentResponse](body, "payment")
	if err != nil {
		return bankclient.Payment{}, err
	}
	d := r.Data
	if d == nil {
		return bankclient.Payment{}, errors.New("payment without Data")
	}
	if err := checkResource("payment", "DomesticPaymentId", d.DomesticPaymentID, 40, d.Status, d.Initiation); err != nil {
		return bankclient.Payment{}, err
	}
	if consentID != "" && d.ConsentID != consentID {
		return bankclient.Payment{}, fmt.Errorf("payment %s under another consent", bankclient.Sanitize(d.DomesticPaymentID))
	}
	id := bankclient.Sanitize(d.DomesticPaymentID)
	amount, err := echoed(*d.Initiation, in)
	if err != nil {
		return bankclient.Payment{}, fmt.Errorf("payment %s: %w", id, err)
	}
	p := bankclient.Payment{
		ID:              d.DomesticPaymentID,
		Reference:       d.Initiation.EndToEndIdentification,
		Status:          PaymentStatus(d.Status),
		AmountCents:     amount,
		Currency:        d.Initiation.InstructedAmount.Currency,
		CreditorAccount: beneficiaryOf(d.Initiation.CreditorAccount),
		CreatedAt:       parseTime(d.CreationDateTime),
		UpdatedAt:       parseTime(d.StatusUpdateDateTime),
	}
	if d.Debtor != nil {
		p.DebtorAccount = d.Debtor.Identification
	}
	if p.Status == bankclient.StatusFailed {
		p.FailureReason = bankclient.Sanitize(d.Status)
	}
	return p, nil
}

// parseConsent reads an OBWriteDomesticConsentResponse5; with in (the
// answer to our POST), its Initiation must be ours.
func parseConsent(body []byte, in *Initiation) (bankclient.Consent, error) {
	r, err := decode[consentResponse](body, "consent")
	if err != nil {
		return bankclient.Consent{}, err
	}
	d := r.Data
	if d == nil {
		return bankclient.Consent{}, errors.New("consent without Data")
	}
	if err := checkResource("consent", "ConsentId", d.ConsentID, 128, d.Status, d.Initiation); err != nil {
		return bankclient.Consent{}, err
	}
	if _, err := echoed(*d.Initiation, in); err != nil {
		return bankclient.Consent{}, fmt.Errorf("consent %s: %w", bankclient.Sanitize(d.ConsentID), err)
	}
	con := bankclient.Consent{ID: d.ConsentID, Status: ConsentStatus(d.Status), BankStatus: bankclient.Sanitize(d.Status)}
	// The consent must be authorised (and the payment made) before the
	// earlier of the two: the authorisation's CompletionDateTime and the
	// CutOffDateTime (payment initiation profile, Multiple Authorisation
	// and CutOffDateTime Behaviour).
	var deadlines []time.Time
	if d.Authorisation != nil {
		deadlines = append(deadlines, parseTime(d.Authorisation.CompletionDateTime))
	}
	deadlines = append(deadlines, parseTime(d.CutOffDateTime))
	for _, t := range deadlines {
		if !t.IsZero() && (con.ExpiresAt.IsZero() || t.Before(con.ExpiresAt)) {
			con.ExpiresAt = t
		}
	}
	return con, nil
}

// echoed checks the Initiation the bank answered with and returns its
// amount in minor units. With in (ours), it must carry the same
// EndToEndIdentification, amount, currency and creditor account.
func echoed(got Initiation, in *Initiation) (int64, error) {
	amt := got.InstructedAmount
	minor, err := ParseAmount(amt.Amount, amt.Currency)
	if err != nil {
		return 0, fmt.Errorf("InstructedAmount: %w", err)
	}
	if minor <= 0 {
		return 0, fmt.Errorf("InstructedAmount %q is not positive", bankclient.Sanitize(amt.Amount))
	}
	if in == nil {
		return minor, nil
	}
	want, err := ParseAmount(in.InstructedAmount.Amount, in.InstructedAmount.Currency)
	switch {
	case err != nil:
		return 0, err
	case got.EndToEndIdentification != in.EndToEndIdentification:
		return 0, errors.New("another EndToEndIdentification than ours")
	case amt.Currency != in.InstructedAmount.Currency || minor != want:
		return 0, errors.New("another InstructedAmount than ours")
	case got.CreditorAccount.SchemeName != in.CreditorAccount.SchemeName || got.CreditorAccount.Identification != in.CreditorAccount.Identification:
		return 0, errors.New("another CreditorAccount than ours")
	}
	return minor, nil
}

// beneficiaryOf writes a creditor account in settle's beneficiary form.
func beneficiaryOf(a obwire.Account) string {
	scheme := a.SchemeName
	switch scheme {
	case obSchemeSortCode:
		scheme = SchemeSortCode
	case obSchemeIBAN:
		scheme = SchemeIBAN
	}
	return scheme + ":" + a.Identification + ":" + a.Name
}

// createdBefore reports whether the resource in body (a consent or a
// payment) says it was created before t.
func createdBefore(body []byte, t time.Time) bool {
	var r struct {
		Data struct {
			CreationDateTime string `json:"CreationDateTime"`
		} `json:"Data"`
	}
	if json.Unmarshal(body, &r) != nil {
		return false
	}
	c := parseTime(r.Data.CreationDateTime)
	return !c.IsZero() && c.Before(t)
}

// parseTime reads an ISO 8601 date-time with its zone; the zero time when
// it is not one (the dates are informative, never acted on).
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}
