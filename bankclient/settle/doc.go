// Package settle is the connector of settle's own bank protocol (DESIGN.md
// section 7, --bank settle, the default; settle fakebank serves it): its
// HTTP [Client] of the bankclient.Bank contract, the protocol's error
// bodies and webhooks, and the classification of every answer into
// bankclient's typed outcomes, with short, bounded in-call retries of the
// answers that are not definitive.
//
// It must never decide settlement state, never persist anything, never
// retry with a different idempotency key or body, never turn an answer it
// could not understand into a definitive one, and never log or return the
// bank credential.
//
// # Classification
//
// Every answer is classified by type, never by error text. Callers decide with
// the predicates (bankclient.IsAmbiguous, IsRejected, IsKeyReuse, IsNotFound,
// IsUnauthorized) or errors.Is/errors.As.
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
// In-call retries use github.com/cenkalti/backoff/v4 (exponential, jittered,
// bounded by bankclient.RetryPolicy) and always resend the identical body under the
// identical Idempotency-Key. They stop at once when the parent context is
// done. Longer-term retries belong to the caller (River jobs). Note that
// net/http itself may resend a request carrying an Idempotency-Key once when a
// reused keep-alive connection breaks; that resend is identical too, so it is
// safe, but the bank may see up to twice RetryPolicy.MaxAttempts requests.
package settle
