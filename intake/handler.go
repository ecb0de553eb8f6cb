package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/settle/settle/internal/auth"
	"github.com/settle/settle/internal/httpsafe"
	"github.com/settle/settle/settlement"
)

// MaxBatchBytes is the largest accepted batch body.
const MaxBatchBytes = 16 << 20

// Defaults of HandlerConfig.
const (
	// DefaultMaxInflight bounds the intake requests served at once.
	DefaultMaxInflight = 128
)

// HandlerConfig configures the HTTP API.
type HandlerConfig struct {
	Service *Service
	// Logger receives one line per decision (default: slog.Default()).
	Logger *slog.Logger
	// APIToken, when set, is required on /v1/ (as a Bearer token or the
	// password of Basic credentials; see internal/auth). It is compared in
	// constant time and never logged.
	APIToken string
	// MaxInflight bounds the intake requests (single or batch) served at
	// once (default DefaultMaxInflight); past it they are answered 429.
	MaxInflight int
	// InflightWait is how long a request waits for a free slot before the
	// 429 (default 0: answer at once).
	InflightWait time.Duration
	// Limiter bounds the log lines of refused requests (401, 415): one a
	// kind per interval with a count of those left out (default: its own).
	Limiter *httpsafe.Limiter
}

// Handler serves the API of DESIGN.md section 6 that intake owns:
// POST /v1/settlements, POST /v1/settlements/batch,
// GET /v1/settlements/{id}, GET /healthz and GET /readyz.
type Handler struct {
	svc   *Service
	log   *slog.Logger
	lim   *httpsafe.Limiter
	token auth.Token
	sem   chan struct{}
	wait  time.Duration
	mux   *http.ServeMux
}

// NewHandler returns the HTTP API for cfg.
func NewHandler(cfg HandlerConfig) *Handler {
	h := &Handler{svc: cfg.Service, log: cfg.Logger, wait: cfg.InflightWait, lim: cfg.Limiter}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.lim == nil {
		h.lim = &httpsafe.Limiter{}
	}
	h.token = auth.NewToken(cfg.APIToken)
	n := cfg.MaxInflight
	if n <= 0 {
		n = DefaultMaxInflight
	}
	h.sem = make(chan struct{}, n)
	h.mux = http.NewServeMux()
	// Writes take JSON only: a browser sends text/plain, a form or no type
	// cross-site without asking, never JSON (issue 32, item 5).
	h.mux.Handle("POST /v1/settlements", h.auth(httpsafe.RequireJSON(h.limit(http.HandlerFunc(h.postSettlement)), h.log, h.lim)))
	h.mux.Handle("POST /v1/settlements/batch", h.auth(httpsafe.RequireJSON(h.limit(http.HandlerFunc(h.postBatch)), h.log, h.lim)))
	h.mux.Handle("GET /v1/settlements/{id}", h.auth(http.HandlerFunc(h.getSettlement)))
	h.mux.HandleFunc("GET /healthz", h.healthz)
	h.mux.HandleFunc("GET /readyz", h.readyz)
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// auth requires the bearer token when one is configured.
func (h *Handler) auth(next http.Handler) http.Handler {
	if !h.token.Set() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := h.token.Check(r); !ok {
			h.lim.Warn(h.log, r, "intake: unauthorized request")
			w.Header().Set("WWW-Authenticate", `Bearer realm="settle"`)
			writeProblem(w, Problem{Type: ProblemUnauthorized, Title: "Missing or bad API token", Status: http.StatusUnauthorized})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limit bounds the intake requests in flight; past the bound it answers
// 429 with Retry-After rather than queueing without limit.
func (h *Handler) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.acquire(r.Context()) {
			h.log.Warn("intake: overloaded", "path", r.URL.Path, "max_inflight", cap(h.sem))
			h.svc.m.IntakeTotal.WithLabelValues("overloaded").Inc()
			writeProblem(w, Problem{Type: ProblemOverloaded, Title: "Too many requests in flight", Status: http.StatusTooManyRequests,
				Detail: "nothing was acknowledged; deliver the event again later", retryAfter: retryAfterOverloaded})
			return
		}
		defer func() { <-h.sem }()
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) acquire(ctx context.Context) bool {
	select {
	case h.sem <- struct{}{}:
		return true
	default:
	}
	if h.wait <= 0 {
		return false
	}
	t := time.NewTimer(h.wait)
	defer t.Stop()
	select {
	case h.sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// settlementBody is the answer to an accepted event.
type settlementBody struct {
	settlement.Settlement
	Replayed bool `json:"replayed"`
}

// answer is the status and body of one event's outcome.
type answer struct {
	status  int
	body    any
	problem *Problem
}

func (h *Handler) answerFor(res Result, err error) answer {
	if err != nil {
		p := problemFor(err)
		return answer{status: p.Status, body: p, problem: &p}
	}
	if res.Replayed {
		return answer{status: http.StatusOK, body: settlementBody{res.Settlement, true}}
	}
	return answer{status: http.StatusCreated, body: settlementBody{res.Settlement, false}}
}

// logDecision writes the one log line of an event's outcome: never the
// payload, never the token.
func (h *Handler) logDecision(ctx context.Context, ev *Event, a answer, err error) {
	attrs := []slog.Attr{slog.Int("status", a.status)}
	if ev != nil {
		attrs = append(attrs, slog.String("settlement_id", ev.SettlementID))
		if ev.EventID != "" {
			attrs = append(attrs, slog.String("event_id", ev.EventID))
		}
	}
	level := slog.LevelInfo
	var outcome string
	switch {
	case a.status == http.StatusCreated:
		outcome = "created"
	case a.status == http.StatusOK:
		outcome = "replayed"
	case a.status == http.StatusConflict:
		outcome, level = "conflict", slog.LevelWarn
		attrs = append(attrs, slog.String("stored_hash", a.problem.StoredHash), slog.String("incoming_hash", a.problem.IncomingHash))
	case errors.Is(err, ErrTooOld):
		outcome = "too_old"
	case a.status >= 500:
		outcome, level = "error", slog.LevelError
		attrs = append(attrs, slog.String("error", err.Error()))
	default:
		outcome = "invalid"
		attrs = append(attrs, slog.String("field", a.problem.Field), slog.String("reason", a.problem.Detail))
	}
	h.log.LogAttrs(ctx, level, "intake: "+outcome, attrs...)
}

// rejectLog sums the rejected events of one batch by reason, for its one
// log line.
type rejectLog struct {
	n       int
	reasons map[string]int
	order   []string
}

// maxRejectReasons is how many distinct reasons the line names.
const maxRejectReasons = 5

func (l *rejectLog) add(a answer, err error) {
	reason := "invalid"
	switch {
	case errors.Is(err, ErrTooOld):
		reason = "too_old"
	case a.problem != nil && a.problem.Field != "":
		reason = a.problem.Field + ": " + a.problem.Detail
	case a.problem != nil:
		reason = a.problem.Detail
	}
	l.n++
	if l.reasons == nil {
		l.reasons = map[string]int{}
	}
	if _, seen := l.reasons[reason]; !seen {
		l.order = append(l.order, reason)
	}
	l.reasons[reason]++
}

// log writes the batch's one line of rejects, if it had any.
func (l *rejectLog) log(ctx context.Context, log *slog.Logger, events int) {
	if l.n == 0 {
		return
	}
	var b strings.Builder
	for i, reason := range l.order {
		if i == maxRejectReasons {
			fmt.Fprintf(&b, "; and %d other reasons", len(l.order)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%d× %s", l.reasons[reason], printableField(reason))
	}
	log.LogAttrs(ctx, slog.LevelInfo, "intake: batch events rejected", slog.Int("rejected", l.n), slog.Int("events", events),
		slog.String("reasons", b.String()))
}

// readBody reads at most limit bytes of the body; a larger body is an
// *InvalidError wrapping ErrTooLarge.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, &InvalidError{Kind: ErrTooLarge, Reason: "body is over the size limit"}
	case err != nil:
		return nil, malformed("", "error reading the body")
	}
	return body, nil
}

func (h *Handler) postSettlement(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, MaxEventBytes)
	var ev Event
	if err == nil {
		ev, err = DecodeEvent(body)
	}
	if err != nil {
		h.svc.m.IntakeTotal.WithLabelValues("invalid").Inc()
		a := h.answerFor(Result{}, err)
		h.logDecision(r.Context(), nil, a, err)
		writeProblem(w, *a.problem)
		return
	}
	res, err := h.svc.Submit(r.Context(), ev)
	a := h.answerFor(res, err)
	h.logDecision(r.Context(), &ev, a, err)
	if a.problem != nil {
		writeProblem(w, *a.problem)
		return
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, "application/json", a.status, a.body)
}

// BatchItem is the outcome of one event of a batch: the status code and
// body it would have had on its own.
type BatchItem struct {
	Status int `json:"status"`
	Body   any `json:"body"`
}

// BatchResponse is the answer to POST /v1/settlements/batch.
type BatchResponse struct {
	// Results holds one item per event, in order.
	Results []BatchItem `json:"results"`
	// Counts sums the outcomes: created, replayed, conflict, invalid.
	Counts map[string]int `json:"counts"`
}

// splitBatch splits a batch body into its events: a JSON array, or NDJSON
// (one event per non-blank line). An array that is not valid JSON cannot
// be split and fails as a whole.
func splitBatch(body []byte) ([][]byte, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	var items [][]byte
	if len(trimmed) > 0 && trimmed[0] == '[' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		if _, err := dec.Token(); err != nil {
			return nil, malformed("", "batch is not a JSON array")
		}
		for dec.More() {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, malformed("", "batch is not a valid JSON array")
			}
			if len(items) == MaxBatch {
				return nil, &InvalidError{Kind: ErrTooLarge, Reason: "batch holds more than 1000 events"}
			}
			items = append(items, raw)
		}
		if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
			return nil, malformed("", "batch is not a valid JSON array")
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, malformed("", "unexpected data after the batch array")
		}
		return items, nil
	}
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(items) == MaxBatch {
			return nil, &InvalidError{Kind: ErrTooLarge, Reason: "batch holds more than 1000 events"}
		}
		items = append(items, line)
	}
	return items, nil
}

func (h *Handler) postBatch(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, MaxBatchBytes)
	var raws [][]byte
	if err == nil {
		raws, err = splitBatch(body)
	}
	if err != nil {
		a := h.answerFor(Result{}, err)
		h.logDecision(r.Context(), nil, a, err)
		writeProblem(w, *a.problem)
		return
	}
	resp := BatchResponse{Results: make([]BatchItem, len(raws)), Counts: map[string]int{"created": 0, "replayed": 0, "conflict": 0, "invalid": 0}}
	evs := make([]Event, 0, len(raws))
	idx := make([]int, 0, len(raws))
	// A batch's rejects are logged as one line with counts, not one each:
	// a thousand bad events must not make a thousand log lines.
	var rejects rejectLog
	defer rejects.log(r.Context(), h.log, len(raws))
	for i, raw := range raws {
		ev, err := DecodeEvent(raw)
		if err != nil {
			h.svc.m.IntakeTotal.WithLabelValues("invalid").Inc()
			a := h.answerFor(Result{}, err)
			rejects.add(a, err)
			resp.Results[i] = BatchItem{Status: a.status, Body: a.body}
			resp.Counts["invalid"]++
			continue
		}
		evs = append(evs, ev)
		idx = append(idx, i)
	}
	if len(evs) > 0 {
		outs, err := h.svc.SubmitBatch(r.Context(), evs)
		if err != nil {
			// The whole batch failed: nothing of it is acknowledged.
			a := h.answerFor(Result{}, err)
			h.logDecision(r.Context(), nil, a, err)
			writeProblem(w, *a.problem)
			return
		}
		for j, o := range outs {
			a := h.answerFor(o.Result, o.Err)
			if a.problem != nil && a.status >= 400 && a.status < 500 && a.status != http.StatusConflict {
				rejects.add(a, o.Err)
			} else {
				h.logDecision(r.Context(), &evs[j], a, o.Err)
			}
			resp.Results[idx[j]] = BatchItem{Status: a.status, Body: a.body}
			switch a.status {
			case http.StatusCreated:
				resp.Counts["created"]++
			case http.StatusOK:
				resp.Counts["replayed"]++
			case http.StatusConflict:
				resp.Counts["conflict"]++
			default:
				resp.Counts["invalid"]++
			}
		}
	}
	writeJSON(w, "application/json", http.StatusOK, resp)
}

func (h *Handler) getSettlement(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	v, err := h.svc.View(r.Context(), id)
	if err != nil {
		p := problemFor(err)
		if p.Status >= 500 {
			h.log.Error("intake: error loading settlement", "settlement_id", printableField(id), "error", err)
		}
		writeProblem(w, p)
		return
	}
	writeJSON(w, "application/json", http.StatusOK, v)
}

func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, "application/json", http.StatusOK, map[string]string{"status": "ok"})
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.Ping(r.Context()); err != nil {
		h.log.Warn("intake: not ready", "error", err)
		writeProblem(w, problemFor(err))
		return
	}
	writeJSON(w, "application/json", http.StatusOK, map[string]string{"status": "ready"})
}
