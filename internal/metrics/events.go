package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// EventsCollector is a prometheus.Collector that reports the outcome
// events' backlog: settle_events_pending (deliveries not yet made, every
// sink counted) and settle_events_oldest_pending_seconds (the age of the
// oldest event among them, 0 when none). Like StateCollector it reads the
// database at most every CacheFor and reports the last values read when
// the query fails.
type EventsCollector struct {
	db   Querier
	opts StateCollectorOpts

	pending, oldest *prometheus.Desc

	mu       sync.Mutex
	readAt   time.Time
	count    int64
	age      float64
	haveRead bool
}

// NewEventsCollector returns a collector reading from db.
func NewEventsCollector(db Querier, opts StateCollectorOpts) *EventsCollector {
	if opts.CacheFor <= 0 {
		opts.CacheFor = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &EventsCollector{
		db: db, opts: opts,
		pending: prometheus.NewDesc("settle_events_pending",
			"Outcome event deliveries not yet made (pending, every sink counted).", nil, nil),
		oldest: prometheus.NewDesc("settle_events_oldest_pending_seconds",
			"Age of the oldest outcome event still pending at a sink (0 when none).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *EventsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *EventsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Now()
	if !c.haveRead || now.Sub(c.readAt) >= c.opts.CacheFor {
		c.read(now)
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(c.count))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, c.age)
}

// read refreshes the values; on an error it keeps the last ones.
func (c *EventsCollector) read(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	rows, err := c.db.Query(ctx, `SELECT count(*), min(e.created_at)
		FROM event_deliveries d JOIN settlement_events e ON e.seq = d.event_seq WHERE d.state = 'pending'`)
	if err != nil {
		return
	}
	defer rows.Close()
	var n int64
	var oldest *time.Time
	for rows.Next() {
		if err := rows.Scan(&n, &oldest); err != nil {
			return
		}
	}
	if rows.Err() != nil {
		return
	}
	c.count, c.age, c.readAt, c.haveRead = n, 0, now, true
	if oldest != nil {
		c.age = max(now.Sub(*oldest).Seconds(), 0)
	}
}
