package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/kafkatest"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/source"
	kafkasrc "github.com/settle/settle/source/kafka"
	"github.com/settle/settle/source/sourcetest"
)

// TestParseSpec: the SPEC of --source kafka://….
func TestParseSpec(t *testing.T) {
	t.Parallel()
	good := map[string]kafkasrc.Spec{
		"kafka://k1:9092/payouts":                           {Brokers: []string{"k1:9092"}, Topic: "payouts", Group: kafkasrc.DefaultGroup},
		"kafka://k1:9092,k2:9093/settle.requests?group=g-1": {Brokers: []string{"k1:9092", "k2:9093"}, Topic: "settle.requests", Group: "g-1"},
		"kafka://[::1]:9092/t":                              {Brokers: []string{"[::1]:9092"}, Topic: "t", Group: kafkasrc.DefaultGroup},
	}
	for spec, want := range good {
		got, err := kafkasrc.ParseSpec(spec)
		if err != nil || strings.Join(got.Brokers, ",") != strings.Join(want.Brokers, ",") || got.Topic != want.Topic || got.Group != want.Group {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
		if err == nil && got.String() != spec {
			t.Errorf("ParseSpec(%q).String() = %q", spec, got.String())
		}
	}
	for _, spec := range []string{"kafka://", "kafka://k1:9092", "kafka://k1:9092/", "kafka://k1/t", "kafka://k1:x/t",
		"kafka://k1:9092/a b", "kafka://k1:9092/t?group=", "kafka://k1:9092/t?grp=x", "kafka://:9092/t", "nats", "kafka:/k1:9092/t"} {
		if got, err := kafkasrc.ParseSpec(spec); err == nil {
			t.Errorf("ParseSpec(%q) = %+v, want an error", spec, got)
		}
	}
}

// TestNoTopicCreated: a missing topic is an error at Open and for a
// publisher, and neither creates it (settle creates no topic; kfake, like
// a broker with auto.create.topics.enable, would create one if asked).
func TestNoTopicCreated(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kafkasrc.Open(ctx, kafkasrc.Config{Brokers: []string{c.Addr()}, Topic: "missing"}); !errors.Is(err, kafkasrc.ErrNoTopic) {
		t.Errorf("Open on a missing topic: %v, want ErrNoTopic", err)
	}
	if _, err := kafkasrc.NewPublisher(ctx, []string{c.Addr()}, "missing", "test"); !errors.Is(err, kafkasrc.ErrNoTopic) {
		t.Errorf("NewPublisher on a missing topic: %v, want ErrNoTopic", err)
	}
	_, adm := c.Client(t)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("missing") {
		t.Error("the missing topic was created")
	}
}

// TestRetention: the topic's retention.ms, as the loop compares it with
// --replay-horizon.
func TestRetention(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	src := openSource(t, c, kafkasrc.Config{})
	got, err := src.Retention(context.Background())
	if err != nil || got != kafkatest.Retention {
		t.Errorf("Retention = %v, %v; want 168h", got, err)
	}
}

// newIntake returns an intake service on pool.
func newIntake(t *testing.T, pool *pgxpool.Pool) *intake.Service {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.NewService(intake.Config{DB: pool, Jobs: jobs.Inserter{Client: client}})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// heldOnce holds the first batch until release, signalling its arrival.
type heldOnce struct {
	*intake.Service
	arrived chan struct{}
	release chan struct{}
	held    atomic.Bool
}

func (h *heldOnce) SubmitBatchTx(ctx context.Context, evs []intake.Event, inTx intake.InTx) ([]intake.Outcome, error) {
	if h.held.CompareAndSwap(false, true) {
		h.arrived <- struct{}{}
		<-h.release
	}
	return h.Service.SubmitBatchTx(ctx, evs, inTx)
}

// TestRebalanceMidBatch: a second worker joins the group while the first
// has a batch in work. The rebalance waits for that batch: it is recorded,
// committed and its offsets committed before its partitions move, so the
// new holder starts after it. Every event is settled once and none is a
// replay (nothing was delivered twice), the invalid records are kept in
// intake_rejects once each, and every partition ends committed to its end.
func TestRebalanceMidBatch(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	c := startCluster(t)
	pub := newPublisher(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 300
	var bad []string
	for i := range n {
		if _, err := pub.PublishEvent(ctx, mustJSON(t, sourcetest.Event("reb", i))); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			p, err := pub.Publish(ctx, []byte("bad"), []byte("not an event"))
			if err != nil {
				t.Fatal(err)
			}
			bad = append(bad, p.TransportID(topic))
		}
	}
	svc := newIntake(t, db.Pool)
	first := &heldOnce{Service: svc, arrived: make(chan struct{}, 1), release: make(chan struct{})}
	blocked := make(chan struct{})
	var once sync.Once
	a := openSource(t, c, kafkasrc.Config{Name: "a", SessionTimeout: 2 * time.Second, Opts: []kgo.Opt{
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { once.Do(func() { close(blocked) }) }),
	}})
	ma, mb := metrics.NewUnregistered(), metrics.NewUnregistered()
	la, err := source.NewLoop(source.Config{Source: a, Intake: first, BatchSize: 40, Metrics: ma})
	if err != nil {
		t.Fatal(err)
	}
	actx, astop := context.WithCancel(ctx)
	adone := make(chan struct{})
	go func() { defer close(adone); _ = la.Run(actx) }()
	<-first.arrived

	// B joins: the group rebalances, and the rebalance waits for A's
	// batch (the client says so: a callback is blocked by the poll).
	b := openSource(t, c, kafkasrc.Config{Name: "b", SessionTimeout: 2 * time.Second})
	lb, err := source.NewLoop(source.Config{Source: b, Intake: svc, BatchSize: 40, Metrics: mb})
	if err != nil {
		t.Fatal(err)
	}
	bctx, bstop := context.WithCancel(ctx)
	bdone := make(chan struct{})
	go func() { defer close(bdone); _ = lb.Run(bctx) }()
	<-blocked
	close(first.release)
	_, adm := c.Client(t)
	waitFor(t, "the group drained", func() bool { ok, _ := kafkatest.Drained(adm, kafkasrc.DefaultGroup, topic); return ok })
	astop()
	bstop()
	<-adone
	<-bdone

	var settlements, receipts, replays, rejects int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM settlements), (SELECT count(*) FROM settlement_receipts),
		(SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts), (SELECT count(*) FROM intake_rejects WHERE source = 'kafka' AND transport_id = ANY($1))`,
		bad).Scan(&settlements, &receipts, &replays, &rejects); err != nil {
		t.Fatal(err)
	}
	if settlements != n || receipts != n || replays != 0 || rejects != len(bad) {
		t.Errorf("%d settlements, %d receipts, %d replays, %d of %d rejects; want %d, %d, 0, all", settlements, receipts, replays, rejects, len(bad), n, n)
	}
	for name, m := range map[string]*metrics.Metrics{"A": ma, "B": mb} {
		if got := testutil.ToFloat64(m.SourceMessages.WithLabelValues("kafka", "created")); got == 0 {
			t.Errorf("%s created nothing: the rebalance gave it no partition", name)
		}
	}
	if all := countRows(t, db.Pool, `SELECT count(*) FROM intake_rejects`); all != len(bad) {
		t.Errorf("%d rejects, want %d (each once)", all, len(bad))
	}
}

// waitFor polls cond (the group's and the broker's state give no signal)
// until it holds, failing after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not after a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countRows(t *testing.T, pool *pgxpool.Pool, query string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
