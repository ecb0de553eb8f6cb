// Package metrics defines settle's Prometheus metrics in one place so the
// names and labels are the same everywhere. Packages receive a *Metrics;
// none reads a global registry.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds every collector settle exports.
type Metrics struct {
	// IntakeTotal counts intake outcomes: created, replayed, conflict, invalid, too_old.
	IntakeTotal *prometheus.CounterVec
	// ReplayAge is the age of the first receipt when a redelivery arrives.
	ReplayAge prometheus.Histogram
	// ReceiptConflicts counts recorded receipt conflicts.
	ReceiptConflicts prometheus.Counter
	// UncertainTotal counts entries into the uncertain state.
	UncertainTotal prometheus.Counter
	// Transitions counts transitions by the bank of the settlement (the
	// worker's, bounded by its configuration; empty for a tool of no
	// bank) and target state.
	Transitions *prometheus.CounterVec
	// BankRequests counts bank calls by bank, op (send, status,
	// statement) and outcome.
	BankRequests *prometheus.CounterVec
	// BankDuration is the latency of bank calls by bank and op.
	BankDuration *prometheus.HistogramVec
	// Resolution is the time from entering uncertain to a terminal state.
	Resolution prometheus.Histogram
	// NeedsInvestigation counts settlements flagged for a human.
	NeedsInvestigation prometheus.Counter
	// Returns counts settlements returned after confirmation, by the
	// source that reported it (status, statement).
	Returns *prometheus.CounterVec
	// BankWebhooks counts webhooks from the bank by connector and outcome
	// (checked, unknown_settlement, bad_signature, stale, malformed, error).
	BankWebhooks *prometheus.CounterVec
	// SourceMessages counts the messages of event sources (DESIGN.md
	// section 18) by source kind and outcome (created, replayed, conflict,
	// rejected, poison), each counted once its outcome committed.
	SourceMessages *prometheus.CounterVec
	// SourceRedeliveries counts messages a source delivered more than once.
	SourceRedeliveries *prometheus.CounterVec
	// SourceLag is the number of messages waiting in a source.
	SourceLag *prometheus.GaugeVec
	// SourceBatch is how long a fetched batch took from fetch to
	// acknowledgement.
	SourceBatch prometheus.Histogram
	// EventsDelivered counts outcome events delivered, by sink.
	EventsDelivered *prometheus.CounterVec
	// EventsFailed counts failed attempts to deliver an outcome event, by sink.
	EventsFailed *prometheus.CounterVec
	// WrongBankJobs counts jobs a worker refused because their settlement
	// belongs to another bank than the queue's they came from, by that
	// queue's bank (one this worker serves): each was moved to its bank's
	// queue, nothing sent.
	WrongBankJobs *prometheus.CounterVec
}

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		IntakeTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_intake_total", Help: "Settlement events received, by outcome (created, replayed, conflict, invalid, too_old).",
		}, []string{"outcome"}),
		ReplayAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "settle_replay_age_seconds", Help: "Age of the first receipt when a redelivery of the same event arrives.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12),
		}),
		ReceiptConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "settle_receipt_conflicts_total", Help: "Events rejected because their settlement_id was already received with another payload.",
		}),
		UncertainTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "settle_uncertain_total", Help: "Entries into the uncertain state (no definitive answer from the bank).",
		}),
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_transitions_total", Help: "Settlement state transitions made by the engine, by bank and target state.",
		}, []string{"bank", "to"}),
		BankRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_bank_requests_total", Help: "Calls to the bank, by bank, operation and outcome.",
		}, []string{"bank", "op", "outcome"}),
		BankDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "settle_bank_request_duration_seconds", Help: "Latency of calls to the bank, by bank and operation.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"bank", "op"}),
		Resolution: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "settle_resolution_seconds", Help: "Time from entering uncertain to a terminal state.",
			Buckets: prometheus.ExponentialBuckets(0.05, 3, 12),
		}),
		NeedsInvestigation: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "settle_needs_investigation_total", Help: "Settlements flagged needs_investigation (the engine will not resolve them alone).",
		}),
		Returns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_returns_total", Help: "Settlements returned after confirmation (a reversal booked), by the source that reported it (status, statement).",
		}, []string{"source"}),
		BankWebhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_bank_webhooks_total", Help: "Webhooks from the bank, by connector and outcome (checked, unknown_settlement, bad_signature, stale, malformed, error).",
		}, []string{"connector", "outcome"}),
		SourceMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_source_messages_total", Help: "Messages taken from event sources, by source and outcome (created, replayed, conflict, rejected, poison).",
		}, []string{"source", "outcome"}),
		SourceRedeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_source_redeliveries_total", Help: "Messages an event source delivered more than once, by source.",
		}, []string{"source"}),
		SourceLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "settle_source_lag", Help: "Messages waiting in an event source, by source.",
		}, []string{"source"}),
		SourceBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "settle_source_batch_seconds", Help: "Time from fetching a batch of an event source to its acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		EventsDelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_events_delivered_total", Help: "Outcome events delivered (a 2xx answer, a broker's acknowledgement), by sink.",
		}, []string{"sink"}),
		EventsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_events_failed_total", Help: "Failed attempts to deliver an outcome event (retried until --events-retry-for), by sink.",
		}, []string{"sink"}),
		WrongBankJobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "settle_wrong_bank_jobs_total", Help: "Jobs refused because their settlement belongs to another bank than the queue's they came from (moved to their bank's queue, nothing sent), by the queue's bank.",
		}, []string{"bank"}),
	}
	reg.MustRegister(m.WrongBankJobs)
	reg.MustRegister(m.IntakeTotal, m.ReplayAge, m.ReceiptConflicts, m.UncertainTotal, m.Transitions,
		m.BankRequests, m.BankDuration, m.Resolution, m.NeedsInvestigation, m.Returns, m.BankWebhooks,
		m.SourceMessages, m.SourceRedeliveries, m.SourceLag, m.SourceBatch, m.EventsDelivered, m.EventsFailed)
	return m
}

// NewUnregistered returns metrics registered nowhere, for tests and tools
// that do not serve /metrics.
func NewUnregistered() *Metrics { return New(prometheus.NewRegistry()) }

// EventAttempt records one attempt to deliver an outcome event to sink.
func (m *Metrics) EventAttempt(sink string, delivered bool) {
	if delivered {
		m.EventsDelivered.WithLabelValues(sink).Inc()
		return
	}
	m.EventsFailed.WithLabelValues(sink).Inc()
}

// BankObserver returns the recorder of bank's calls (a bank the worker is
// configured for: the label stays bounded).
func (m *Metrics) BankObserver(bank string) func(op, outcome string, d time.Duration) {
	return func(op, outcome string, d time.Duration) {
		m.BankRequests.WithLabelValues(bank, op, outcome).Inc()
		m.BankDuration.WithLabelValues(bank, op).Observe(d.Seconds())
	}
}
