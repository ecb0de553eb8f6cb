package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/settle/settle/events"
)

// modelReceiver is a consumer of the outcome events (DESIGN.md section
// 19), as the simulation's sink: it keeps each event id once and, per
// settlement, the n of each event in the order they came. As the seed
// says, per attempt and whatever order the relay's goroutines run in, it
// refuses a delivery (the event is not kept) or loses its answer (the
// event is kept but the relay hears a failure, as after a crash between
// the receiver's answer and its record, or a timeout), so the relay
// retries and the receiver sees duplicates.
type modelReceiver struct {
	seed uint64

	mu       sync.Mutex
	attempts map[string]int
	seen     map[string]bool
	order    map[string][]int
	dups     int
}

func newModelReceiver(seed uint64) *modelReceiver {
	return &modelReceiver{seed: seed, attempts: map[string]int{}, seen: map[string]bool{}, order: map[string][]int{}}
}

// Name is the sink's name in event_deliveries.
func (m *modelReceiver) Name() string { return "sim:receiver" }

// Deliver receives one attempt.
func (m *modelReceiver) Deliver(_ context.Context, e events.Event) events.Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attempts[e.ID]++
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", m.seed, e.ID, m.attempts[e.ID])
	switch h.Sum64() % 8 {
	case 0, 1:
		return events.Result{Status: 500, Err: fmt.Errorf("event %s refused (planted)", e.ID)}
	case 2:
		m.keep(e.ID)
		return events.Result{Err: fmt.Errorf("event %s: answer lost (planted)", e.ID)}
	}
	m.keep(e.ID)
	return events.Result{Status: 204}
}

// keep handles an event once; m.mu is held.
func (m *modelReceiver) keep(id string) {
	if m.seen[id] {
		m.dups++
		return
	}
	m.seen[id] = true
	i := strings.LastIndexByte(id, ':')
	n, _ := strconv.Atoi(id[i+1:])
	m.order[id[:i]] = append(m.order[id[:i]], n)
}

// startEvents registers the model receiver before any event is written.
func (r *run) startEvents(ctx context.Context) error {
	r.rcv = newModelReceiver(r.cfg.Seed)
	r.relay = &events.Relay{Pool: r.pool, Sinks: []events.Sink{r.rcv}, Now: r.clock.Now,
		RetryMin: time.Millisecond, RetryMax: time.Millisecond, RetryFor: 1000 * time.Hour, Batch: 8}
	return r.relay.Register(ctx)
}

// relayPass makes one pass of the relay to the model receiver (between two
// steps: no engine call runs meanwhile).
func (r *run) relayPass(ctx context.Context) error {
	if r.relay == nil {
		return nil
	}
	_, err := r.relay.Once(ctx, r.rcv)
	return err
}

// eventChecks drains the relay (the clock moving on so every retry is due)
// and checks the model receiver: each settlement's events arrived, each
// once after deduplication, complete (1 … the settlement's count of events
// in the outbox) and in order.
func (r *run) eventChecks(ctx context.Context) ([]string, error) {
	if r.relay == nil {
		return nil, nil
	}
	for range 10_000 {
		var pending int
		if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM event_deliveries WHERE state <> 'delivered'`).Scan(&pending); err != nil {
			return nil, fmt.Errorf("error counting event deliveries: %w", err)
		}
		if pending == 0 {
			break
		}
		r.clock.Advance(time.Second)
		if err := r.relayPass(ctx); err != nil {
			return nil, err
		}
	}
	rows, err := r.pool.Query(ctx, `SELECT settlement_id, event_seq FROM settlements ORDER BY settlement_id`)
	if err != nil {
		return nil, fmt.Errorf("error reading the settlements' event counts: %w", err)
	}
	defer rows.Close()
	var out []string
	r.rcv.mu.Lock()
	defer r.rcv.mu.Unlock()
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("error reading the settlements' event counts: %w", err)
		}
		want := make([]int, n)
		for i := range want {
			want[i] = i + 1
		}
		if got := r.rcv.order[id]; !slices.Equal(got, want) {
			out = append(out, fmt.Sprintf("events: %s reached the receiver as %v, want %v", id, got, want))
		}
		r.res.Stats.Events += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading the settlements' event counts: %w", err)
	}
	r.res.Stats.EventDuplicates = r.rcv.dups
	return out, nil
}
