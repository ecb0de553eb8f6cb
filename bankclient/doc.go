// Package bankclient is the bank contract of DESIGN.md section 7: the
// [Bank] interface the engine reaches every bank through (and the
// optional [IDLookup], [ReferenceLookup], [Searcher], [Consenter] and
// [Authoriser]), the payments it carries ([PaymentRequest], [Payment],
// [StatementPage]), the stable idempotency keys ([KeyFor],
// [ConsentKeyFor]), a bank's [Capabilities], the typed outcome classes
// every answer is classified into, and a [Connector]: one kind of bank
// settle can pay through, with its [Options].
//
// The connectors implement it beside it: bankclient/settle (settle's own
// protocol, served by the fakebank), bankclient/stripe and bankclient/obie;
// bankclient/bankhttp holds the plumbing they share. This package holds
// no client, reads no environment of its own accord (OptionsFromEnv reads
// through the getenv its caller passes) and keeps no registry: the
// program lists the connectors it offers ([Connectors]).
//
// It must never decide settlement state (that is statemachine's job, on the
// outcome a connector reports), never persist anything, never retry with a
// different idempotency key or body, never turn an answer it could not
// understand into a definitive one, and never log or return the bank
// credential.
//
// # Outcome classes
//
// Every answer is classified by type, never by error text. Callers decide with
// the predicates ([IsAmbiguous], [IsRejected], [IsKeyReuse], [IsNotFound],
// [IsUnauthorized]) or errors.Is/errors.As. Package bankclient/settle's
// documentation shows how each answer of settle's protocol is classified.
//
// An *AmbiguousError means the bank may or may not have acted: the settlement
// is uncertain and is resolved only through [Bank.StatusByKey]. A 401 or 403
// is our configuration's fault, never the payment's: it is ambiguous (so no
// payment is ever marked failed because a credential is wrong) and also
// satisfies [IsUnauthorized] so an operator can be alerted. [ErrKeyReuse]
// means the bank holds another body under this key: a bug or a data problem,
// never retried and never a rejection of the payment. An error satisfying
// none of the predicates means nothing reached the bank.
package bankclient
