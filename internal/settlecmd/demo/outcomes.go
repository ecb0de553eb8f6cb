package demo

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/events"
)

// outcomeSinks are the demo's two webhook receivers (DESIGN.md section
// 19), on one local server: steady answers every event at once, flaky
// answers 503 to every fourth call, so the report shows retries and
// deduplication. Both verify every signature and check each settlement's
// order (events.Receiver).
type outcomeSinks struct {
	srv    *http.Server
	secret string
	sinks  []outcomeSink
}

type outcomeSink struct {
	url string
	rcv *events.Receiver
}

// startOutcomeSinks starts the receivers with a fresh secret.
func startOutcomeSinks() (*outcomeSinks, error) {
	key := make([]byte, 24)
	_, _ = rand.Read(key)
	o := &outcomeSinks{secret: events.SecretPrefix + base64.StdEncoding.EncodeToString(key)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("error starting the demo's webhook receivers: %w", err)
	}
	mux := http.NewServeMux()
	for _, name := range []string{"steady", "flaky"} {
		rcv, err := events.NewReceiver(o.secret)
		if err != nil {
			ln.Close()
			return nil, err
		}
		if name == "flaky" {
			rcv.Fail = func(n int) bool { return n%4 == 0 }
		}
		mux.Handle("POST /"+name, rcv)
		o.sinks = append(o.sinks, outcomeSink{url: "http://" + ln.Addr().String() + "/" + name, rcv: rcv})
	}
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	return o, nil
}

// env configures a worker to deliver to the receivers, retrying soon.
func (o *outcomeSinks) env() []string {
	urls := make([]string, len(o.sinks))
	for i, s := range o.sinks {
		urls[i] = s.url
	}
	return []string{events.EnvSecret + "=" + o.secret, "SETTLE_EVENTS_URL=" + strings.Join(urls, " "),
		"SETTLE_EVENTS_RETRY_MIN=50ms", "SETTLE_EVENTS_RETRY_MAX=500ms"}
}

func (o *outcomeSinks) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.srv.Shutdown(ctx)
}

// OutcomeReport is what the receivers got.
type OutcomeReport struct {
	// Events is the number of outcome events in the outbox, Settlements
	// the settlements they belong to.
	Events, Settlements int
	Sinks               []SinkReport
	// Complete counts the settlements whose every event arrived, in
	// order, at every sink.
	Complete int
}

// SinkReport is one receiver's part of the report.
type SinkReport struct {
	URL   string
	Stats events.ReceiverStats
}

// outcomes waits until every outcome event is delivered to every sink (or
// o.Timeout passes), then checks each settlement's sequence at each
// receiver against its count of events in the outbox.
func (o Options) outcomes(ctx context.Context, pool *pgxpool.Pool, sinks *outcomeSinks, rep *Report) error {
	deadline := time.NewTimer(o.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		var evs, undelivered int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM settlement_events),
			(SELECT count(*) FROM event_deliveries WHERE state <> 'delivered')`).Scan(&evs, &undelivered); err != nil {
			return fmt.Errorf("error counting outcome events: %w", err)
		}
		done = undelivered == 0
		for _, s := range sinks.sinks {
			done = done && s.rcv.Stats().Accepted >= evs
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			rep.Violations = append(rep.Violations, fmt.Sprintf("%d outcome event deliveries still undelivered after %s", undelivered, o.Timeout))
			done = true
		case <-tick.C:
		}
	}
	rows, err := pool.Query(ctx, `SELECT settlement_id, event_seq FROM settlements WHERE event_seq > 0`)
	if err != nil {
		return fmt.Errorf("error reading the settlements' event counts: %w", err)
	}
	want := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return fmt.Errorf("error reading the settlements' event counts: %w", err)
		}
		want[id] = n
		rep.Outcomes.Events += n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("error reading the settlements' event counts: %w", err)
	}
	rep.Outcomes.Settlements = len(want)
	complete := map[string]int{}
	for _, s := range sinks.sinks {
		st := s.rcv.Stats()
		rep.Outcomes.Sinks = append(rep.Outcomes.Sinks, SinkReport{URL: s.url, Stats: st})
		for _, p := range st.Problems {
			rep.Violations = append(rep.Violations, fmt.Sprintf("outcome events at %s: %s", s.url, p))
		}
		if st.Bad > 0 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("%d outcome events at %s failed signature verification", st.Bad, s.url))
		}
		missing := 0
		for id, n := range want {
			if st.Last[id] == n {
				complete[id]++
			} else {
				missing++
			}
		}
		if missing > 0 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("%d settlements' outcome events incomplete at %s", missing, s.url))
		}
	}
	for _, c := range complete {
		if c == len(sinks.sinks) {
			rep.Outcomes.Complete++
		}
	}
	return nil
}

// printOutcomes writes the outcome events' part of the explanation.
func (r Report) printOutcomes(p func(string, ...any)) {
	oc := r.Outcomes
	if len(oc.Sinks) == 0 {
		return
	}
	p("  - Every transition, flag and conflict wrote its outcome event in the same transaction: %d events for",
		oc.Events)
	p("    %d settlements. The worker delivered them as signed webhooks (Standard Webhooks) to %d local receivers",
		oc.Settlements, len(oc.Sinks))
	p("    that verify each signature and handle each webhook-id once:")
	for _, s := range oc.Sinks {
		st := s.Stats
		verified := "every signature verified"
		if st.Bad > 0 {
			verified = fmt.Sprintf("%d bad signatures", st.Bad)
		}
		retried := ""
		if st.Refused > 0 {
			retried = fmt.Sprintf(", %d calls answered 503 on purpose and retried", st.Refused)
		}
		p("      %s: %d events received, %d duplicates ignored, %s%s", s.URL, st.Accepted, st.Duplicates, verified, retried)
	}
	if oc.Complete == oc.Settlements {
		p("    Each settlement's sequence is complete at each sink: %d of %d settlements received <id>:1 … <id>:n in order.",
			oc.Complete, oc.Settlements)
	} else {
		p("    Only %d of %d settlements received every event in order at every sink.", oc.Complete, oc.Settlements)
	}
}
