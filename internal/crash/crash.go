// Package crash implements the crash points of DESIGN.md section 5 for
// fault tests: with SETTLE_CRASH_AT=<point> the process kills itself with
// SIGKILL the first time it reaches that point (SETTLE_CRASH_AFTER=N: the
// Nth time). Inert when the variable is unset. It never does anything else.
package crash

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// The crash points of the contract.
const (
	IntakeBeforeCommit  = "intake.before_commit"
	IntakeAfterCommit   = "intake.after_commit"
	SendBeforeBank      = "send.before_bank"
	SendAfterBank       = "send.after_bank"
	SendAfterCommit     = "send.after_commit"
	ConfirmBeforeCommit = "confirm.before_commit"
	ConfirmAfterCommit  = "confirm.after_commit"
)

// Points lists every crash point a worker reaches.
var Points = []string{IntakeBeforeCommit, IntakeAfterCommit, SendBeforeBank, SendAfterBank, SendAfterCommit, ConfirmBeforeCommit, ConfirmAfterCommit}

// The crash points of a shared outcome transaction (issue 28), reached by
// a worker whose concurrent sends record their answers together
// (reconcile.Resolver.OutcomeGroup): just before and just after a
// transaction holding the outcomes of two or more sends commits. A worker
// reaches them only when sends overlap, so they are not in Points.
const (
	OutcomesBeforeCommit = "outcomes.before_commit"
	OutcomesAfterCommit  = "outcomes.after_commit"
)

// The crash points of the consent step (DESIGN.md section 13), reached only
// at a bank whose payments need a consent first (--bank obie): just before
// and just after the consent request leaves, and just after its answer
// commits. They are not in Points, which every worker reaches.
const (
	ConsentBeforeBank  = "consent.before_bank"
	ConsentAfterBank   = "consent.after_bank"
	ConsentAfterCommit = "consent.after_commit"
)

// The crash points of the account holder's authorisation (issue 33), in the
// console's redirect endpoint at a bank whose payments are made with the
// account holder's token (--bank obie): just after the bank answered the
// code exchange (the code is spent, the token not yet stored), and just
// after the token was stored (the payment not yet claimed).
const (
	AuthoriseAfterBank   = "authorise.after_bank"
	AuthoriseAfterCommit = "authorise.after_commit"
)

// ConsentPoints lists the crash points of the consent step and of the
// account holder's authorisation.
var ConsentPoints = []string{ConsentBeforeBank, ConsentAfterBank, ConsentAfterCommit, AuthoriseAfterBank, AuthoriseAfterCommit}

// The crash points of `settle statement import`: after a file's statements
// and entries are written and matched, just before and just after its
// transaction commits. No worker reaches them, so they are not in Points.
const (
	StatementBeforeCommit = "statement.before_commit"
	StatementAfterCommit  = "statement.after_commit"
)

// The crash points of a return (DESIGN.md section 15): after the
// transition to returned and its reversal are written, just before and
// just after their transaction commits. A worker reaches them only when
// the bank returns a payment, so they are not in Points.
const (
	ReturnBeforeCommit = "return.before_commit"
	ReturnAfterCommit  = "return.after_commit"
)

// The crash points of an event source (DESIGN.md section 18), reached only
// by a worker that consumes a queue (--source): just before the
// transaction that records a fetched batch commits, just after it
// committed (nothing acknowledged to the broker yet), and just after the
// batch was acknowledged. They are not in Points, which every worker
// reaches.
const (
	SourceBeforeCommit = "source.before_commit"
	SourceAfterCommit  = "source.after_commit"
	SourceAfterAck     = "source.after_ack"
)

// SourcePoints lists the crash points of an event source.
var SourcePoints = []string{SourceBeforeCommit, SourceAfterCommit, SourceAfterAck}

// The crash points of the events relay (DESIGN.md section 19): just before
// an event is sent to a sink, and just after the sink has it but before its
// delivery is recorded. A worker reaches them only with a sink configured
// (--events-url), so they are not in Points.
const (
	EventsBeforeSend = "events.before_send"
	EventsAfterSend  = "events.after_send"
)

// EventsPoints lists the crash points of the events relay.
var EventsPoints = []string{EventsBeforeSend, EventsAfterSend}

var (
	once  sync.Once
	armed string
	after int64 = 1
	hits  atomic.Int64
)

func load() {
	armed = os.Getenv("SETTLE_CRASH_AT")
	if n, err := strconv.ParseInt(os.Getenv("SETTLE_CRASH_AFTER"), 10, 64); err == nil && n > 0 {
		after = n
	}
}

// Armed reports whether the process was started with a crash point.
func Armed() bool {
	once.Do(load)
	return armed != ""
}

// Point kills the process with SIGKILL if name is the armed crash point and
// this is the Nth time it is reached.
func Point(name string) {
	once.Do(load)
	if armed == "" || armed != name {
		return
	}
	if hits.Add(1) == after {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; never return into the code path.
	}
}
