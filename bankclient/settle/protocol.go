package settle

// ErrorBody is the JSON body of a 4xx answer from the bank, for example
// {"error":"idempotency_key_reuse"} or {"error":"rejected","reason":"..."}.
type ErrorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason,omitempty"`
}

// The error codes of ErrorBody.Error that the protocol defines.
const (
	ErrorCodeKeyReuse = "idempotency_key_reuse"
	ErrorCodeRejected = "rejected"
)

// MaxProtocolAmount is the largest amount_cents settle's bank protocol
// carries: 2^53-1, the largest integer a JSON number holds exactly in
// every receiver (RFC 7493, I-JSON, section 2.2: JavaScript and many JSON
// libraries read numbers as IEEE 754 doubles, so 2^53+1 arrives as 2^53).
// An amount one receiver might read as another is not an amount to pay;
// 90 trillion dollars in cents is more than any single payout.
const MaxProtocolAmount = 1<<53 - 1
