package sourcetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/source"
)

// bundle is one case's database, broker and intake service. The intake
// reaches the database through a switch (cut) that can make it
// unavailable; the checks use a pool of their own.
type bundle struct {
	t      *testing.T
	kind   string
	db     *dbtest.DB
	broker Broker
	svc    *intake.Service
	cut    *cutter

	mu sync.Mutex
	// acked holds the body of each message acknowledged, by transport id.
	acked map[string]string
}

func newBundle(t *testing.T, h Harness) *bundle {
	t.Helper()
	db := dbtest.New(t)
	cut := &cutter{conns: map[net.Conn]struct{}{}}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.DialFunc = cut.dial
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.NewService(intake.Config{DB: pool, Jobs: jobs.Inserter{Client: client}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, kind: h.Kind(), db: db, broker: h.Broker(t), svc: svc, cut: cut, acked: map[string]string{}}
}

// cutter dials the intake's database connections and can cut them all,
// refusing new ones until it is mended: to PostgreSQL's clients, an
// outage.
type cutter struct {
	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	down := c.down
	c.mu.Unlock()
	if down {
		return nil, fmt.Errorf("dial %s %s: connection refused (the suite's database outage)", network, addr)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		conn.Close()
		return nil, fmt.Errorf("dial %s %s: connection refused (the suite's database outage)", network, addr)
	}
	tc := &trackedConn{Conn: conn, c: c}
	c.conns[tc] = struct{}{}
	return tc, nil
}

// setDown cuts every connection and refuses new ones (true), or lets them
// through again (false).
func (c *cutter) setDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
	if down {
		for conn := range c.conns {
			_ = conn.(*trackedConn).Conn.Close()
		}
	}
}

type trackedConn struct {
	net.Conn
	c    *cutter
	once sync.Once
}

func (tc *trackedConn) Close() error {
	tc.once.Do(func() {
		tc.c.mu.Lock()
		delete(tc.c.conns, tc)
		tc.c.mu.Unlock()
	})
	return tc.Conn.Close()
}

// open opens a consumer with lease Lease unless o says otherwise, wrapped
// so that each acknowledgement is checked against the database.
func (b *bundle) open(o Options) *checked {
	b.t.Helper()
	if o.Lease == 0 {
		o.Lease = Lease
	}
	src := b.broker.Open(b.t, o)
	return &checked{Source: src, b: b}
}

// checked is a source whose acknowledgements are checked: a message may be
// acknowledged only once its outcome is committed (its settlement exists,
// or its reject is stored).
type checked struct {
	source.Source
	b     *bundle
	acked atomic.Int64
}

func (c *checked) Ack(ctx context.Context, msgs []source.Message) error {
	c.b.checkCommitted(msgs)
	c.acked.Add(int64(len(msgs)))
	c.b.mu.Lock()
	for _, m := range msgs {
		c.b.acked[m.TransportID] = string(m.Data)
	}
	c.b.mu.Unlock()
	return c.Source.Ack(ctx, msgs)
}

// copies is how many of the messages acknowledged are further copies of
// an event: messages of their own (transport ids of their own) carrying
// the same bytes as another. Each is a replay. A case publishes copies on
// purpose; a broker may add some (a producer's retry after a lost answer
// publishes the message again: the stand-ins do so under load). A
// message delivered again is the same message, never a copy.
func (b *bundle) copies() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	bodies := make(map[string]int, len(b.acked))
	for _, data := range b.acked {
		bodies[data]++
	}
	n := 0
	for data, k := range bodies {
		var ev struct {
			SettlementID string `json:"settlement_id"`
		}
		if json.Unmarshal([]byte(data), &ev) == nil && ev.SettlementID != "" {
			n += k - 1
		}
	}
	return n
}

// checkReplays fails the case unless the replays recorded are the
// copies acknowledged, plus extra (the deliveries again of messages
// whose outcome had committed, that the case caused). A copy the case
// did not publish is logged.
func (b *bundle) checkReplays(published, extra int, why string) {
	b.t.Helper()
	copies := b.copies()
	if copies > published {
		b.t.Logf("the broker held %d copies of events beyond the %d the case published (a producer's retry after a lost answer): each is a replay", copies-published, published)
	}
	if got, want := b.replays(), copies+extra; got != want {
		b.t.Errorf("replays: %d, want %d (%d copies of events acknowledged, %d published by the case; %s)", got, want, copies, published, why)
	}
}

// checkCommitted fails the case for each of msgs whose outcome is not in
// the database.
func (b *bundle) checkCommitted(msgs []source.Message) {
	tids, sids := make([]string, len(msgs)), make([]string, len(msgs))
	for i, m := range msgs {
		tids[i] = m.TransportID
		var ev struct {
			SettlementID string `json:"settlement_id"`
		}
		if json.Unmarshal(m.Data, &ev) == nil {
			sids[i] = ev.SettlementID
		}
	}
	rows, err := b.db.Pool.Query(context.Background(), `
		SELECT x.t FROM unnest($2::text[], $3::text[]) AS x(t, s)
		WHERE NOT EXISTS (SELECT 1 FROM intake_rejects r WHERE r.source = $1 AND r.transport_id = x.t)
		  AND NOT EXISTS (SELECT 1 FROM settlements s WHERE s.settlement_id = x.s)`, b.kind, tids, sids)
	if err != nil {
		b.t.Errorf("checking acknowledged messages: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var tid string
		if err := rows.Scan(&tid); err != nil {
			b.t.Errorf("checking acknowledged messages: %v", err)
			return
		}
		b.t.Errorf("message %s acknowledged before its outcome committed", tid)
	}
	if err := rows.Err(); err != nil {
		b.t.Errorf("checking acknowledged messages: %v", err)
	}
}

// loop returns a Loop over src with fast retries; in is the intake (nil:
// the bundle's), mod adjusts the config.
func (b *bundle) loop(src source.Source, in source.Intake, mod func(*source.Config)) *source.Loop {
	b.t.Helper()
	if in == nil {
		in = b.svc
	}
	// The leases are kept alive three times per lease, as the worker
	// does (--source-lease / 3): a slow batch keeps its messages.
	cfg := source.Config{Source: src, Intake: in, RetryDelay: 50 * time.Millisecond, PauseMax: 500 * time.Millisecond, LeaseEvery: Lease / 3}
	if mod != nil {
		mod(&cfg)
	}
	l, err := source.NewLoop(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	return l
}

// running is a loop running in the background.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs l until stop.
func start(l *source.Loop) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = l.Run(ctx)
	}()
	return r
}

// stop ends the loop and waits for it (a batch in work is finished).
func (r *running) stop() {
	r.cancel()
	<-r.done
}

// drain runs the loops until the broker is drained, then stops them.
func (b *bundle) drain(within time.Duration, loops ...*source.Loop) {
	b.t.Helper()
	var rs []*running
	for _, l := range loops {
		rs = append(rs, start(l))
	}
	defer func() {
		for _, r := range rs {
			r.stop()
		}
	}()
	b.waitDrained(within)
}

// waitDrained waits until the broker says every message was acknowledged.
func (b *bundle) waitDrained(within time.Duration) {
	b.t.Helper()
	b.waitFor(within, "the broker drained", b.broker.Drained)
}

// waitFor polls cond every 50 ms (the broker's and the database's state
// give no signal) until it holds, failing the case after within.
func (b *bundle) waitFor(within time.Duration, what string, cond func(*testing.T) (bool, string)) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond(b.t)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("waiting for %s: not after %s: %s", what, within, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSettlements waits until at least n settlements exist.
func (b *bundle) waitSettlements(within time.Duration, n int) {
	b.t.Helper()
	b.waitFor(within, fmt.Sprintf("%d settlements", n), func(*testing.T) (bool, string) {
		got := b.count(`SELECT count(*) FROM settlements`)
		return got >= n, fmt.Sprintf("%d settlements", got)
	})
}

// count runs a count(*) query.
func (b *bundle) count(query string, args ...any) int {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := b.db.Pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		b.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// replays is the number of replays recorded.
func (b *bundle) replays() int {
	return b.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`)
}

// checkOnce fails the case unless each of ids has exactly one receipt,
// one settlement, one creation transition and one send job, and nothing
// else was created.
func (b *bundle) checkOnce(ids []string) {
	b.t.Helper()
	var settlements, receipts, creations, sends, distinct int
	err := b.db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM settlements), (SELECT count(*) FROM settlement_receipts),
		(SELECT count(*) FROM settlement_transitions WHERE from_state IS NULL),
		(SELECT count(*) FROM river_job WHERE kind = 'send_instruction'),
		(SELECT count(*) FROM settlements WHERE settlement_id = ANY($1))`, ids).
		Scan(&settlements, &receipts, &creations, &sends, &distinct)
	if err != nil {
		b.t.Fatal(err)
	}
	n := len(ids)
	if settlements != n || receipts != n || creations != n || sends != n || distinct != n {
		b.t.Errorf("settlements=%d receipts=%d creations=%d send jobs=%d of the expected=%d, want %d each",
			settlements, receipts, creations, sends, distinct, n)
	}
}

// publishEvent publishes ev as JSON and returns its transport id.
func (b *bundle) publishEvent(ev intake.Event) string {
	b.t.Helper()
	return b.broker.Publish(b.t, mustJSON(b.t, ev))
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Event returns a valid event number i of a run named prefix: settlement
// id prefix-000i.
func Event(prefix string, i int) intake.Event {
	return intake.Event{
		SettlementID: fmt.Sprintf("%s-%04d", prefix, i),
		AccountID:    "acc-1",
		AmountCents:  int64(100 + i),
		Currency:     "EUR",
		Beneficiary:  fmt.Sprintf("bene-%d", i),
		EventID:      fmt.Sprintf("%s-evt-%d", prefix, i),
	}
}

// IDs returns the settlement ids of Event(prefix, 0…n-1).
func IDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = Event(prefix, i).SettlementID
	}
	return out
}

// errKilled is what the intake of a killed consumer answers from then on.
var errKilled = errors.New("the consumer's process was killed")

// held is an intake that holds the first batch it is given until
// released, signalling its arrival; with kill set, it then fails that
// batch and everything after, as a killed process would never commit.
type held struct {
	source.Intake
	arrived chan struct{}
	release chan struct{}
	kill    bool
	first   atomic.Bool
	dead    atomic.Bool
	// events is how many events the held batch had.
	events atomic.Int64
}

func newHeld(in source.Intake, kill bool) *held {
	return &held{Intake: in, arrived: make(chan struct{}, 1), release: make(chan struct{}), kill: kill}
}

func (h *held) SubmitBatchTx(ctx context.Context, evs []intake.Event, inTx intake.InTx) ([]intake.Outcome, error) {
	if h.first.CompareAndSwap(false, true) {
		h.events.Store(int64(len(evs)))
		h.arrived <- struct{}{}
		<-h.release
		if h.kill {
			h.dead.Store(true)
		}
	}
	if h.dead.Load() {
		return nil, fmt.Errorf("%w: %w", intake.ErrUnavailable, errKilled)
	}
	return h.Intake.SubmitBatchTx(ctx, evs, inTx)
}

func (h *held) Ping(ctx context.Context) error {
	if h.dead.Load() {
		return errKilled
	}
	return h.Intake.Ping(ctx)
}

// lostAcks is a source whose acknowledgements never reach the broker
// until one holding a valid event was lost.
type lostAcks struct {
	source.Source
	mu     sync.Mutex
	events int // valid events among the messages whose ack was lost
}

func (s *lostAcks) Ack(ctx context.Context, msgs []source.Message) error {
	s.mu.Lock()
	lose := s.events == 0
	if lose {
		for _, m := range msgs {
			if _, err := intake.DecodeEvent(m.Data); err == nil {
				s.events++
			}
		}
	}
	s.mu.Unlock()
	if lose {
		return nil
	}
	return s.Source.Ack(ctx, msgs)
}

// lostEvents counts the valid events among the messages whose ack was
// lost.
func (s *lostAcks) lostEvents() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events
}

// tooOld is an event older than the replay horizon.
func tooOld() intake.Event {
	ev := Event("old", 0)
	ev.OccurredAt = time.Now().Add(-800 * time.Hour)
	return ev
}

// huge is an event over the size limit.
func huge() intake.Event {
	ev := Event("huge", 0)
	ev.Beneficiary = strings.Repeat("b", intake.MaxEventBytes)
	return ev
}
