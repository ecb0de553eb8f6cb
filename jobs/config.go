package jobs

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/reconcile"
)

// legacyConcurrency bounds the workers of QueueBank, which only move jobs.
const legacyConcurrency = 10

// Defaults of Deps.
const (
	DefaultBankConcurrency        = 100
	DefaultMaintenanceConcurrency = 2
	DefaultSweepInterval          = 5 * time.Second
	DefaultSweepBatch             = 1000
	DefaultRetentionInterval      = time.Hour
	DefaultRematchInterval        = time.Minute
	DefaultJobTimeout             = time.Minute
	DefaultFetchPollInterval      = time.Second
	DefaultFetchCooldown          = 5 * time.Millisecond
	DefaultSoftStopTimeout        = 10 * time.Second
)

// Deps is what settle's workers need and how they are tuned. Every
// interval is configurable so that tests can use short ones.
type Deps struct {
	// Pool is the database (required).
	Pool *pgxpool.Pool
	// Resolver carries the bank work out (required unless Resolvers is
	// given). Its Lease must exceed JobTimeout: it is how long the sweep
	// leaves a claimed settlement alone.
	Resolver *reconcile.Resolver
	// Resolvers, when not empty, replaces Resolver: one per bank served,
	// each with its BankName (distinct). Each bank's jobs run on its own
	// queue (QueueFor) with BankConcurrency workers; a job whose settlement
	// belongs to another bank is refused and moved to that bank's queue.
	Resolvers []*reconcile.Resolver
	// Metrics counts the jobs refused for another bank (default: counted
	// nowhere).
	Metrics *metrics.Metrics
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the workers' and River's logs. Default: discard.
	Logger *slog.Logger

	// BankConcurrency is how many bank jobs (send, reconcile) one process
	// runs at once, and how many bank calls it has in flight for each bank:
	// the sends of a send_batch job count one each, while the bank has
	// their calls (the claim before the POST and the recording of its
	// answer hold no slot).
	BankConcurrency int
	// MaintenanceConcurrency is how many sweep/retention jobs run at once.
	MaintenanceConcurrency int
	// SweepInterval is how often the elected leader sweeps for due
	// settlements. It is also the uniqueness period of the jobs it enqueues
	// (at least one second, River's minimum).
	SweepInterval time.Duration
	// SweepBatch bounds the settlements claimed per sweep transaction.
	SweepBatch int
	// RetentionInterval is how often old receipts are deleted.
	RetentionInterval time.Duration
	// RematchInterval is how often the statement lines without a match
	// are examined again (RematchWorker).
	RematchInterval time.Duration
	// WatchInterval is the period of the return watch's rounds, for the
	// Resolvers that watch in bulk (reconcile.Resolver.WatchInBulk).
	// Default: the shortest MaxCheckInterval of the Resolvers (at least a
	// second).
	WatchInterval time.Duration
	// ReplayHorizon is --replay-horizon: receipts older than this, of
	// terminal settlements, are deleted.
	ReplayHorizon time.Duration
	// JobTimeout bounds one job's run.
	JobTimeout time.Duration
	// RescueAfter is when River rescues a job left running by a dead
	// process. Default: JobTimeout + 10s (just above the timeout).
	RescueAfter time.Duration
	// FetchPollInterval is how often an idle worker polls for jobs (it is
	// also woken by LISTEN/NOTIFY).
	FetchPollInterval time.Duration
	// FetchCooldown is the least time between two fetches of one queue
	// while jobs flow: a queue works at most its concurrency per cooldown.
	// Default DefaultFetchCooldown (at most FetchPollInterval).
	FetchCooldown time.Duration
	// SoftStopTimeout is how long a stopping worker lets in-flight jobs
	// finish before cancelling them. Default DefaultSoftStopTimeout.
	SoftStopTimeout time.Duration
}

func (d Deps) withDefaults() Deps {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if len(d.Resolvers) == 0 && d.Resolver != nil {
		d.Resolvers = []*reconcile.Resolver{d.Resolver}
	}
	if d.Resolver == nil && len(d.Resolvers) > 0 {
		d.Resolver = d.Resolvers[0]
	}
	if d.Metrics == nil {
		d.Metrics = metrics.NewUnregistered()
	}
	if d.BankConcurrency <= 0 {
		d.BankConcurrency = DefaultBankConcurrency
	}
	if d.MaintenanceConcurrency <= 0 {
		d.MaintenanceConcurrency = DefaultMaintenanceConcurrency
	}
	if d.SweepInterval <= 0 {
		d.SweepInterval = DefaultSweepInterval
	}
	if d.SweepBatch <= 0 {
		d.SweepBatch = DefaultSweepBatch
	}
	if d.RetentionInterval <= 0 {
		d.RetentionInterval = DefaultRetentionInterval
	}
	if d.RematchInterval <= 0 {
		d.RematchInterval = DefaultRematchInterval
	}
	if d.ReplayHorizon <= 0 {
		d.ReplayHorizon = intake.DefaultReplayHorizon
	}
	if d.JobTimeout <= 0 {
		d.JobTimeout = DefaultJobTimeout
	}
	if d.RescueAfter <= 0 {
		d.RescueAfter = d.JobTimeout + 10*time.Second
	}
	if d.FetchPollInterval <= 0 {
		d.FetchPollInterval = DefaultFetchPollInterval
	}
	if d.SoftStopTimeout <= 0 {
		d.SoftStopTimeout = DefaultSoftStopTimeout
	}
	if d.FetchCooldown <= 0 {
		d.FetchCooldown = DefaultFetchCooldown
	}
	d.FetchCooldown = min(d.FetchCooldown, d.FetchPollInterval)
	return d
}

// Validate reports a configuration that could not work.
func (d Deps) Validate() error {
	d = d.withDefaults()
	switch {
	case d.Pool == nil:
		return errors.New("jobs: Deps.Pool is required")
	case d.Resolver == nil:
		return errors.New("jobs: Deps.Resolver is required")
	}
	seen := map[string]bool{}
	for _, r := range d.Resolvers {
		if r == nil {
			return errors.New("jobs: a nil Resolver in Deps.Resolvers")
		}
		name := bankOf(r)
		if seen[name] {
			return fmt.Errorf("jobs: bank %s served twice", name)
		}
		seen[name] = true
		if r.Lease > 0 && r.Lease <= d.JobTimeout {
			return fmt.Errorf("jobs: resolver lease %s of bank %s must exceed the job timeout %s", r.Lease, name, d.JobTimeout)
		}
	}
	switch {
	case d.RescueAfter <= d.JobTimeout:
		return fmt.Errorf("jobs: rescue delay %s must exceed the job timeout %s", d.RescueAfter, d.JobTimeout)
	case lease(d) <= d.JobTimeout:
		return fmt.Errorf("jobs: resolver lease %s must exceed the job timeout %s", lease(d), d.JobTimeout)
	case lease(d) <= uniquePeriod(d):
		// A job re-enqueued after a lease must fall in a new uniqueness
		// period, or a dead job of the old one would block it.
		return fmt.Errorf("jobs: resolver lease %s must exceed the sweep's uniqueness period %s", lease(d), uniquePeriod(d))
	}
	return nil
}

// DefaultBank is the bank of a Resolver that names none (BankName empty):
// settle's own protocol, the default connector.
const DefaultBank = "settle"

// bankOf is the bank r serves.
func bankOf(r *reconcile.Resolver) string {
	if r.BankName != "" {
		return r.BankName
	}
	return DefaultBank
}

// Banks lists the banks deps serves, in order.
func (d Deps) Banks() []string {
	d = d.withDefaults()
	banks := make([]string, len(d.Resolvers))
	for i, r := range d.Resolvers {
		banks[i] = bankOf(r)
	}
	return banks
}

// NewWorkers registers every settle worker.
func NewWorkers(deps Deps) *river.Workers {
	d := deps.withDefaults()
	workers := river.NewWorkers()
	rt := &bankRouter{pool: d.Pool, resolvers: map[string]*reconcile.Resolver{}, metrics: d.Metrics, logger: d.Logger,
		slots: map[string]chan struct{}{}, sends: map[string]chan struct{}{}}
	for _, r := range d.Resolvers {
		rt.resolvers[bankOf(r)] = r
		rt.slots[bankOf(r)] = make(chan struct{}, d.BankConcurrency)
		rt.sends[bankOf(r)] = make(chan struct{}, sendsPerSlot*d.BankConcurrency)
	}
	river.AddWorker(workers, &SendWorker{router: rt, logger: d.Logger, now: d.Now})
	river.AddWorker(workers, &SendBatchWorker{router: rt, logger: d.Logger, now: d.Now})
	river.AddWorker(workers, &ReconcileWorker{router: rt, logger: d.Logger, now: d.Now})
	river.AddWorker(workers, &SweepWorker{pool: d.Pool, now: d.Now, lease: lease(d), period: uniquePeriod(d), batch: d.SweepBatch, logger: d.Logger, served: d.Banks()})
	river.AddWorker(workers, &RetentionWorker{pool: d.Pool, now: d.Now, horizon: d.ReplayHorizon, batch: 1000, logger: d.Logger})
	river.AddWorker(workers, &RematchWorker{pool: d.Pool, now: d.Now, logger: d.Logger})
	river.AddWorker(workers, &ReturnWatchWorker{pool: d.Pool, period: watchPeriod(d), served: d.Banks()})
	river.AddWorker(workers, &WatchReturnsWorker{router: rt, period: watchPeriod(d), timeout: d.JobTimeout, logger: d.Logger})
	return workers
}

// uniquePeriod is the uniqueness period of the jobs the sweep enqueues.
func uniquePeriod(d Deps) time.Duration { return max(d.SweepInterval, time.Second) }

// lease is the shortest lease of the Resolvers: the sweep claims for that
// long.
func lease(d Deps) time.Duration {
	l := time.Duration(0)
	for _, r := range d.Resolvers {
		if r != nil && r.Lease > 0 && (l == 0 || r.Lease < l) {
			l = r.Lease
		}
	}
	if l == 0 && d.Resolver != nil && d.Resolver.Lease > 0 {
		l = d.Resolver.Lease
	}
	if l == 0 {
		return reconcile.DefaultLease
	}
	return l
}

// PeriodicJobs returns the sweep, retention, statement_rematch and
// return_watch periodic jobs. Configure them
// on every worker process: River enqueues them from the elected leader only,
// so whichever process leads runs them. They are not unique: a second run
// after a change of leader is harmless (the sweep claims rows with SKIP
// LOCKED and a lease; retention deletes what is still there).
func PeriodicJobs(deps Deps) []*river.PeriodicJob {
	d := deps.withDefaults()
	return []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(d.SweepInterval), func() (river.JobArgs, *river.InsertOpts) {
			return SweepArgs{}, nil
		}, &river.PeriodicJobOpts{ID: "sweep", RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(d.RetentionInterval), func() (river.JobArgs, *river.InsertOpts) {
			return RetentionArgs{}, nil
		}, &river.PeriodicJobOpts{ID: "retention", RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(d.RematchInterval), func() (river.JobArgs, *river.InsertOpts) {
			return RematchArgs{}, nil
		}, &river.PeriodicJobOpts{ID: "statement_rematch", RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(watchPeriod(d)), func() (river.JobArgs, *river.InsertOpts) {
			return ReturnWatchArgs{}, nil
		}, &river.PeriodicJobOpts{ID: "return_watch", RunOnStart: true}),
	}
}

// NewRiverConfig returns the full River configuration of a settle worker:
// every worker, the bank and maintenance queues with their concurrency, the
// periodic jobs, the job timeout with the rescue delay just above it (so a
// job left running by a killed process is retried within about a minute,
// not an hour), and a bounded soft stop.
func NewRiverConfig(deps Deps) *river.Config {
	d := deps.withDefaults()
	queues := map[string]river.QueueConfig{
		// Jobs left on the queue of before banks had their own are only
		// moved from it.
		QueueBank:        {MaxWorkers: min(d.BankConcurrency, legacyConcurrency)},
		QueueMaintenance: {MaxWorkers: d.MaintenanceConcurrency},
	}
	for _, bank := range d.Banks() {
		queues[QueueFor(bank)] = river.QueueConfig{MaxWorkers: d.BankConcurrency}
	}
	return &river.Config{
		Logger:               d.Logger,
		Queues:               queues,
		Workers:              NewWorkers(d),
		PeriodicJobs:         PeriodicJobs(d),
		JobTimeout:           d.JobTimeout,
		RescueStuckJobsAfter: d.RescueAfter,
		FetchCooldown:        d.FetchCooldown,
		FetchPollInterval:    d.FetchPollInterval,
		SoftStopTimeout:      d.SoftStopTimeout,
	}
}
