// Package bankclient speaks the bank protocol of DESIGN.md section 7: it owns
// the [Bank] interface the engine reaches the bank through, its HTTP
// implementation [Client], the stable idempotency key ([KeyFor]), the
// classification of every bank answer into a typed outcome, and the short,
// bounded in-call retries of answers that are not definitive.
//
// It must never decide settlement state (that is statemachine's job, on the
// outcome this package reports), never persist anything, never retry with a
// different idempotency key or body, never turn an answer it could not
// understand into a definitive one, and never log or return the bank
// credential.
//
// # Classification
//
// Every answer is classified by type, never by error text. Callers decide with
// the predicates ([IsAmbiguous], [IsRejected], [IsKeyReuse], [IsNotFound],
// [IsUnauthorized]) or errors.Is/errors.As.
//
//	answer                                        Send                          StatusByKey / Statement        in-call retry
//	--------------------------------------------  ----------------------------  -----------------------------  -------------
//	201 + valid payment                           accepted (Replayed=false)     payment / page                 -
//	200 + valid payment                           accepted (Replayed=true)      payment / page                 -
//	2xx with a body that is not a valid payment:  *AmbiguousError               *AmbiguousError                yes
//	  unparseable, too large, duplicate keys,       (wraps ErrMalformedResponse)
//	  unknown status, another key or amount
//	422 {"error":"idempotency_key_reuse"}         ErrKeyReuse                   *AmbiguousError (unexpected)   never
//	422 {"error":"rejected"} or other JSON code   *RejectedError                *AmbiguousError (unexpected)   never
//	422 with an unreadable body                   *AmbiguousError               *AmbiguousError                no
//	400                                           *RejectedError                *AmbiguousError (unexpected)   never
//	404                                           *AmbiguousError (wrong URL?)  ErrNotFound (by-key only)      never
//	401, 403                                      *AmbiguousError + ErrUnauthorized (configuration)            no
//	408, 409, 425, 429, 5xx                       *AmbiguousError wrapping *StatusError                        yes
//	other 1xx/3xx/4xx (redirects not followed)    *AmbiguousError wrapping *StatusError                        no
//	timeout of one attempt (Options.Timeout),     *AmbiguousError wrapping the transport error                 yes
//	  connection refused/reset, EOF, closed
//	parent context done after a request left      *AmbiguousError wrapping the context error                   stops at once
//	parent context done before any request left   plain error wrapping ctx.Err() (nothing was sent)            -
//	invalid input, empty key                      plain error (nothing was sent)                               -
//
// An *AmbiguousError means the bank may or may not have acted: the settlement
// is uncertain and is resolved only through [Bank.StatusByKey]. A 401 or 403
// is our configuration's fault, never the payment's: it is ambiguous (so no
// payment is ever marked failed because a credential is wrong) and also
// satisfies [IsUnauthorized] so an operator can be alerted. [ErrKeyReuse]
// means the bank holds another body under this key: a bug or a data problem,
// never retried and never a rejection of the payment. An error satisfying
// none of the predicates means nothing reached the bank.
//
// In-call retries use github.com/cenkalti/backoff/v4 (exponential, jittered,
// bounded by [RetryPolicy]) and always resend the identical body under the
// identical Idempotency-Key. They stop at once when the parent context is
// done. Longer-term retries belong to the caller (River jobs). Note that
// net/http itself may resend a request carrying an Idempotency-Key once when a
// reused keep-alive connection breaks; that resend is identical too, so it is
// safe, but the bank may see up to twice RetryPolicy.MaxAttempts requests.
package bankclient
