package fakebank

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/settlement"
)

// The obie profile serves the books through UK Open Banking's domestic
// payments, v3.1.11 (../shared/specs/obie-*: the OpenAPI document
// obie-payment-initiation-3.1.11.yaml and the read-write data and payment
// initiation profiles), under the document's server base path obieBase:
//
//   - POST /domestic-payment-consents (OBWriteDomesticConsent4 →
//     201 OBWriteDomesticConsentResponse5): a consent, AwaitingAuthorisation
//     until consent_delay_ms has passed, then Authorised (or Rejected at
//     consent_reject_rate, or as POST /admin/consents/{id}/authorise|reject
//     decide); Consumed once a payment is made under it;
//   - GET /domestic-payment-consents/{ConsentId};
//   - POST /domestic-payments (OBWriteDomestic2 → 201
//     OBWriteDomesticResponse5): only with the access token the code
//     flow issued for the consent it names, under an Authorised consent
//     whose Initiation and Risk are the request's;
//   - GET /domestic-payments/{DomesticPaymentId}.
//
// Both POSTs are idempotent as the read-write profile's "Idempotency"
// says: x-idempotency-key is mandatory, 1 to 40 printable characters with
// no white space at either end (400 otherwise); the same key and body
// within 24 hours (key_ttl_ms when set) answer 201 with the current
// resource and create nothing; the same key with another body is refused
// with 400 (UK.OBIE.Header.Invalid at path
// x-idempotency-key: the profile says only that the ASPSP must not modify
// the resource and may treat it as fraud, and its document declares no
// other 4xx for these operations). Payment keys and consent keys are
// apart.
//
// A payment's EndToEndIdentification is the settlement reference the
// books count payments by (max_payments_per_reference). Its status is
// Pending for the first half of settle_delay_ms, then
// AcceptedSettlementInProcess, then AcceptedSettlementCompleted (the
// debtor's account is debited: the statements book it) for another half,
// then AcceptedCreditSettlementCompleted; a payment refused at
// reject_rate is Rejected at once, one failing at settlement_failure_rate
// is Rejected once settle_delay_ms has passed. A payment that comes back
// (return_rate, Bank.Return) keeps its settled status: Open Banking
// reports returns only on statements (GET /v1/statements/{date}), where
// its EndToEndId is the EndToEndIdentification.
//
// Every request needs Authorization, a bearer token (401 without one):
// the payment POST the account holder's token for its consent
// (obieauth.go), every other request any bearer token. Every
// POST needs Content-Type application/json (415), x-idempotency-key and
// x-jws-signature (400 UK.OBIE.Header.Missing and
// UK.OBIE.Signature.Missing), and with Options.JWSPublicKey the signature
// is verified (400 UK.OBIE.Signature.*, nothing created). Every answer
// plays back x-fapi-interaction-id (a new UUID when the request has none)
// and every body is signed (x-jws-signature) with the bank's key. Every
// error with a body is an OBErrorResponse1; an id the bank does not hold
// is 400 UK.OBIE.Resource.NotFound, as the profile's "400 (Bad Request)
// v/s 404 (Not Found)" requires. Simulated server faults (fail_before_rate,
// drop_response_rate's half that answers, status_error_rate) are 500
// UK.OBIE.UnexpectedError, the only 5xx the document declares.

// obieBase is the base path of the OpenAPI document's servers.
const obieBase = "/open-banking/v3.1/pisp"

// The headers of the read-write profile.
const (
	HeaderInteractionID = "x-fapi-interaction-id"
	HeaderOBIdempotency = "x-idempotency-key"
	maxOBIdempotencyKey = 40
	obKeyTTL            = 24 * time.Hour
)

// OBIEDebtorAccount is the account (sort code and account number) the
// obie profile pays from when the TPP leaves the debtor account to the
// customer, as settle does: its statements are for this account.
const OBIEDebtorAccount = "60161331926819"

// notPrintable reports whether r has no place in a header value.
func notPrintable(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }

// obIdempotencyKey is the document's pattern for x-idempotency-key: no
// leading or trailing white space.
var obIdempotencyKey = regexp.MustCompile(`^\S(.*\S)?$`)

func (b *Bank) obieRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+obieBase+"/domestic-payment-consents", b.handleOBCreateConsent)
	mux.HandleFunc("GET "+obieBase+"/domestic-payment-consents/{ConsentId}", b.handleOBGetConsent)
	mux.HandleFunc("POST "+obieBase+"/domestic-payments", b.handleOBCreatePayment)
	mux.HandleFunc("GET "+obieBase+"/domestic-payments/{DomesticPaymentId}", b.handleOBGetPayment)
}

// obieInteraction plays back x-fapi-interaction-id on every answer, or
// sets a new UUID.
func (b *Bank) obieInteraction(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderInteractionID)
		if id == "" || len(id) > 128 {
			id = uuid.NewString()
		}
		w.Header().Set(HeaderInteractionID, id)
		next.ServeHTTP(w, r)
	})
}

// writeOB answers status with v as JSON, signed.
func (b *Bank) writeOB(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		b.log.Error("fakebank: error encoding an answer", "error", err)
		status, data = http.StatusInternalServerError, []byte(`{"Code":"500 InternalServerError","Message":"could not encode the answer","Errors":[{"ErrorCode":"UK.OBIE.UnexpectedError","Message":"could not encode the answer"}]}`)
	}
	if sig, err := SignDetachedJWS(b.signKey, obKeyID, obIssuer, b.now(), data); err == nil {
		w.Header().Set(HeaderJWSSignature, sig)
	} else {
		b.log.Error("fakebank: error signing an answer", "error", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// writeOBError answers an OBErrorResponse1 with one error.
func (b *Bank) writeOBError(w http.ResponseWriter, status int, e OBError) {
	b.writeOB(w, status, OBErrorResponse{
		Code:    fmt.Sprintf("%d %s", status, strings.ReplaceAll(http.StatusText(status), " ", "")),
		ID:      uuid.NewString(),
		Message: http.StatusText(status),
		Errors:  []OBError{e},
	})
}

// writeOBFieldError answers 400 for a refused request.
func (b *Bank) writeOBFieldError(w http.ResponseWriter, err error) {
	var fe *obFieldError
	if !errors.As(err, &fe) {
		fe = &obFieldError{OBError{ErrorCode: OBFieldInvalid, Message: err.Error()}}
	}
	if len(fe.Message) > 500 {
		fe.Message = fe.Message[:500]
	}
	b.writeOBError(w, http.StatusBadRequest, fe.OBError)
}

// obieCommon runs what every request goes through first: the latency
// fault, the bearer token (401 without a body, as the profile says) and
// Accept (406). It reports whether to go on.
func (b *Bank) obieCommon(w http.ResponseWriter, r *http.Request, f Faults) bool {
	if !b.sleep(r.Context(), b.latency(f.LatencyMinMS, f.LatencyMaxMS)) {
		b.writeOBError(w, http.StatusInternalServerError, OBError{ErrorCode: OBUnexpectedError, Message: "request cancelled"})
		return false
	}
	auth := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(auth, "Bearer "); !ok || strings.TrimSpace(tok) == "" {
		w.WriteHeader(http.StatusUnauthorized)
		return false
	}
	if !acceptsJSON(r.Header.Get("Accept")) {
		w.WriteHeader(http.StatusNotAcceptable)
		return false
	}
	return true
}

// acceptsJSON reports whether an Accept header allows application/json.
func acceptsJSON(accept string) bool {
	if accept == "" {
		return true
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" {
			continue
		}
		switch mt {
		case "application/json", "application/*", "*/*":
			return true
		}
	}
	return false
}

// obiePost reads what both POSTs share after obieCommon: Content-Type,
// x-idempotency-key, the body and its signature, decoded strictly into v.
// On failure it has answered.
func (b *Bank) obiePost(w http.ResponseWriter, r *http.Request, v any) (key string, ok bool) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		w.WriteHeader(http.StatusUnsupportedMediaType)
		return "", false
	}
	key = r.Header.Get(HeaderOBIdempotency)
	switch {
	case key == "":
		b.writeOBFieldError(w, fieldErr(OBHeaderMissing, HeaderOBIdempotency, "%s is mandatory on this POST", HeaderOBIdempotency))
		return "", false
	case len([]rune(key)) > maxOBIdempotencyKey || !obIdempotencyKey.MatchString(key) || strings.IndexFunc(key, notPrintable) >= 0:
		b.writeOBFieldError(w, fieldErr(OBHeaderInvalid, HeaderOBIdempotency,
			"%s must be 1 to %d printable characters without spaces at either end", HeaderOBIdempotency, maxOBIdempotencyKey))
		return "", false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		b.writeOBFieldError(w, fieldErr(OBResourceInvalidFormat, "", "the body could not be read or is over %d bytes", MaxBodyBytes))
		return "", false
	}
	sig := r.Header.Get(HeaderJWSSignature)
	if sig == "" {
		b.writeOBFieldError(w, fieldErr(OBSignatureMissing, HeaderJWSSignature, "this POST must be signed (%s)", HeaderJWSSignature))
		return "", false
	}
	if b.verifyKey != nil {
		if err := VerifyDetachedJWS(sig, body, b.verifyKey, b.now()); err != nil {
			b.log.Debug("fakebank: signature refused", "key", key, "error", err)
			b.writeOBFieldError(w, err)
			return "", false
		}
	}
	if err := decodeOB(body, v); err != nil {
		b.writeOBFieldError(w, err)
		return "", false
	}
	return key, true
}

// decodeOB decodes one JSON object strictly: unknown fields, trailing
// data and anything but an object are refused.
func decodeOB(body []byte, v any) error {
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return fieldErr(OBResourceInvalidFormat, "", "the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fieldErr(OBFieldInvalid, te.Field, "%s must be a JSON %s", te.Field, jsonType(te.Type.Kind()))
		}
		// encoding/json reports an unknown field only in its message.
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fieldErr(OBFieldUnexpected, strings.Trim(name, `"`), "the document does not define %s here", name)
		}
		return fieldErr(OBResourceInvalidFormat, "", "invalid JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fieldErr(OBResourceInvalidFormat, "", "data after the JSON object")
	}
	return nil
}

// jsonType names the JSON type a Go kind decodes from.
func jsonType(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map, reflect.Pointer, reflect.Interface:
		return "object"
	}
	return "number"
}

// obieFault answers 500 for a simulated server fault.
func (b *Bank) obieFault(w http.ResponseWriter, msg string) {
	b.writeOBError(w, http.StatusInternalServerError, OBError{ErrorCode: OBUnexpectedError, Message: msg})
}

// obieDrop loses the answer to a processed request: half of the time the
// connection closes without a word, otherwise a 500.
func (b *Bank) obieDrop(w http.ResponseWriter, key string) {
	if b.hangUp(w, key) {
		return
	}
	b.log.Debug("fakebank: fault drop_response (500)", "key", key)
	b.obieFault(w, "simulated by drop_response_rate")
}

// selfURL is the absolute URL of a resource, for Links.Self.
func selfURL(r *http.Request, path string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + obieBase + path
}

func obTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// obieCreate starts a POST that creates a resource: the common checks,
// the fail_before_rate fault, then the body decoded into v under its
// idempotency key (see obiePost). It returns the faults the rest of the
// request runs under, and false when it has answered.
func (b *Bank) obieCreate(w http.ResponseWriter, r *http.Request, v any) (f Faults, key string, ok bool) {
	f = b.Faults()
	if !b.obieCommon(w, r, f) {
		return f, "", false
	}
	if b.chance(f.FailBeforeRate) {
		b.obieFault(w, "simulated by fail_before_rate")
		return f, "", false
	}
	key, ok = b.obiePost(w, r, v)
	return f, key, ok
}

func (b *Bank) handleOBCreateConsent(w http.ResponseWriter, r *http.Request) {
	var req obConsentRequest
	f, key, ok := b.obieCreate(w, r, &req)
	if !ok {
		return
	}
	if _, err := req.check(); err != nil {
		b.writeOBFieldError(w, err)
		return
	}
	out := b.createConsent(key, canonical(req), obKeyTTL)
	if err := b.persist(out.version); err != nil {
		b.log.Error("fakebank: error writing state", "error", err)
		b.obieFault(w, "could not record the consent")
		return
	}
	if out.keyReuse {
		b.log.Debug("fakebank: consent idempotency key reused with another body", "key", key)
		b.writeOBFieldError(w, fieldErr(OBHeaderInvalid, HeaderOBIdempotency, "this %s was used with another request body", HeaderOBIdempotency))
		return
	}
	b.log.Debug("fakebank: consent", "key", key, "seq", out.seq, "replayed", out.replayed)
	if b.chance(f.DropResponseRate) {
		b.obieDrop(w, key)
		return
	}
	resp, _ := b.consentResponse(r, consentID(out.seq))
	b.writeOB(w, http.StatusCreated, resp)
}

// consentResponse renders the consent id as it stands now.
func (b *Bank) consentResponse(r *http.Request, id string) (obConsentResponse, bool) {
	b.mu.Lock()
	c := b.books.consentByID(id)
	if c == nil {
		b.mu.Unlock()
		return obConsentResponse{}, false
	}
	st, at := c.statusAt(b.books, b.now().UTC())
	created, body := c.CreatedAt, c.Body
	b.mu.Unlock()
	var req obConsentRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		b.log.Error("fakebank: a stored consent does not decode", "id", id, "error", err)
	}
	var out obConsentResponse
	out.Data.ConsentID = id
	out.Data.CreationDateTime = obTime(created)
	out.Data.Status = st
	out.Data.StatusUpdateDateTime = obTime(at)
	out.Data.ReadRefundAccount = req.Data.ReadRefundAccount
	out.Data.Initiation = req.Data.Initiation
	out.Data.Authorisation = req.Data.Authorisation
	out.Data.SCASupportData = req.Data.SCASupportData
	out.Risk = req.Risk
	out.Links.Self = selfURL(r, "/domestic-payment-consents/"+id)
	return out, true
}

func (b *Bank) handleOBGetConsent(w http.ResponseWriter, r *http.Request) {
	obieGet(b, w, r, "ConsentId", "consent", b.consentResponse)
}

// obieGet answers a GET of one resource, named by the path value param:
// the common checks, the status_error_rate fault, then the resource find
// gives, or UK.OBIE.Resource.NotFound naming it as what.
func obieGet[T any](b *Bank, w http.ResponseWriter, r *http.Request, param, what string, find func(*http.Request, string) (T, bool)) {
	f := b.Faults()
	if !b.obieCommon(w, r, f) {
		return
	}
	if b.chance(f.StatusErrorRate) {
		b.obieFault(w, "simulated by status_error_rate")
		return
	}
	id := r.PathValue(param)
	resp, ok := find(r, id)
	if !ok {
		b.writeOBFieldError(w, fieldErr(OBResourceNotFound, param, "no %s %q", what, sanitizeID(id)))
		return
	}
	b.writeOB(w, http.StatusOK, resp)
}

// obiePaymentOutcome is the decision about one payment request.
type obiePaymentOutcome struct {
	seq      int64
	replayed bool
	refusal  error // 400, nothing created
	token    *errTokenRefused
	version  uint64
}

var errOBKeyReuse = fieldErr(OBHeaderInvalid, HeaderOBIdempotency, "this %s was used with another request body", HeaderOBIdempotency)

// obiePay decides a payment request under key: a replay within the key's
// window answers the payment made first (whatever became of its consent),
// another body under the key is refused; otherwise the consent must be
// Authorised and agree with the request's Initiation and Risk, and the
// payment is made (Rejected at once at reject_rate), consuming the
// consent.
func (b *Bank) obiePay(key, bearer string, req bankclient.PaymentRequest, body string, pr *obPaymentRequest) obiePaymentOutcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now().UTC()
	bk := b.books
	// The token first: a request the bank does not authorise is not
	// looked at, replays included.
	if refused := b.checkPaymentToken(bearer, bk.consentByID(pr.Data.ConsentID), now); refused != nil {
		return obiePaymentOutcome{token: refused}
	}
	if e := bk.lookup(key, now); e != nil {
		b.version++
		if e.Params != body {
			bk.keyReuseConflicts++
			return obiePaymentOutcome{refusal: errOBKeyReuse, version: b.version}
		}
		bk.replays++
		return obiePaymentOutcome{seq: e.PaymentSeq, replayed: true, version: b.version}
	}
	c := bk.consentByID(pr.Data.ConsentID)
	if c == nil {
		return obiePaymentOutcome{refusal: fieldErr(OBResourceNotFound, "Data.ConsentId", "no consent %q", sanitizeID(pr.Data.ConsentID))}
	}
	if st, _ := c.statusAt(bk, now); st != ConsentAuthorised {
		return obiePaymentOutcome{refusal: fieldErr(OBResourceInvalidConsent, "Data.ConsentId", "the consent is %s, not Authorised", st)}
	}
	var cr obConsentRequest
	if err := json.Unmarshal([]byte(c.Body), &cr); err != nil || canonical(cr.Data.Initiation) != canonical(pr.Data.Initiation) {
		return obiePaymentOutcome{refusal: fieldErr(OBResourceConsentMismatch, "Data.Initiation", "the Initiation is not the consent's")}
	}
	if canonical(cr.Risk) != canonical(pr.Risk) {
		return obiePaymentOutcome{refusal: fieldErr(OBResourceConsentMismatch, "Risk", "the Risk is not the consent's")}
	}
	e := &keyEntry{Key: key, Request: req, Params: body, FirstSeen: now, ExpiresAt: keyExpiry(b.faults.KeyTTLMS, obKeyTTL, now)}
	var p *payment
	if b.chance(b.faults.RejectRate) {
		seq := int64(len(bk.payments)) + 1
		p = &payment{Seq: seq, ID: paymentID(seq), IdempotencyKey: key, Request: req, CreatedAt: now, DueAt: now,
			Outcome: bankclient.StatusFailed, FailureReason: reasonDeclined, Params: body}
	} else {
		p = b.newPayment(key, req, body, now)
	}
	p.ConsentSeq = c.Seq
	bk.addPayment(p, e)
	b.changed(p, now)
	c.PaymentSeq = p.Seq
	b.version++
	return obiePaymentOutcome{seq: p.Seq, version: b.version}
}

// booksRequest maps a payment request onto the books' request: the
// EndToEndIdentification is the reference, the creditor account is written
// as settle's beneficiary (SortCodeAccountNumber:…:NAME or IBAN:…:NAME),
// the debtor account is the PSU's (a fixed one when the TPP leaves it to
// the customer).
func booksRequest(in *obInitiation, minor int64) bankclient.PaymentRequest {
	debtor := OBIEDebtorAccount
	if in.DebtorAccount != nil {
		debtor = in.DebtorAccount.Identification
	}
	return bankclient.PaymentRequest{
		AmountCents:     minor,
		Currency:        in.InstructedAmount.Currency,
		DebtorAccount:   debtor,
		CreditorAccount: strings.TrimPrefix(in.CreditorAccount.SchemeName, "UK.OBIE.") + ":" + in.CreditorAccount.Identification + ":" + in.CreditorAccount.Name,
		Reference:       in.EndToEndIdentification,
	}
}

func (b *Bank) handleOBCreatePayment(w http.ResponseWriter, r *http.Request) {
	var pr obPaymentRequest
	f, key, ok := b.obieCreate(w, r, &pr)
	if !ok {
		return
	}
	minor, err := pr.check()
	if err != nil {
		b.writeOBFieldError(w, err)
		return
	}
	req := booksRequest(pr.Data.Initiation, minor)
	out := b.obiePay(key, bearerToken(r), req, canonical(pr), &pr)
	if err := b.persist(out.version); err != nil {
		b.log.Error("fakebank: error writing state", "error", err)
		b.obieFault(w, "could not record the payment")
		return
	}
	if out.token != nil {
		b.log.Debug("fakebank: payment refused for its token", "key", key, "reference", req.Reference, "status", out.token.status, "error", out.token.obErr.Message)
		if out.token.status == http.StatusUnauthorized {
			// "without any error response"
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		b.writeOBError(w, out.token.status, out.token.obErr)
		return
	}
	if out.refusal != nil {
		b.log.Debug("fakebank: payment refused", "key", key, "reference", req.Reference, "error", out.refusal)
		b.writeOBFieldError(w, out.refusal)
		return
	}
	b.log.Debug("fakebank: domestic payment", "key", key, "reference", req.Reference, "seq", out.seq, "replayed", out.replayed)
	if b.chance(f.DropResponseRate) {
		b.obieDrop(w, key)
		return
	}
	resp, _ := b.paymentResponse(r, paymentID(out.seq))
	b.writeOB(w, http.StatusCreated, resp)
}

// The payment statuses of OBWriteDomesticResponse5.
const (
	OBPending                           = "Pending"
	OBAcceptedSettlementInProcess       = "AcceptedSettlementInProcess"
	OBAcceptedSettlementCompleted       = "AcceptedSettlementCompleted"
	OBAcceptedCreditSettlementCompleted = "AcceptedCreditSettlementCompleted"
	OBRejected                          = "Rejected"
)

// obieStatus is a payment's status at now and when it last changed. A
// return does not show: it keeps its settled status.
func obieStatus(p *payment, now time.Time) (string, time.Time) {
	d := p.DueAt.Sub(p.CreatedAt)
	mid := p.CreatedAt.Add(d / 2)
	switch {
	case now.Before(mid):
		return OBPending, p.CreatedAt
	case now.Before(p.DueAt):
		return OBAcceptedSettlementInProcess, mid
	case p.Outcome != bankclient.StatusSettled:
		return OBRejected, p.DueAt
	}
	credit := p.DueAt.Add(d / 2)
	if now.Before(credit) {
		return OBAcceptedSettlementCompleted, p.DueAt
	}
	return OBAcceptedCreditSettlementCompleted, credit
}

// paymentResponse renders the payment id as it stands now.
func (b *Bank) paymentResponse(r *http.Request, id string) (obPaymentResponse, bool) {
	b.mu.Lock()
	p := b.books.byID(id)
	if p == nil || p.ConsentSeq == 0 {
		b.mu.Unlock()
		return obPaymentResponse{}, false
	}
	st, at := obieStatus(p, b.now().UTC())
	created, body, cid := p.CreatedAt, p.Params, consentID(p.ConsentSeq)
	b.mu.Unlock()
	var pr obPaymentRequest
	if err := json.Unmarshal([]byte(body), &pr); err != nil {
		b.log.Error("fakebank: a stored payment does not decode", "id", id, "error", err)
	}
	var out obPaymentResponse
	out.Data.DomesticPaymentID = id
	out.Data.ConsentID = cid
	out.Data.CreationDateTime = obTime(created)
	out.Data.Status = st
	out.Data.StatusUpdateDateTime = obTime(at)
	out.Data.Initiation = pr.Data.Initiation
	out.Links.Self = selfURL(r, "/domestic-payments/"+id)
	return out, true
}

func (b *Bank) handleOBGetPayment(w http.ResponseWriter, r *http.Request) {
	obieGet(b, w, r, "DomesticPaymentId", "domestic payment", b.paymentResponse)
}

// FormatOBAmount writes minor units of currency as an Open Banking
// decimal amount, exactly by its ISO 4217 exponent.
func FormatOBAmount(minor int64, currency string) (string, error) {
	cur, err := settlement.LookupCurrency(currency)
	if err != nil {
		return "", err
	}
	return formatOBAmount(minor, cur.Exponent), nil
}
