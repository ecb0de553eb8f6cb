package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a Prometheus registry holding the Go runtime and
// process collectors and, when db is not nil, the settlement state gauges
// (settle_settlements{state}, settle_needs_investigation) and the outcome
// events' backlog (settle_events_pending, settle_events_oldest_pending_seconds)
// read from db.
// Pass it to New for settle's own collectors and to Handler.
func NewRegistry(db Querier) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if db != nil {
		reg.MustRegister(NewStateCollector(db, StateCollectorOpts{}), NewEventsCollector(db, StateCollectorOpts{}))
	}
	return reg
}

// Handler serves the metrics of reg in the Prometheus exposition
// format. A collector that fails is reported in the scrape, not as a 500,
// so one bad gauge never hides the others.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          reg,
		EnableOpenMetrics: true,
	})
}
