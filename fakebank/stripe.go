package fakebank

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/settle/settle/bankclient"
)

// StripeBalanceAccount is the account the stripe profile pays out from
// when no connected account is named (no Stripe-Account header): its
// statements are for this account.
const StripeBalanceAccount = "stripe_balance"

// The stripe profile serves the books through Stripe's payout API
// (https://docs.stripe.com/api/payouts), as far as settle's Stripe
// connector uses it and as Stripe documents it:
//
//   - POST /v1/payouts, a form body (amount, currency, destination,
//     description, metadata[...], method, statement_descriptor,
//     source_type), under an Idempotency-Key: the same key with other
//     parameters is 400 idempotency_error; the same key and parameters
//     replay the stored original response (the status as it was when the
//     payout was created) with Idempotent-Replayed: true
//     (https://docs.stripe.com/api/idempotent_requests);
//   - GET /v1/payouts/{id}, the payout as it is now;
//   - GET /v1/payouts, newest first, with limit, starting_after,
//     created[gt|gte|lt|lte] and status.
//
// metadata[reference] is the settlement's reference the books count
// payments by (max_payments_per_reference); the Stripe-Account header is
// the debtor account. Errors have Stripe's shape, {"error": {"type",
// "code", "message", "param"}}. A payment that comes back after it was
// paid (Bank.Return) reads paid, then failed.

func (b *Bank) stripeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/payouts", b.handleStripeCreate)
	mux.HandleFunc("GET /v1/payouts/{id}", b.handleStripeRetrieve)
	mux.HandleFunc("GET /v1/payouts", b.handleStripeList)
}

// Stripe's error types.
const (
	stripeAPIError         = "api_error"
	stripeInvalidRequest   = "invalid_request_error"
	stripeIdempotencyError = "idempotency_error"
)

// stripeError is the error object of Stripe's error body.
type stripeError struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Param   string `json:"param,omitempty"`
}

func writeStripeError(w http.ResponseWriter, status int, e stripeError) {
	writeJSON(w, status, struct {
		Error stripeError `json:"error"`
	}{e})
}

// stripeCreateParams are the parameters of POST /v1/payouts the profile
// takes; metadata[...] keys are checked apart.
var stripeCreateParams = []string{"amount", "currency", "destination", "description", "method", "statement_descriptor", "source_type"}

func (b *Bank) handleStripeCreate(w http.ResponseWriter, r *http.Request) {
	f := b.Faults()
	if !b.sleep(r.Context(), b.latency(f.LatencyMinMS, f.LatencyMaxMS)) {
		writeStripeError(w, http.StatusServiceUnavailable, stripeError{Type: stripeAPIError, Message: "request cancelled"})
		return
	}
	key := r.Header.Get(HeaderIdempotencyKey)
	if b.chance(f.FailBeforeRate) {
		b.log.Debug("fakebank: fault fail_before", "key", key)
		writeStripeError(w, http.StatusInternalServerError, stripeError{Type: stripeAPIError, Message: "simulated by fail_before_rate"})
		return
	}
	if !validKey(key) {
		// Stripe takes requests without a key (and makes one up); this
		// bank keeps its books by key, so it wants one.
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Code: "parameter_invalid_string",
			Message: fmt.Sprintf("this fakebank wants an Idempotency-Key of 1 to %d printable ASCII characters", maxKeyLen)})
		return
	}
	form, err := readForm(w, r)
	if err != nil {
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Message: err.Error()})
		return
	}
	req, params, perr := payoutRequest(form, r.Header.Get("Stripe-Account"))
	if perr != nil {
		// Refused before it ran: Stripe keeps no result under the key.
		writeStripeError(w, http.StatusBadRequest, *perr)
		return
	}

	out := b.submitParams(key, req, params)
	if err := b.persist(out.version); err != nil {
		b.log.Error("fakebank: error writing state", "error", err)
		writeStripeError(w, http.StatusInternalServerError, stripeError{Type: stripeAPIError, Message: "could not record the payout"})
		return
	}
	b.logOutcome(key, req, out)
	if b.chance(f.DropResponseRate) {
		b.dropStripeResponse(w, key)
		return
	}
	if out.replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	switch out.kind {
	case outcomeCreated, outcomeReplayed:
		// The original response: the payout as it was created.
		po, _ := b.payout(out.seq, true)
		writeJSON(w, http.StatusOK, po)
	case outcomeRejected:
		code := "parameter_invalid_string"
		if out.reason == reasonDeclined {
			code = "balance_insufficient"
		}
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Code: code, Message: out.reason})
	case outcomeKeyReuse:
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeIdempotencyError,
			Message: "Keys for idempotent requests can only be used with the same parameters they were first used with."})
	}
}

// dropStripeResponse loses the answer to a processed request, as
// dropResponse does, with Stripe's error shape on the 504.
func (b *Bank) dropStripeResponse(w http.ResponseWriter, key string) {
	if b.hangUp(w, key) {
		return
	}
	b.log.Debug("fakebank: fault drop_response (504)", "key", key)
	writeStripeError(w, http.StatusGatewayTimeout, stripeError{Type: stripeAPIError, Message: "simulated by drop_response_rate"})
}

// readForm reads a form body of at most MaxBodyBytes.
func readForm(w http.ResponseWriter, r *http.Request) (url.Values, error) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		return nil, fmt.Errorf("Content-Type must be application/x-www-form-urlencoded, got %q", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return nil, fmt.Errorf("error reading request body: %w", err)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("invalid form body: %w", err)
	}
	return form, nil
}

// payoutRequest maps a payout's parameters onto the books' request, and
// the rest (description, metadata) onto params; a parameter Stripe would
// refuse is a 400 invalid_request_error naming it.
func payoutRequest(form url.Values, account string) (bankclient.PaymentRequest, string, *stripeError) {
	bad := func(param, code, msg string) (bankclient.PaymentRequest, string, *stripeError) {
		return bankclient.PaymentRequest{}, "", &stripeError{Type: stripeInvalidRequest, Code: code, Param: param, Message: msg}
	}
	extra := url.Values{}
	for k, vs := range form {
		if len(vs) != 1 {
			return bad(k, "parameter_invalid_string", "Invalid value for "+k+": given more than once")
		}
		if mk, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(mk, "]") {
			if len(mk) > 41 || len(vs[0]) > 500 {
				return bad(k, "parameter_invalid_string", "Metadata keys have at most 40 characters and values at most 500")
			}
			extra.Set(k, vs[0])
			continue
		}
		if !slices.Contains(stripeCreateParams, k) {
			return bad(k, "parameter_unknown", "Received unknown parameter: "+k)
		}
	}
	amount, err := strconv.ParseInt(form.Get("amount"), 10, 64)
	if err != nil || amount < 1 {
		return bad("amount", "parameter_invalid_integer", "Invalid integer: "+form.Get("amount"))
	}
	cur := form.Get("currency")
	if len(cur) != 3 || strings.ToLower(cur) != cur || !validCurrency(strings.ToUpper(cur)) {
		return bad("currency", "parameter_invalid_string", "Invalid currency: "+cur)
	}
	dest := form.Get("destination")
	if !strings.HasPrefix(dest, "ba_") && !strings.HasPrefix(dest, "card_") {
		return bad("destination", "resource_missing", "No such external account: '"+dest+"'")
	}
	if d := form.Get("description"); d != "" {
		extra.Set("description", d)
	}
	if account == "" {
		account = StripeBalanceAccount
	}
	ref := form.Get("metadata[reference]")
	if ref == "" {
		return bad("metadata[reference]", "parameter_missing", "this fakebank counts payouts by metadata[reference]: it is required")
	}
	return bankclient.PaymentRequest{
		AmountCents:     amount,
		Currency:        strings.ToUpper(cur),
		DebtorAccount:   account,
		CreditorAccount: dest,
		Reference:       ref,
	}, extra.Encode(), nil
}

// stripePayout is a payout object as Stripe renders it (the fields of the
// 2023-08-16 spec's required list, and those the connector reads).
type stripePayout struct {
	ID                        string            `json:"id"`
	Object                    string            `json:"object"`
	Amount                    int64             `json:"amount"`
	ArrivalDate               int64             `json:"arrival_date"`
	Automatic                 bool              `json:"automatic"`
	BalanceTransaction        *string           `json:"balance_transaction"`
	Created                   int64             `json:"created"`
	Currency                  string            `json:"currency"`
	Description               *string           `json:"description"`
	Destination               *string           `json:"destination"`
	FailureBalanceTransaction *string           `json:"failure_balance_transaction"`
	FailureCode               *string           `json:"failure_code"`
	FailureMessage            *string           `json:"failure_message"`
	Livemode                  bool              `json:"livemode"`
	Metadata                  map[string]string `json:"metadata"`
	Method                    string            `json:"method"`
	OriginalPayout            *string           `json:"original_payout"`
	ReconciliationStatus      string            `json:"reconciliation_status"`
	ReversedBy                *string           `json:"reversed_by"`
	SourceType                string            `json:"source_type"`
	StatementDescriptor       *string           `json:"statement_descriptor"`
	Status                    string            `json:"status"`
	Type                      string            `json:"type"`
}

// stripeStatus is the payout status of a payment's status at the bank.
var stripeStatus = map[bankclient.Status]string{
	bankclient.StatusAccepted:   "pending",
	bankclient.StatusProcessing: "in_transit",
	bankclient.StatusSettled:    "paid",
	bankclient.StatusFailed:     "failed",
	bankclient.StatusReturned:   "failed",
}

// payout renders the payment with sequence number seq, as it is now or,
// with original, as it was when created; ok is false when there is none.
func (b *Bank) payout(seq int64, original bool) (stripePayout, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if seq < 1 || seq > int64(len(b.books.payments)) {
		return stripePayout{}, false
	}
	p := b.books.payments[seq-1]
	at := b.now().UTC()
	if original {
		at = p.CreatedAt
	}
	return renderPayout(p, at), true
}

func renderPayout(p *payment, at time.Time) stripePayout {
	v := p.view(at)
	extra, _ := url.ParseQuery(p.Params)
	po := stripePayout{
		ID:                   v.ID,
		Object:               "payout",
		Amount:               v.AmountCents,
		ArrivalDate:          p.DueAt.Unix(),
		Created:              p.CreatedAt.Unix(),
		Currency:             strings.ToLower(v.Currency),
		Destination:          &p.Request.CreditorAccount,
		Metadata:             map[string]string{},
		Method:               "standard",
		ReconciliationStatus: "not_applicable",
		SourceType:           "card",
		Status:               stripeStatus[v.Status],
		Type:                 "bank_account",
	}
	if strings.HasPrefix(p.Request.CreditorAccount, "card_") {
		po.Type = "card"
	}
	txn := "txn_" + strings.TrimPrefix(v.ID, "pay_")
	po.BalanceTransaction = &txn
	for k, vs := range extra {
		if mk, ok := strings.CutPrefix(k, "metadata["); ok {
			po.Metadata[strings.TrimSuffix(mk, "]")] = vs[0]
		}
	}
	if d := extra.Get("description"); d != "" {
		po.Description = &d
	}
	if v.Status == bankclient.StatusFailed || v.Status == bankclient.StatusReturned {
		code, msg, ftxn := "could_not_process", v.FailureReason, "txn_f"+strings.TrimPrefix(v.ID, "pay_")
		if v.Status == bankclient.StatusReturned {
			code = "account_closed"
		}
		po.FailureCode, po.FailureMessage, po.FailureBalanceTransaction = &code, &msg, &ftxn
	}
	return po
}

func (b *Bank) handleStripeRetrieve(w http.ResponseWriter, r *http.Request) {
	f := b.Faults()
	if !b.sleep(r.Context(), b.latency(f.LatencyMinMS, f.LatencyMaxMS)) {
		writeStripeError(w, http.StatusServiceUnavailable, stripeError{Type: stripeAPIError, Message: "request cancelled"})
		return
	}
	if b.chance(f.StatusErrorRate) {
		writeStripeError(w, http.StatusInternalServerError, stripeError{Type: stripeAPIError, Message: "simulated by status_error_rate"})
		return
	}
	id := r.PathValue("id")
	po, ok := b.payout(payoutSeq(id), false)
	if !ok {
		writeStripeError(w, http.StatusNotFound, stripeError{Type: stripeInvalidRequest, Code: "resource_missing", Param: "id",
			Message: fmt.Sprintf("No such payout: '%s'", sanitizeID(id))})
		return
	}
	writeJSON(w, http.StatusOK, po)
}

// payoutSeq is the sequence number of a payout id, 0 when it is none of
// ours.
func payoutSeq(id string) int64 {
	var seq int64
	if _, err := fmt.Sscanf(id, "pay_%d", &seq); err != nil || paymentID(seq) != id {
		return 0
	}
	return seq
}

// sanitizeID keeps an id from a request printable and short in a message.
func sanitizeID(id string) string {
	if len(id) > 64 {
		id = id[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return -1
		}
		return r
	}, id)
}

// Page sizes of GET /v1/payouts (https://docs.stripe.com/api/pagination).
const (
	stripeDefaultLimit = 10
	stripeMaxLimit     = 100
)

// stripeList is a page of GET /v1/payouts.
type stripeList struct {
	Object  string         `json:"object"`
	Data    []stripePayout `json:"data"`
	HasMore bool           `json:"has_more"`
	URL     string         `json:"url"`
}

// errBadListParam is a list parameter Stripe would refuse.
var errBadListParam = errors.New("invalid list parameter")

func (b *Bank) handleStripeList(w http.ResponseWriter, r *http.Request) {
	f := b.Faults()
	if !b.sleep(r.Context(), b.latency(f.LatencyMinMS, f.LatencyMaxMS)) {
		writeStripeError(w, http.StatusServiceUnavailable, stripeError{Type: stripeAPIError, Message: "request cancelled"})
		return
	}
	if b.chance(f.StatusErrorRate) {
		writeStripeError(w, http.StatusInternalServerError, stripeError{Type: stripeAPIError, Message: "simulated by status_error_rate"})
		return
	}
	q := r.URL.Query()
	bad := func(param, msg string) {
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Code: "parameter_invalid_integer", Param: param, Message: msg})
	}
	limit := stripeDefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > stripeMaxLimit {
			bad("limit", fmt.Sprintf("limit must be an integer from 1 to %d", stripeMaxLimit))
			return
		}
		limit = n
	}
	created, err := createdFilter(q)
	if err != nil {
		bad("created", err.Error())
		return
	}
	status := q.Get("status")
	after := q.Get("starting_after")
	var startSeq int64 // list payments with seq < startSeq; 0: from the newest
	if after != "" {
		if startSeq = payoutSeq(after); startSeq == 0 {
			writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Code: "resource_missing", Param: "starting_after",
				Message: fmt.Sprintf("No such payout: '%s'", sanitizeID(after))})
			return
		}
	}

	b.mu.Lock()
	now := b.now().UTC()
	ps := b.books.payments
	if startSeq == 0 || startSeq > int64(len(ps))+1 {
		startSeq = int64(len(ps)) + 1
	}
	page := stripeList{Object: "list", URL: "/v1/payouts", Data: []stripePayout{}}
	for i := startSeq - 2; i >= 0; i-- {
		p := ps[i]
		if !created(p.CreatedAt.Unix()) {
			continue
		}
		po := renderPayout(p, now)
		if status != "" && po.Status != status {
			continue
		}
		if len(page.Data) == limit {
			page.HasMore = true
			break
		}
		page.Data = append(page.Data, po)
	}
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, page)
}

// createdFilter reads created, created[gt], created[gte], created[lt] and
// created[lte] (Unix seconds) into a predicate.
func createdFilter(q url.Values) (func(int64) bool, error) {
	type bound struct {
		param string
		ok    func(t, v int64) bool
	}
	bounds := []bound{
		{"created", func(t, v int64) bool { return t == v }},
		{"created[gt]", func(t, v int64) bool { return t > v }},
		{"created[gte]", func(t, v int64) bool { return t >= v }},
		{"created[lt]", func(t, v int64) bool { return t < v }},
		{"created[lte]", func(t, v int64) bool { return t <= v }},
	}
	var checks []func(int64) bool
	for _, bd := range bounds {
		s := q.Get(bd.param)
		if s == "" {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %s must be an integer (Unix seconds)", errBadListParam, bd.param)
		}
		checks = append(checks, func(t int64) bool { return bd.ok(t, v) })
	}
	return func(t int64) bool {
		for _, c := range checks {
			if !c(t) {
				return false
			}
		}
		return true
	}, nil
}
