package settlement

// Source is who moved a settlement: the source column of its transitions
// (settlement_transitions.source, migration 0020).
type Source string

// The sources of a transition.
const (
	// SourceIntake: intake received the settlement (its creation).
	SourceIntake Source = "intake"
	// SourceWorker: a worker's send or scheduled check.
	SourceWorker Source = "worker"
	// SourceSweep: a check the sweep took over (a lease ran out).
	SourceSweep Source = "sweep"
	// SourceWebhook: a check a hint asked for: a bank's webhook, or the
	// account holder's redirect after they authorised a consent.
	SourceWebhook Source = "webhook"
	// SourceStatement: an imported bank statement's line.
	SourceStatement Source = "statement"
	// SourceOperator: an operator's action (the console's resolve, settle
	// reconcile resolve).
	SourceOperator Source = "operator"
)
