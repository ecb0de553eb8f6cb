// Package bankhttp is what every HTTP connector of package bankclient
// shares (bankclient/settle, bankclient/stripe, bankclient/obie): the
// checks of a bank's base URL and credential and the refusal of plain
// http to a bank not on this machine ([ParseRemote]), the TLS transport
// ([Transport]), the in-call retry loop that resends the identical request
// under the identical key ([RetryCall]), the refusal of JSON answers with
// repeated keys ([CheckJSONKeys]), and the HMAC signatures in Stripe's
// scheme that webhooks are signed with ([VerifyHMACSignature],
// [SignHMAC]).
//
// It holds plumbing, never a decision: it never classifies a bank's
// answer for an operation (each connector does, into bankclient's typed
// outcomes), never persists anything and never logs or returns a
// credential.
package bankhttp
