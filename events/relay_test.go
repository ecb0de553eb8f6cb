package events_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/events"
	"github.com/settle/settle/events/eventstest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestSignatureTestVector signs the Standard Webhooks specification's test
// vector (its reference libraries' test_sign_function), and the test
// receiver's own verifier accepts it.
func TestSignatureTestVector(t *testing.T) {
	t.Parallel()
	const (
		id      = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		payload = `{"test": 2432232314}`
		want    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	at := time.Unix(1614265330, 0)
	s, err := events.ParseSecrets(secret)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sign(id, at, []byte(payload)); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if err := eventstest.Verify(secret, id, "1614265330", want, []byte(payload)); err != nil {
		t.Fatal(err)
	}
	if err := eventstest.Verify(secret, id, "1614265331", want, []byte(payload)); err == nil {
		t.Fatal("a signature of another timestamp verified")
	}
	// Rotation: two secrets, both sign, space-separated; unpadded base64
	// is accepted as the reference libraries accept it.
	two, err := events.ParseSecrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS, " + secret)
	if err != nil {
		t.Fatal(err)
	}
	got := two.Sign(id, at, []byte(payload))
	if len(got) <= len(want) || got[len(got)-len(want):] != want || got[len(got)-len(want)-1] != ' ' {
		t.Fatalf("two secrets sign %q", got)
	}
	if err := eventstest.Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS=", id, "1614265330", got, []byte(payload)); err != nil {
		t.Fatalf("the first secret's signature: %v", err)
	}
	for _, bad := range []string{"", " , ", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_!!!"} {
		if _, err := events.ParseSecrets(bad); err == nil {
			t.Errorf("ParseSecrets(%q) accepted", bad)
		}
	}
}

func TestWebhookURL(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{
		"https://hooks.example.com/settle": true,
		"http://127.0.0.1:9000/x":          true,
		"http://localhost:9000/x":          true,
		"http://[::1]:9000/x":              true,
		"http://hooks.example.com/settle":  false,
		"http://10.0.0.8/settle":           false,
		"ftp://127.0.0.1/x":                false,
		"/relative":                        false,
		"https://":                         false,
	} {
		_, err := events.ParseWebhookURL(raw)
		if (err == nil) != ok {
			t.Errorf("ParseWebhookURL(%q) = %v, want ok=%v", raw, err, ok)
		}
		if raw == "http://hooks.example.com/settle" && !errors.Is(err, events.ErrPlainHTTP) {
			t.Errorf("plain http to another host: %v, want ErrPlainHTTP", err)
		}
	}
	if _, err := events.NewWebhook(events.WebhookConfig{URL: "https://hooks.example.com/"}); !errors.Is(err, events.ErrNoSecret) {
		t.Errorf("a webhook without a secret: %v", err)
	}
}

// story is the path of every settlement in these tests.
var story = []settlement.State{settlement.Sent, settlement.Uncertain, settlement.Confirmed, settlement.Returned}

// create writes settlement id and its creation, as intake does.
func create(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ($1, 'acc', 'ben', 100, 'EUR', 'pending', 'k-'||$1, 'sha256:00')`, id); err != nil {
			return err
		}
		return statemachine.Created(ctx, tx, "received", time.Time{}, id)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// walk moves settlement id along story, one transaction per step.
func walk(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	ctx := context.Background()
	from := settlement.Pending
	for _, to := range story {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: id, From: from, To: to, Reason: "test"})
		}); err != nil {
			t.Error(err)
			return
		}
		from = to
	}
}

func webhook(t *testing.T, url string, timeout time.Duration) *events.Webhook {
	t.Helper()
	s, err := events.ParseSecrets(secret)
	if err != nil {
		t.Fatal(err)
	}
	w, err := events.NewWebhook(events.WebhookConfig{URL: url, Signer: s, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run starts relays (one per "worker process") until the test ends.
func run(t *testing.T, relays ...*events.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range relays {
		if err := r.Register(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = r.Run(ctx)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// complete reports whether accepted holds every event of n settlements
// walked along story.
func complete(n int) func([]eventstest.Message) bool {
	return func(accepted []eventstest.Message) bool { return len(accepted) == n*(1+len(story)) }
}

// TestRelayThroughFaults: two relays (two worker processes) deliver the
// events of settlements walking pending → sent → uncertain → confirmed →
// returned to a receiver that answers 500 to a third of the calls, sleeps
// past the timeout on some and drops the connection on others, while the
// events are being written. Every event arrives, each settlement's in
// order, each exactly once after deduplication, every signature verifies.
func TestRelayThroughFaults(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := eventstest.NewReceiver(t, func(n int, _ string) eventstest.Fault {
		switch {
		case n%3 == 0:
			return eventstest.Fail500
		case n%17 == 0:
			return eventstest.Sleep
		case n%11 == 0:
			return eventstest.Down
		}
		return eventstest.OK
	}, secret)
	rcv.SleepFor = 2 * time.Second
	relay := func() *events.Relay {
		return &events.Relay{Pool: db.Pool, Sinks: []events.Sink{webhook(t, rcv.URL(), 300*time.Millisecond)},
			RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, Batch: 8, Poll: 10 * time.Millisecond}
	}
	run(t, relay(), relay())

	const n = 24
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("f%02d", i)
			create(t, db.Pool, id)
			walk(t, db.Pool, id)
		}()
	}
	wg.Wait()
	if !rcv.Wait(2*time.Minute, complete(n)) {
		t.Fatalf("received %d distinct events of %d", len(rcv.Accepted()), n*(1+len(story)))
	}
	if p := rcv.Problems(); len(p) > 0 {
		t.Fatalf("receiver problems: %q", p)
	}
	for sid, ids := range rcv.Sequences() {
		if len(ids) != 1+len(story) {
			t.Errorf("%s: %v", sid, ids)
		}
	}
	for _, m := range rcv.Accepted() {
		st, _ := m.Data["settlement"].(map[string]any)
		if m.Data["event_id"] != m.ID || st == nil || "settlement."+st["state"].(string) != m.Type {
			t.Errorf("message %s (%s) carries %v", m.ID, m.Type, m.Data)
		}
	}
	eventstest.WaitDelivered(t, db.Pool, n*(1+len(story)))
	var failed int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM event_attempts WHERE NOT ok`).Scan(&failed); err != nil {
		t.Fatal(err)
	}
	if failed == 0 {
		t.Error("no failed attempt recorded")
	}
	t.Logf("%d calls, %d duplicates, %d failed attempts", rcv.Calls(), rcv.Duplicates(), failed)
	if v, err := audit.EventViolations(context.Background(), db.Pool); err != nil || len(v) > 0 {
		t.Fatalf("event invariants: %v %v", v, err)
	}
}

// TestSinkDownHoldsBackOnlyItself: one sink refuses connections, the other
// receives everything; the dead one's deliveries are retried, then marked
// dead after RetryFor, and a dead event does not hold back its successors.
func TestSinkDownHoldsBackOnlyItself(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downURL := "http://" + ln.Addr().String() + "/down"
	ln.Close() // nobody listens there now
	rcv := eventstest.NewReceiver(t, nil, secret)
	run(t, &events.Relay{Pool: db.Pool, Sinks: []events.Sink{webhook(t, downURL, time.Second), webhook(t, rcv.URL(), time.Second)},
		RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond, RetryFor: 300 * time.Millisecond, Poll: 10 * time.Millisecond})
	for i := range 3 {
		id := fmt.Sprintf("d%d", i)
		create(t, db.Pool, id)
		walk(t, db.Pool, id)
	}
	if !rcv.Wait(time.Minute, complete(3)) {
		t.Fatalf("the working sink received %d events", len(rcv.Accepted()))
	}
	// The down sink: each event retried until RetryFor, then dead, and
	// then its successor tried: all dead in the end.
	deadline := time.Now().Add(time.Minute)
	for {
		var dead, attempts int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE state = 'dead'), min(attempts) FROM event_deliveries WHERE sink = $1`, downURL).Scan(&dead, &attempts); err != nil {
			t.Fatal(err)
		}
		if dead == 3*(1+len(story)) {
			if attempts < 2 {
				t.Errorf("a dead delivery was tried %d times", attempts)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries dead at the down sink", dead)
		}
		time.Sleep(20 * time.Millisecond) // polling the database: the commit has no signal
	}
	if p := rcv.Problems(); len(p) > 0 {
		t.Fatalf("receiver problems: %q", p)
	}
}
