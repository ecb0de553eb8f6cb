package fakebank

// Faults is the fault profile of GET/PUT /admin/faults. Rates are
// probabilities in [0, 1].
type Faults struct {
	FailBeforeRate        float64 `json:"fail_before_rate"`
	DropResponseRate      float64 `json:"drop_response_rate"`
	StatusErrorRate       float64 `json:"status_error_rate"`
	RejectRate            float64 `json:"reject_rate"`
	SettlementFailureRate float64 `json:"settlement_failure_rate"`
	LatencyMinMS          int64   `json:"latency_min_ms"`
	LatencyMaxMS          int64   `json:"latency_max_ms"`
	SettleDelayMS         int64   `json:"settle_delay_ms"`
	KeyTTLMS              int64   `json:"key_ttl_ms"`
	// RateLimitPerS > 0 answers 429 with Retry-After to requests past that
	// many a second.
	RateLimitPerS float64 `json:"rate_limit_per_s"`
	// ReturnRate of the payments that settle come back ReturnAfterMS after
	// they settled (returned, as ACH and SEPA returns do).
	ReturnRate    float64 `json:"return_rate"`
	ReturnAfterMS int64   `json:"return_after_ms"`
	// ConsentDelayMS is how long after it was created an Open Banking
	// consent is decided (Authorised, or Rejected at ConsentRejectRate):
	// a real bank waits for its customer. 0 decides it at once.
	ConsentDelayMS int64 `json:"consent_delay_ms"`
	// ConsentRejectRate of the consents are Rejected by the customer
	// instead of Authorised.
	ConsentRejectRate float64 `json:"consent_reject_rate"`
	// The obie profile's token endpoint: TokenErrorRate of its requests
	// are answered 500 before anything is issued; TokenDropRate of the
	// tokens issued lose their answer (the code is spent: the account
	// holder must authorise again).
	TokenErrorRate float64 `json:"token_error_rate"`
	TokenDropRate  float64 `json:"token_drop_rate"`
	// The bank's pushes (settle fakebank --webhook-url): WebhookLossRate
	// of the status changes are never pushed, WebhookDuplicateRate are
	// pushed twice, and each push leaves after a delay drawn from
	// [0, WebhookDelayMaxMS], so pushes arrive late and out of order.
	WebhookLossRate      float64 `json:"webhook_loss_rate"`
	WebhookDuplicateRate float64 `json:"webhook_duplicate_rate"`
	WebhookDelayMaxMS    int64   `json:"webhook_delay_max_ms"`
}

// Stats is the body of GET /admin/stats.
type Stats struct {
	Payments          int64 `json:"payments"`
	Replays           int64 `json:"replays"`
	KeyReuseConflicts int64 `json:"key_reuse_conflicts"`
	// MaxExecutionsPerKey is the largest number of payments ever created
	// under one idempotency key (above 1 only after the bank forgot a key).
	MaxExecutionsPerKey int64 `json:"max_executions_per_key"`
	// MaxPaymentsPerReference above 1 means one settlement was paid twice.
	MaxPaymentsPerReference int64 `json:"max_payments_per_reference"`
}
