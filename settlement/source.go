package settlement

// Source is who moved a settlement: the source column of its transitions
// (settlement_transitions.source, migration 0020). Every transition names
// one: statemachine.Transition refuses a Change without it.
type Source string

// The sources of a transition.
const (
	// SourceIntake: intake received the settlement (its creation).
	SourceIntake Source = "intake"
	// SourceWorker: a worker's send or scheduled check.
	SourceWorker Source = "worker"
	// SourceSweep: a check the sweep took over (a lease ran out).
	SourceSweep Source = "sweep"
	// SourceWebhook: a check a bank's webhook asked for.
	SourceWebhook Source = "webhook"
	// SourceRedirect: a check the account holder's redirect asked for, on
	// their return from their bank after authorising (or refusing) a
	// consent (migration 0023).
	SourceRedirect Source = "redirect"
	// SourceStatement: an imported bank statement's line.
	SourceStatement Source = "statement"
	// SourceOperator: an operator's action (the console's resolve, settle
	// reconcile resolve).
	SourceOperator Source = "operator"
)
