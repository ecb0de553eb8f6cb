package nats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/bintest"
	"github.com/settle/settle/internal/dbtest"
	"github.com/settle/settle/internal/natstest"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/source"
	natssrc "github.com/settle/settle/source/nats"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, bintest.Cleanup)) }

// harness is one test's database, intake service and JetStream server.
type harness struct {
	t    *testing.T
	pool *pgxpool.Pool
	svc  *intake.Service
	url  string
	js   jetstream.JetStream
}

// newHarness sets up the intake service on pool and a JetStream client of
// the server at url, with the stream and consumer created.
func newHarness(t *testing.T, pool *pgxpool.Pool, url string) *harness {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.NewService(intake.Config{DB: pool, Jobs: jobs.Inserter{Client: client}})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := natstest.JetStream(t, url)
	h := &harness{t: t, pool: pool, svc: svc, url: url, js: js}
	h.open(natssrc.Config{}) // the stream and the consumer exist before anything is published
	return h
}

// open opens an adapter on the harness's server, closed when the test ends.
func (h *harness) open(cfg natssrc.Config) *natssrc.Source {
	h.t.Helper()
	cfg.URL = h.url
	cfg.AckSync = true
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 200 * time.Millisecond
	}
	src, err := natssrc.Open(ctxT(h.t, time.Minute), cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = src.Close() })
	return src
}

// loop returns a Loop over src with fast retries; mod adjusts its config.
func (h *harness) loop(src source.Source, in source.Intake, mod func(*source.Config)) *source.Loop {
	h.t.Helper()
	if in == nil {
		in = h.svc
	}
	cfg := source.Config{Source: src, Intake: in, RetryDelay: 50 * time.Millisecond, PauseMax: 500 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	l, err := source.NewLoop(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// publish publishes data on the default subject under a fresh message id
// and returns its stream sequence.
func (h *harness) publish(data []byte) uint64 {
	h.t.Helper()
	return natstest.Publish(h.t, h.js, natssrc.DefaultSubject, data, "")
}

// publishEvent publishes ev as JSON.
func (h *harness) publishEvent(ev intake.Event) uint64 {
	h.t.Helper()
	return h.publish(mustJSON(h.t, ev))
}

// run runs the loops until the stream is drained (every message
// acknowledged: the work-queue stream is empty, and the consumer has
// nothing pending and nothing awaiting acknowledgement), then stops them.
func (h *harness) run(within time.Duration, loops ...*source.Loop) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Go(func() { _ = l.Run(ctx) })
	}
	h.waitDrained(within)
	cancel()
	wg.Wait()
}

// waitDrained waits until the stream is empty and the consumer has nothing
// pending and nothing awaiting acknowledgement.
func (h *harness) waitDrained(within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx := ctxT(h.t, 30*time.Second)
		st, err := h.js.Stream(ctx, natssrc.DefaultStream)
		if err == nil {
			info, ierr := st.Info(ctx)
			ci := natstest.ConsumerInfo(h.t, h.js, natssrc.DefaultStream, natssrc.DefaultConsumer)
			if ierr == nil && info.State.Msgs == 0 && ci.NumPending == 0 && ci.NumAckPending == 0 {
				return
			}
			if time.Now().After(deadline) {
				h.t.Fatalf("not drained after %s: stream holds %d, consumer pending %d, awaiting ack %d",
					within, info.State.Msgs, ci.NumPending, ci.NumAckPending)
			}
		} else if time.Now().After(deadline) {
			h.t.Fatalf("not drained after %s: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// count runs a count(*) query.
func (h *harness) count(query string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.pool.QueryRow(ctxT(h.t, 30*time.Second), query, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// checkOnce fails the test unless each of ids has exactly one receipt,
// one settlement, one creation transition and one send job, and nothing
// else was created.
func (h *harness) checkOnce(ids []string) {
	h.t.Helper()
	var settlements, receipts, creations, sends, distinct int
	err := h.pool.QueryRow(ctxT(h.t, 30*time.Second), `SELECT
		(SELECT count(*) FROM settlements), (SELECT count(*) FROM settlement_receipts),
		(SELECT count(*) FROM settlement_transitions WHERE from_state IS NULL),
		(SELECT count(*) FROM river_job WHERE kind = 'send_instruction'),
		(SELECT count(*) FROM settlements WHERE settlement_id = ANY($1))`, ids).
		Scan(&settlements, &receipts, &creations, &sends, &distinct)
	if err != nil {
		h.t.Fatal(err)
	}
	n := len(ids)
	if settlements != n || receipts != n || creations != n || sends != n || distinct != n {
		h.t.Fatalf("settlements=%d receipts=%d creations=%d send jobs=%d of the expected=%d, want %d each",
			settlements, receipts, creations, sends, distinct, n)
	}
}

// ctxT returns a context ending after d or with the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// event returns a valid event number i of a run named prefix.
func event(prefix string, i int) intake.Event {
	return intake.Event{
		SettlementID: fmt.Sprintf("%s-%04d", prefix, i),
		AccountID:    "acc-1",
		AmountCents:  int64(100 + i),
		Currency:     "EUR",
		Beneficiary:  fmt.Sprintf("bene-%d", i),
		EventID:      fmt.Sprintf("%s-evt-%d", prefix, i),
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = event(prefix, i).SettlementID
	}
	return out
}
