package sqs_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/jobs"
	sqssrc "github.com/settle/settle/source/sqs"
)

// lambdaBundle is one test's database, reached by the intake through a
// switch that can cut it, and the handler.
type lambdaBundle struct {
	t       *testing.T
	db      *dbtest.DB
	svc     *intake.Service
	cut     *cutter
	handler *sqssrc.LambdaHandler
}

func newLambdaBundle(t *testing.T, wrap func(*intake.Service, *cutter) intakeAndPing, maxFailures int) *lambdaBundle {
	t.Helper()
	db := dbtest.New(t)
	cut := &cutter{conns: map[net.Conn]struct{}{}}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
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
	var in intakeAndPing = svc
	if wrap != nil {
		in = wrap(svc, cut)
	}
	h, err := sqssrc.NewLambdaHandler(sqssrc.LambdaConfig{Intake: in, MaxFailures: maxFailures})
	if err != nil {
		t.Fatal(err)
	}
	return &lambdaBundle{t: t, db: db, svc: svc, cut: cut, handler: h}
}

type intakeAndPing interface {
	SubmitBatchTx(ctx context.Context, evs []intake.Event, inTx intake.InTx) ([]intake.Outcome, error)
	Ping(ctx context.Context) error
	ChecksFunds() bool
}

// invoke calls the handler with ev and returns the MessageIds it named as
// failures, sorted.
func (b *lambdaBundle) invoke(ev events.SQSEvent) []string {
	b.t.Helper()
	resp, err := b.handler.Handle(ctxT(b.t, time.Minute), ev)
	if err != nil {
		b.t.Fatalf("the handler returned an error: %v", err)
	}
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	slices.Sort(ids)
	return ids
}

func (b *lambdaBundle) count(query string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(ctxT(b.t, 30*time.Second), query, args...).Scan(&n); err != nil {
		b.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// sqsEvent is an SQS trigger's event holding bodies, each a message whose
// MessageId is prefix-i, received for the receives-th time.
func sqsEvent(prefix string, receives int, bodies ...[]byte) events.SQSEvent {
	var ev events.SQSEvent
	for i, b := range bodies {
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId: fmt.Sprintf("%s-%d", prefix, i), ReceiptHandle: fmt.Sprintf("rh-%s-%d-%d", prefix, i, receives), Body: string(b),
			Attributes:  map[string]string{"ApproximateReceiveCount": fmt.Sprint(receives)},
			EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:payouts", AWSRegion: "us-east-1",
		})
	}
	return ev
}

func allIDs(ev events.SQSEvent) []string {
	var ids []string
	for _, r := range ev.Records {
		ids = append(ids, r.MessageId)
	}
	slices.Sort(ids)
	return ids
}

// TestLambdaOutcomes invokes the handler with a batch holding new events,
// a duplicate, a conflicting payload and invalid messages: no failures,
// each event settled once, the duplicate a replay, the conflict recorded,
// the invalid ones in intake_rejects with source lambda and their
// MessageId. The same batch again (a redelivery) is all replays.
func TestLambdaOutcomes(t *testing.T) {
	t.Parallel()
	b := newLambdaBundle(t, nil, 0)
	var bodies [][]byte
	for i := range 8 {
		bodies = append(bodies, mustJSON(t, event("fn", i)))
	}
	bodies = append(bodies, mustJSON(t, event("fn", 2)))
	conflicting := event("fn", 5)
	conflicting.AmountCents++
	bodies = append(bodies, mustJSON(t, conflicting), []byte(`not json`), []byte(`{"settlement_id":"x","amount_cents":1}`))
	ev := sqsEvent("once", 1, bodies...)
	if failed := b.invoke(ev); len(failed) != 0 {
		t.Fatalf("batch item failures %v, want none", failed)
	}
	if got := b.count(`SELECT count(*) FROM settlements`); got != 8 {
		t.Errorf("%d settlements, want 8", got)
	}
	if got := b.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != 1 {
		t.Errorf("%d replays, want 1", got)
	}
	if got := b.count(`SELECT count(*) FROM receipt_conflicts`); got != 1 {
		t.Errorf("%d conflicts, want 1", got)
	}
	if got := b.count(`SELECT count(*) FROM intake_rejects WHERE source = 'lambda' AND transport_id = ANY($1)`, []string{"once-10", "once-11"}); got != 2 {
		t.Errorf("%d rejects with source lambda and their MessageIds, want 2", got)
	}
	// Redelivered whole (as when the function's answer was lost).
	if failed := b.invoke(sqsEvent("once", 2, bodies...)); len(failed) != 0 {
		t.Fatalf("redelivery: batch item failures %v, want none", failed)
	}
	if got := b.count(`SELECT count(*) FROM settlements`); got != 8 {
		t.Errorf("after the redelivery: %d settlements, want 8", got)
	}
	if got := b.count(`SELECT count(*) FROM intake_rejects`); got != 2 {
		t.Errorf("after the redelivery: %d rejects, want 2 (stored once)", got)
	}
}

// cutMidway cuts the database once, inside the transaction of the first
// batch, after its rows are written and before its commit.
type cutMidway struct {
	*intake.Service
	cut   *cutter
	armed atomic.Bool
}

func (c *cutMidway) SubmitBatchTx(ctx context.Context, evs []intake.Event, inTx intake.InTx) ([]intake.Outcome, error) {
	return c.Service.SubmitBatchTx(ctx, evs, func(ctx context.Context, tx pgx.Tx, refused []error) error {
		if err := inTx(ctx, tx, refused); err != nil {
			return err
		}
		if c.armed.CompareAndSwap(true, false) {
			c.cut.setDown(true)
		}
		return nil
	})
}

// TestLambdaDatabaseFailsMidway cuts the database in the middle of an
// invocation's transaction: nothing commits, so every message is named a
// failure, and nothing is rejected. The next invocation of the same
// messages (SQS delivers exactly those again) settles each once, none a
// replay.
func TestLambdaDatabaseFailsMidway(t *testing.T) {
	t.Parallel()
	var mid *cutMidway
	b := newLambdaBundle(t, func(svc *intake.Service, cut *cutter) intakeAndPing {
		mid = &cutMidway{Service: svc, cut: cut}
		return mid
	}, 0)
	var bodies [][]byte
	for i := range 10 {
		bodies = append(bodies, mustJSON(t, event("mid", i)))
	}
	bodies = append(bodies, []byte(`not json`))
	mid.armed.Store(true)
	ev := sqsEvent("mid", 1, bodies...)
	failed := b.invoke(ev)
	if !slices.Equal(failed, allIDs(ev)) {
		t.Fatalf("batch item failures %v, want every message %v", failed, allIDs(ev))
	}
	if got := b.count(`SELECT count(*) FROM settlements`) + b.count(`SELECT count(*) FROM intake_rejects`); got != 0 {
		t.Fatalf("%d settlements and rejects committed by a transaction cut midway", got)
	}
	b.cut.setDown(false)
	if failed := b.invoke(sqsEvent("mid", 2, bodies...)); len(failed) != 0 {
		t.Fatalf("second invocation: batch item failures %v, want none", failed)
	}
	if got := b.count(`SELECT count(*) FROM settlements`); got != 10 {
		t.Errorf("%d settlements, want 10", got)
	}
	if got := b.count(`SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts`); got != 0 {
		t.Errorf("%d replays, want 0 (nothing had committed)", got)
	}
	if got := b.count(`SELECT count(*) FROM intake_rejects WHERE source = 'lambda'`); got != 1 {
		t.Errorf("%d rejects, want 1", got)
	}
}

// TestLambdaDatabaseDown invokes the handler while the database refuses
// connections: every message named, nothing stored.
func TestLambdaDatabaseDown(t *testing.T) {
	t.Parallel()
	b := newLambdaBundle(t, nil, 0)
	b.cut.setDown(true)
	ev := sqsEvent("down", 1, mustJSON(t, event("down", 0)), mustJSON(t, event("down", 1)), []byte(`nope`))
	if failed := b.invoke(ev); !slices.Equal(failed, allIDs(ev)) {
		t.Fatalf("batch item failures %v, want every message", failed)
	}
	b.cut.setDown(false)
	if got := b.count(`SELECT count(*) FROM settlements`) + b.count(`SELECT count(*) FROM intake_rejects`); got != 0 {
		t.Fatalf("%d rows stored while the database was down", got)
	}
}

// TestLambdaPoison makes one message fail for an unexpected reason: the
// first invocation names it alone (the others commit, taken one by one),
// and once it has failed MaxFailures times it is rejected as poison and
// named no more.
func TestLambdaPoison(t *testing.T) {
	t.Parallel()
	b := newLambdaBundle(t, nil, 2)
	if _, err := b.db.Pool.Exec(ctxT(t, 30*time.Second), `
		CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.settlement_id = 'poison-0000' THEN RAISE EXCEPTION 'poisoned'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER poison BEFORE INSERT ON settlement_receipts FOR EACH ROW EXECUTE FUNCTION poison();`); err != nil {
		t.Fatal(err)
	}
	bodies := [][]byte{mustJSON(t, event("poison", 0))}
	for i := range 5 {
		bodies = append(bodies, mustJSON(t, event("good", i)))
	}
	if failed := b.invoke(sqsEvent("p", 1, bodies...)); !slices.Equal(failed, []string{"p-0"}) {
		t.Fatalf("first invocation: batch item failures %v, want [p-0]", failed)
	}
	if got := b.count(`SELECT count(*) FROM settlements`); got != 5 {
		t.Errorf("%d settlements, want the 5 good ones", got)
	}
	if failed := b.invoke(sqsEvent("p", 2, bodies[0])); len(failed) != 0 {
		t.Fatalf("second invocation: batch item failures %v, want none (rejected as poison)", failed)
	}
	if got := b.count(`SELECT count(*) FROM intake_rejects WHERE source = 'lambda' AND transport_id = 'p-0' AND reason = 'poison'`); got != 1 {
		t.Errorf("poison rejects: %d, want 1", got)
	}
}

// cutter dials the intake's database connections and can cut them all,
// refusing new ones until it is mended: to the intake, an outage.
type cutter struct {
	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil, fmt.Errorf("dial %s %s: connection refused (the test's outage)", network, addr)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.conns[conn] = struct{}{}
	return conn, nil
}

func (c *cutter) setDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
	if down {
		for conn := range c.conns {
			_ = conn.Close()
		}
		clear(c.conns)
	}
}
