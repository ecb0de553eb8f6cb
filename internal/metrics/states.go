package metrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/settle/settle/settlement"
)

// Querier is the part of a pgx pool or connection the state collector uses.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// StateCollectorOpts tune a StateCollector. Zero values take the defaults.
type StateCollectorOpts struct {
	// CacheFor is how long one database read serves scrapes (default 5s):
	// many Prometheus servers scraping many workers cost one query per
	// worker per CacheFor.
	CacheFor time.Duration
	// Timeout bounds the query (default 2s); a slow database makes the
	// scrape report the last values read, never hang.
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// StateCollector is a prometheus.Collector that reports the current number
// of settlements by state (settle_settlements{state}) and the number flagged
// needs_investigation (settle_needs_investigation). It reads them with one
// grouped query per scrape at most every CacheFor, so scraping is cheap;
// when the query fails it reports the last values read and counts the
// failure in settle_settlements_query_errors_total.
type StateCollector struct {
	db   Querier
	opts StateCollectorOpts

	settlements *prometheus.Desc
	needsInv    *prometheus.Desc
	errors      prometheus.Counter

	mu       sync.Mutex
	readAt   time.Time
	byState  map[settlement.State]int64
	needs    int64
	haveRead bool
}

// NewStateCollector returns a collector reading from db. Register it with
// the registry that serves /metrics.
func NewStateCollector(db Querier, opts StateCollectorOpts) *StateCollector {
	if opts.CacheFor <= 0 {
		opts.CacheFor = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &StateCollector{
		db:   db,
		opts: opts,
		settlements: prometheus.NewDesc("settle_settlements",
			"Settlements currently in each state.", []string{"state"}, nil),
		needsInv: prometheus.NewDesc("settle_needs_investigation",
			"Settlements currently flagged needs_investigation (the engine will not resolve them alone).", nil, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "settle_settlements_query_errors_total",
			Help: "Failed reads of the settlement counts behind settle_settlements (the last values read are reported instead).",
		}),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.settlements
	ch <- c.needsInv
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	byState, needs, ok := c.snapshot()
	if ok {
		// Every state, zero included, so dashboards and alerts never see a
		// series vanish.
		for _, s := range settlement.States {
			ch <- prometheus.MustNewConstMetric(c.settlements, prometheus.GaugeValue, float64(byState[s]), string(s))
		}
		ch <- prometheus.MustNewConstMetric(c.needsInv, prometheus.GaugeValue, float64(needs))
	}
	c.errors.Collect(ch)
}

// snapshot returns the cached counts, refreshing them when older than
// CacheFor. ok is false only when no read has ever succeeded.
func (c *StateCollector) snapshot() (map[settlement.State]int64, int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Now()
	if c.haveRead && now.Sub(c.readAt) < c.opts.CacheFor {
		return c.byState, c.needs, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	byState, needs, err := CountStates(ctx, c.db)
	if err != nil {
		c.errors.Inc()
		return c.byState, c.needs, c.haveRead
	}
	c.byState, c.needs, c.readAt, c.haveRead = byState, needs, now, true
	return byState, needs, true
}

// CountStates returns the number of settlements in each state (every state
// of settlement.States is present) and the number flagged needs_investigation, read in
// one grouped query.
func CountStates(ctx context.Context, db Querier) (map[settlement.State]int64, int64, error) {
	rows, err := db.Query(ctx, `SELECT state, count(*), count(*) FILTER (WHERE needs_investigation)
		FROM settlements GROUP BY state`)
	if err != nil {
		return nil, 0, fmt.Errorf("error counting settlements by state: %w", err)
	}
	defer rows.Close()
	byState := make(map[settlement.State]int64, len(settlement.States))
	for _, s := range settlement.States {
		byState[s] = 0
	}
	var needs int64
	for rows.Next() {
		var state settlement.State
		var n, inv int64
		if err := rows.Scan(&state, &n, &inv); err != nil {
			return nil, 0, fmt.Errorf("error reading settlement counts: %w", err)
		}
		byState[state] = n
		needs += inv
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("error reading settlement counts: %w", err)
	}
	return byState, needs, nil
}
