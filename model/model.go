// Package model holds the Promela model of settle's payment protocol
// (DESIGN.md section 21) and the test that checks it with Spin: settle.pml
// is the protocol as the engine runs it (intake with redelivery, the send
// claim, the bank with lost answers, 5xx, 429 and key expiry, the resolver's
// questions, the resend window, statements, returns, crashes at every crash
// point), and decisions.pml is the engine's decision table, generated from
// the Go decision functions of package reconcile by decisiontable, so the
// model checks the decisions the code makes, not a copy of them.
//
// It must never be imported by the product: it exists for its tests.
package model

//go:generate go run ./decisiontable -o decisions.pml
