// Package ops holds what the people who run settle use to watch it: the
// Prometheus registry and /metrics handler, the River UI handler mounted at
// /riverui/, the token check that guards them, and the slog setup behind
// --log-format.
//
// It owns no business logic and writes nothing to the database. It must
// never log the API token, and never serve the River UI without the token
// when one is configured.
package ops
