// Package webhook serves POST /v1/bank/webhooks/{connector}: a push from
// the bank is a hint. Once its signature verifies (the connector's own
// scheme, with SETTLE_BANK_WEBHOOK_SECRET and a timestamp tolerance against
// replays) it enqueues an immediate status check of the settlement it
// names, and nothing else: its body never moves money or state (DESIGN.md
// section 13). A forged, stale, malformed or unknown-settlement hint
// changes nothing and is counted.
package webhook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/database/dberr"
	"github.com/settle/settle/internal/httpsafe"
	"github.com/settle/settle/internal/metrics"
)

// maxBody bounds a webhook body.
const maxBody = 256 << 10

// Handler serves the webhooks of one connector.
type Handler struct {
	// Connector is the worker's connector; webhooks for another are 404.
	Connector bankclient.Connector
	// Secret verifies the signatures; empty refuses every webhook (404).
	Secret string
	// Find returns the settlement a hint names (reconcile.FindByHint).
	Find func(ctx context.Context, h bankclient.Hint) (id string, found bool, err error)
	// Check enqueues an immediate status check of a settlement.
	Check func(ctx context.Context, settlementID string) error
	// Metrics counts settle_bank_webhooks_total{connector,outcome}.
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	// Limiter bounds the log lines of refused webhooks (a forger can send
	// them as fast as the network carries them): one a kind per interval,
	// with a count of those left out. Nil: the handler's own.
	Limiter *httpsafe.Limiter

	once sync.Once
	lim  *httpsafe.Limiter
}

// limiter is Limiter, or the handler's own when it is nil.
func (h *Handler) limiter() *httpsafe.Limiter {
	h.once.Do(func() {
		h.lim = h.Limiter
		if h.lim == nil {
			h.lim = &httpsafe.Limiter{}
		}
	})
	return h.lim
}

// The outcomes counted.
const (
	outcomeChecked   = "checked"
	outcomeUnknown   = "unknown_settlement"
	outcomeSignature = "bad_signature"
	outcomeStale     = "stale"
	outcomeMalformed = "malformed"
	outcomeError     = "error"
)

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("connector")
	if name != h.Connector.Name || h.Connector.VerifyWebhook == nil || h.Secret == "" {
		http.Error(w, "no webhooks are taken for this connector", http.StatusNotFound)
		return
	}
	count := func(outcome string) { h.Metrics.BankWebhooks.WithLabelValues(name, outcome).Inc() }
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		count(outcomeMalformed)
		http.Error(w, "body unreadable or too large", http.StatusBadRequest)
		return
	}
	hint, err := h.Connector.VerifyWebhook(r.Header, body, h.Secret, h.Now())
	switch {
	case errors.Is(err, bankclient.ErrWebhookStale):
		count(outcomeStale)
		h.limiter().Warn(h.Logger, r, "webhook refused: stale timestamp", "connector", name)
		http.Error(w, "signature timestamp outside the tolerance", http.StatusBadRequest)
		return
	case errors.Is(err, bankclient.ErrWebhookMalformed):
		count(outcomeMalformed)
		http.Error(w, "signed, but names no payment", http.StatusBadRequest)
		return
	case err != nil:
		count(outcomeSignature)
		h.limiter().Warn(h.Logger, r, "webhook refused: bad signature", "connector", name)
		http.Error(w, "signature does not verify", http.StatusBadRequest)
		return
	}
	id, found, err := h.Find(r.Context(), hint)
	if err != nil {
		count(outcomeError)
		h.Logger.Error("webhook: error finding its settlement", "error", err)
		failed(w, err)
		return
	}
	if !found {
		// Acknowledged, so the bank stops resending a hint we cannot use.
		count(outcomeUnknown)
		h.Logger.Info("webhook names no settlement of ours", "connector", name,
			"reference", hint.Reference, "payment_id", hint.PaymentID)
		w.WriteHeader(http.StatusOK)
		return
	}
	if err := h.Check(r.Context(), id); err != nil {
		count(outcomeError)
		h.Logger.Error("webhook: error enqueueing the check", "settlement_id", id, "error", err)
		failed(w, err)
		return
	}
	count(outcomeChecked)
	h.Logger.Info("webhook: status check enqueued", "connector", name, "settlement_id", id)
	w.WriteHeader(http.StatusAccepted)
}

// failed answers a hint whose settlement could not be found or checked
// (err, logged once by the caller): 503 with Retry-After when the database
// could not answer now, so the bank pushes it again; 500 otherwise, a bug
// that a 503 would hide behind the bank's retries (dberr).
func failed(w http.ResponseWriter, err error) {
	if dberr.Unavailable(err) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	}
	http.Error(w, "internal error", http.StatusInternalServerError)
}
