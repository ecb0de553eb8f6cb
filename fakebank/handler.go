package fakebank

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
)

// MaxBodyBytes is the largest request body the bank reads; a larger one is
// answered 413.
const MaxBodyBytes = 64 << 10

// Statement page sizes.
const (
	DefaultStatementLimit = 100
	MaxStatementLimit     = 1000
)

// Error codes the simulator answers besides those of bankclient.
const (
	errorCodeBadRequest  = "bad_request"
	errorCodeTooLarge    = "request_too_large"
	errorCodeNotFound    = "not_found"
	errorCodeUnavailable = "unavailable"
	errorCodeTimeout     = "gateway_timeout"
	errorCodeInternal    = "internal_error"
)

// HeaderIdempotencyKey and HeaderReplayed are the protocol's headers.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

func (b *Bank) handleCreatePayment(w http.ResponseWriter, r *http.Request) {
	f := b.Faults()
	if !b.sleep(r.Context(), b.latency(f.LatencyMinMS, f.LatencyMaxMS)) {
		writeError(w, http.StatusServiceUnavailable, errorCodeUnavailable, "request cancelled")
		return
	}
	if b.chance(f.FailBeforeRate) {
		b.log.Debug("fakebank: fault fail_before", "key", r.Header.Get(HeaderIdempotencyKey))
		writeError(w, http.StatusServiceUnavailable, errorCodeUnavailable, "simulated by fail_before_rate")
		return
	}
	key := r.Header.Get(HeaderIdempotencyKey)
	if key == "" {
		writeError(w, http.StatusBadRequest, errorCodeBadRequest, "missing Idempotency-Key header")
		return
	}
	if !validKey(key) {
		writeError(w, http.StatusBadRequest, errorCodeBadRequest,
			fmt.Sprintf("Idempotency-Key must be 1 to %d printable ASCII characters without space or '/'", maxKeyLen))
		return
	}
	var req bankclient.PaymentRequest
	if status, err := decodeJSON(w, r, &req); err != nil {
		code := errorCodeBadRequest
		if status == http.StatusRequestEntityTooLarge {
			code = errorCodeTooLarge
		}
		writeError(w, status, code, err.Error())
		return
	}

	out := b.submit(key, req)
	if err := b.persist(out.version); err != nil {
		b.log.Error("fakebank: error writing state", "error", err)
		writeError(w, http.StatusInternalServerError, errorCodeInternal, "could not record the payment")
		return
	}
	b.logOutcome(key, req, out)

	if b.chance(f.DropResponseRate) {
		b.dropResponse(w, key)
		return
	}
	if out.replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	switch out.kind {
	case outcomeCreated:
		writeJSON(w, http.StatusCreated, out.payment)
	case outcomeReplayed:
		writeJSON(w, http.StatusOK, out.payment)
	case outcomeRejected:
		writeJSON(w, http.StatusUnprocessableEntity, settle.ErrorBody{Error: settle.ErrorCodeRejected, Reason: out.reason})
	case outcomeKeyReuse:
		writeJSON(w, http.StatusUnprocessableEntity, settle.ErrorBody{
			Error:  settle.ErrorCodeKeyReuse,
			Reason: "this Idempotency-Key was used with another request body",
		})
	}
}

func (b *Bank) logOutcome(key string, req bankclient.PaymentRequest, out outcome) {
	attrs := []any{"key", key, "reference", req.Reference, "amount_cents", req.AmountCents, "currency", req.Currency}
	switch out.kind {
	case outcomeCreated:
		b.log.Debug("fakebank: payment created", append(attrs, "id", out.payment.ID)...)
	case outcomeReplayed:
		b.log.Debug("fakebank: payment replayed", append(attrs, "id", out.payment.ID)...)
	case outcomeRejected:
		b.log.Debug("fakebank: payment rejected", append(attrs, "reason", out.reason, "replayed", out.replayed)...)
	case outcomeKeyReuse:
		b.log.Debug("fakebank: idempotency key reused with another body", attrs...)
	}
}

// hangUp, half of the time, closes the connection of w without a word
// and says so; the other half (or when w cannot be hijacked) it does
// nothing and the caller answers with its error.
func (b *Bank) hangUp(w http.ResponseWriter, key string) bool {
	if !b.chance(0.5) {
		return false
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return false
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return false
	}
	b.log.Debug("fakebank: fault drop_response (connection closed)", "key", key)
	_ = conn.Close()
	return true
}

// dropResponse loses the answer to a processed request: half of the time the
// connection is closed without a word, otherwise the bank answers 504 as a
// gateway that gave up waiting would.
func (b *Bank) dropResponse(w http.ResponseWriter, key string) {
	if b.hangUp(w, key) {
		return
	}
	b.log.Debug("fakebank: fault drop_response (504)", "key", key)
	writeError(w, http.StatusGatewayTimeout, errorCodeTimeout, "simulated by drop_response_rate")
}

func (b *Bank) handlePaymentByKey(w http.ResponseWriter, r *http.Request) {
	f := b.Faults()
	if !b.sleep(r.Context(), b.latency(f.LatencyMinMS, f.LatencyMaxMS)) {
		writeError(w, http.StatusServiceUnavailable, errorCodeUnavailable, "request cancelled")
		return
	}
	key := r.PathValue("key")
	if b.chance(f.StatusErrorRate) {
		b.log.Debug("fakebank: fault status_error", "key", key)
		writeError(w, http.StatusServiceUnavailable, errorCodeUnavailable, "simulated by status_error_rate")
		return
	}
	if !validKey(key) {
		writeError(w, http.StatusBadRequest, errorCodeBadRequest, "invalid idempotency key")
		return
	}
	p, ok := b.byKey(key)
	if !ok {
		writeError(w, http.StatusNotFound, errorCodeNotFound, "no payment under this idempotency key")
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (b *Bank) handleStatement(w http.ResponseWriter, r *http.Request) {
	f := b.Faults()
	if !b.sleep(r.Context(), b.latency(f.LatencyMinMS, f.LatencyMaxMS)) {
		writeError(w, http.StatusServiceUnavailable, errorCodeUnavailable, "request cancelled")
		return
	}
	q := r.URL.Query()
	limit, ok := pageLimit(w, q.Get("limit"))
	if !ok {
		return
	}
	pg, err := b.statement(q.Get("after"), limit)
	if err != nil {
		writeError(w, http.StatusBadRequest, errorCodeBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, pg)
}

// handleReturns serves GET /v1/returns?since=&after=&limit=, an optional
// endpoint of the protocol: the payments created at or after since (RFC
// 3339; absent: all) that are returned now, a page at a time, with the
// statement's cursor. Status calls' faults apply to it.
func (b *Bank) handleReturns(w http.ResponseWriter, r *http.Request) {
	if !b.statusFaults(w, r) {
		return
	}
	q := r.URL.Query()
	limit, ok := pageLimit(w, q.Get("limit"))
	if !ok {
		return
	}
	var since time.Time
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeError(w, http.StatusBadRequest, errorCodeBadRequest, "since must be an RFC 3339 time")
			return
		}
		since = t
	}
	pg, err := b.returned(since, q.Get("after"), limit)
	if err != nil {
		writeError(w, http.StatusBadRequest, errorCodeBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, pg)
}

// pageLimit reads a page's limit (DefaultStatementLimit when s is empty);
// ok is false once it has answered 400.
func pageLimit(w http.ResponseWriter, s string) (limit int, ok bool) {
	if s == "" {
		return DefaultStatementLimit, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxStatementLimit {
		writeError(w, http.StatusBadRequest, errorCodeBadRequest,
			fmt.Sprintf("limit must be an integer from 1 to %d", MaxStatementLimit))
		return 0, false
	}
	return n, true
}

// statusFaults plays a status call's faults (latency, status_error_rate);
// ok is false once it has answered for them.
func (b *Bank) statusFaults(w http.ResponseWriter, r *http.Request) (ok bool) {
	f := b.Faults()
	if !b.sleep(r.Context(), b.latency(f.LatencyMinMS, f.LatencyMaxMS)) {
		writeError(w, http.StatusServiceUnavailable, errorCodeUnavailable, "request cancelled")
		return false
	}
	if b.chance(f.StatusErrorRate) {
		writeError(w, http.StatusServiceUnavailable, errorCodeUnavailable, "simulated by status_error_rate")
		return false
	}
	return true
}

func (b *Bank) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, b.Faults())
}

func (b *Bank) handlePutFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if status, err := decodeJSON(w, r, &f); err != nil {
		writeError(w, status, errorCodeBadRequest, err.Error())
		return
	}
	if err := b.SetFaults(f); err != nil {
		writeError(w, http.StatusBadRequest, errorCodeBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, f)
}

func (b *Bank) handleStats(w http.ResponseWriter, _ *http.Request) {
	if b.profile == "obie" {
		writeJSON(w, http.StatusOK, struct {
			Stats
			Traffic
			ConsentStats
		}{b.Stats(), b.Traffic(), b.ConsentStats()})
		return
	}
	var hooks *WebhookStats
	if ws := b.WebhookStats(); ws != (WebhookStats{}) {
		hooks = &ws
	}
	writeJSON(w, http.StatusOK, struct {
		Stats
		Traffic
		Webhooks *WebhookStats `json:"webhooks,omitempty"`
	}{b.Stats(), b.Traffic(), hooks})
}

// sleep waits for d unless ctx or the bank ends first; it reports whether
// the whole delay passed.
func (b *Bank) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-b.ctx.Done():
		return false
	}
}

// decodeJSON reads one JSON object from the request body into v, refusing
// unknown fields, trailing data and bodies over MaxBodyBytes. On failure it
// returns the status to answer.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) (int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds %d bytes", MaxBodyBytes)
		}
		return http.StatusBadRequest, fmt.Errorf("error reading request body: %w", err)
	}
	if trimmed := bytes.TrimSpace(body); len(trimmed) == 0 || trimmed[0] != '{' {
		return http.StatusBadRequest, errors.New("invalid JSON body: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return http.StatusBadRequest, fmt.Errorf("invalid JSON body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return http.StatusBadRequest, errors.New("invalid JSON body: data after the object")
	}
	return 0, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, reason string) {
	writeJSON(w, status, settle.ErrorBody{Error: code, Reason: reason})
}
