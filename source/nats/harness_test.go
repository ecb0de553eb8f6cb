package nats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/natstest"
	"github.com/settle/settle/source"
	natssrc "github.com/settle/settle/source/nats"
	"github.com/settle/settle/source/sourcetest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, bintest.Cleanup)) }

// natsHarness runs the conformance suite on JetStream: each case has its
// own in-process server (the embedded default's, fsyncing every write),
// which it can restart on its store.
type natsHarness struct{}

func (natsHarness) Kind() string { return natssrc.Kind }

func (natsHarness) Broker(t *testing.T) sourcetest.Broker {
	srv := natstest.Start(t)
	js, _ := natstest.JetStream(t, srv.URL)
	b := &natsBroker{srv: srv, js: js}
	b.Open(t, sourcetest.Options{Lease: sourcetest.Lease}) // the stream and the consumer exist before anything is published
	return b
}

// natsBroker is one case's JetStream server with the default stream and
// consumer.
type natsBroker struct {
	srv *natstest.Server
	js  jetstream.JetStream
}

func (b *natsBroker) Publish(t *testing.T, data []byte) string {
	t.Helper()
	return strconv.FormatUint(natstest.Publish(t, b.js, natssrc.DefaultSubject, data, ""), 10)
}

func (b *natsBroker) Open(t *testing.T, o sourcetest.Options) source.Source {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, err := natssrc.Open(ctx, natssrc.Config{URL: b.srv.URL, Name: o.Name, AckWait: o.Lease, AckSync: true, FetchWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// Drained: the work-queue stream is empty (every message acknowledged),
// and the consumer has nothing pending and nothing awaiting
// acknowledgement.
func (b *natsBroker) Drained(*testing.T) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, natssrc.DefaultStream)
	if err != nil {
		return false, err.Error()
	}
	info, err := st.Info(ctx)
	if err != nil {
		return false, err.Error()
	}
	c, err := b.js.Consumer(ctx, natssrc.DefaultStream, natssrc.DefaultConsumer)
	if err != nil {
		return false, err.Error()
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return false, err.Error()
	}
	return info.State.Msgs == 0 && ci.NumPending == 0 && ci.NumAckPending == 0,
		fmt.Sprintf("stream holds %d, consumer pending %d, awaiting ack %d", info.State.Msgs, ci.NumPending, ci.NumAckPending)
}

// Expire does nothing: a JetStream lease is the consumer's AckWait, which
// runs out by itself when the batch is not kept alive.
func (b *natsBroker) Expire(*testing.T, source.Source) {}

func (b *natsBroker) Restart(t *testing.T) error {
	b.srv.Restart(t)
	return nil
}

// harness is the worker tests' database and JetStream server.
type harness struct {
	t    *testing.T
	pool *pgxpool.Pool
	url  string
	js   jetstream.JetStream
}

// newHarness makes a JetStream client of the server at url and creates
// the stream and the consumer.
func newHarness(t *testing.T, pool *pgxpool.Pool, url string) *harness {
	t.Helper()
	js, _ := natstest.JetStream(t, url)
	h := &harness{t: t, pool: pool, url: url, js: js}
	(&natsBroker{srv: &natstest.Server{URL: url}, js: js}).Open(t, sourcetest.Options{Lease: natssrc.DefaultAckWait})
	return h
}

// publishEvent publishes ev as JSON under a fresh message id.
func (h *harness) publishEvent(ev intake.Event) uint64 {
	h.t.Helper()
	return natstest.Publish(h.t, h.js, natssrc.DefaultSubject, mustJSON(h.t, ev), "")
}

// waitDrained waits until the stream is empty and the consumer has nothing
// pending and nothing awaiting acknowledgement.
func (h *harness) waitDrained(within time.Duration) {
	h.t.Helper()
	b := &natsBroker{js: h.js}
	deadline := time.Now().Add(within)
	for {
		ok, state := b.Drained(h.t)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("not drained after %s: %s", within, state)
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
func event(prefix string, i int) intake.Event { return sourcetest.Event(prefix, i) }
