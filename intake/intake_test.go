package intake_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/jobs"
)

type testBundle struct {
	db      *dbtest.DB
	svc     *intake.Service
	handler *intake.Handler
	srv     *httptest.Server
	metrics *metrics.Metrics
	logs    *settletest.Buffer
}

type setupOpts struct {
	token       string
	maxInflight int
	now         func() time.Time
	// bank is the connector (default settle's); maxAmounts the operator's
	// ceilings (--max-amount).
	bank       bankclient.Connector
	maxAmounts map[string]int64
	// banks are the banks served (--bank a,b) and routes the rules
	// (--route).
	banks  []bankclient.Connector
	routes intake.Routes
	// fundsCheck is --funds-check.
	fundsCheck bool
}

// setup gives the test its own migrated database, an intake service with an
// insert-only River client, and the API on an httptest server.
func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	db := dbtest.New(t)
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewUnregistered()
	svc, err := intake.NewService(intake.Config{DB: db.Pool, Jobs: jobs.Inserter{Client: client}, Metrics: m, Now: o.now,
		Bank: o.bank, MaxAmounts: o.maxAmounts, Banks: o.banks, Routes: o.routes, FundsCheck: o.fundsCheck})
	if err != nil {
		t.Fatal(err)
	}
	logs := &settletest.Buffer{}
	h := intake.NewHandler(intake.HandlerConfig{
		Service: svc, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		APIToken: o.token, MaxInflight: o.maxInflight,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testBundle{db: db, svc: svc, handler: h, srv: srv, metrics: m, logs: logs}
}

// response is an answer of the API.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (b *testBundle) do(t testing.TB, method, path, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (b *testBundle) post(t testing.TB, body string, header ...string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/settlements", body, header...)
}

// counts returns the number of rows of every table intake could write.
func counts(t testing.TB, db *dbtest.DB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"settlement_receipts", "settlements", "settlement_transitions", "receipt_conflicts", "ledger_movements", "bank_attempts", "river_job"} {
		var n int
		if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

func wantCounts(t testing.TB, db *dbtest.DB, want map[string]int) {
	t.Helper()
	got := counts(t, db)
	for table, n := range got {
		if n != want[table] {
			t.Errorf("%s: %d rows, want %d (all: %v)", table, n, want[table], got)
		}
	}
}

func TestCreateReplayConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	fields := eventFields("order-1")
	fields["event_id"] = "msg-1"
	first := b.post(t, mustJSON(t, fields))
	if first.status != http.StatusCreated {
		t.Fatalf("first delivery: %d %s", first.status, first.raw)
	}
	if first.body["state"] != "pending" || first.body["replayed"] != false || first.body["settlement_id"] != "order-1" ||
		first.body["bank_key"] != bankclient.KeyFor("order-1") || !strings.HasPrefix(first.body["payload_hash"].(string), "sha256:") {
		t.Fatalf("first body: %s", first.raw)
	}
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a new settlement is marked replayed")
	}

	// A redelivery: other transport fields, other key order, same business.
	again := b.post(t, `{"beneficiary":"DE89 3704 0044 0532 0130 00","currency":"EUR","amount_cents":12345,"account_id":"acc-1","settlement_id":"order-1","event_id":"msg-2"}`)
	if again.status != http.StatusOK || again.body["replayed"] != true || again.header.Get("Idempotent-Replayed") != "true" ||
		again.body["payload_hash"] != first.body["payload_hash"] || again.body["state"] != "pending" {
		t.Fatalf("replay: %d %v %s", again.status, again.header, again.raw)
	}

	// The replay reports the current state, whatever it is.
	if _, err := b.db.Pool.Exec(ctx, "UPDATE settlements SET state = 'sent' WHERE settlement_id = 'order-1'"); err != nil {
		t.Fatal(err)
	}
	if r := b.post(t, mustJSON(t, fields)); r.status != http.StatusOK || r.body["state"] != "sent" {
		t.Fatalf("replay after send: %d %s", r.status, r.raw)
	}

	// A conflict: same id, another amount.
	changed := eventFields("order-1")
	changed["amount_cents"] = 99999
	changed["event_id"] = "msg-3"
	c := b.post(t, mustJSON(t, changed))
	if c.status != http.StatusConflict || c.header.Get("Content-Type") != "application/problem+json" ||
		c.body["stored_hash"] != first.body["payload_hash"] || c.body["incoming_hash"] == c.body["stored_hash"] || c.body["incoming_hash"] == nil {
		t.Fatalf("conflict: %d %s", c.status, c.raw)
	}
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 1, "settlements": 1, "settlement_transitions": 1, "receipt_conflicts": 1, "river_job": 1})

	// The original is untouched; the conflict row holds what came in.
	var amount, replays int64
	var hash string
	if err := b.db.Pool.QueryRow(ctx, `SELECT s.amount_cents, s.payload_hash, r.replay_count FROM settlements s
		JOIN settlement_receipts r USING (settlement_id) WHERE settlement_id = 'order-1'`).Scan(&amount, &hash, &replays); err != nil {
		t.Fatal(err)
	}
	if amount != 12345 || hash != first.body["payload_hash"] || replays != 2 {
		t.Fatalf("original changed: amount=%d hash=%s replays=%d", amount, hash, replays)
	}
	var stored, incoming, eventID string
	var incomingAmount int64
	if err := b.db.Pool.QueryRow(ctx, `SELECT stored_hash, incoming_hash, event_id, (incoming->>'amount_cents')::bigint
		FROM receipt_conflicts WHERE settlement_id = 'order-1'`).Scan(&stored, &incoming, &eventID, &incomingAmount); err != nil {
		t.Fatal(err)
	}
	if stored != first.body["payload_hash"] || incoming != c.body["incoming_hash"] || eventID != "msg-3" || incomingAmount != 99999 {
		t.Fatalf("conflict row: %s %s %s %d", stored, incoming, eventID, incomingAmount)
	}
	var kind, queue string
	if err := b.db.Pool.QueryRow(ctx, `SELECT kind, queue FROM river_job WHERE args->>'settlement_id' = 'order-1'`).Scan(&kind, &queue); err != nil {
		t.Fatal(err)
	}
	if kind != "send_instruction" || queue != jobs.QueueFor("settle") {
		t.Fatalf("job: %s on %s", kind, queue)
	}
}

func TestCreateRecordsReceiptAndSchedule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b := setup(t, setupOpts{now: func() time.Time { return now }})
	fields := eventFields("sched-1")
	fields["occurred_at"] = now.Add(-time.Hour).Format(time.RFC3339)
	fields["event_id"] = "m1"
	if r := b.post(t, mustJSON(t, fields)); r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	var received, occurred, next, at time.Time
	var firstEvent, reason string
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT r.received_at, r.occurred_at, r.first_event_id, s.next_check_at, t.at, t.reason
		FROM settlement_receipts r JOIN settlements s USING (settlement_id) JOIN settlement_transitions t USING (settlement_id)
		WHERE settlement_id = 'sched-1' AND t.from_state IS NULL AND t.to_state = 'pending'`).Scan(&received, &occurred, &firstEvent, &next, &at, &reason); err != nil {
		t.Fatal(err)
	}
	if !received.Equal(now) || !occurred.Equal(now.Add(-time.Hour)) || firstEvent != "m1" || !next.Equal(now.Add(intake.DefaultPendingGrace)) || !at.Equal(now) {
		t.Fatalf("received=%v occurred=%v event=%s next=%v at=%v", received, occurred, firstEvent, next, at)
	}
}

// TestConcurrentDeliveries: 64 deliveries of one new event at once give one
// receipt, one settlement, one job, one 201 and 63 replays.
func TestConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	const n = 64
	body := mustJSON(t, eventFields("hot-1"))
	statuses := make(chan int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/v1/settlements", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	close(start)
	wg.Wait()
	close(statuses)
	got := map[int]int{}
	for s := range statuses {
		got[s]++
	}
	if got[201] != 1 || got[200] != n-1 || len(got) != 2 {
		t.Fatalf("statuses %v, want one 201 and %d 200", got, n-1)
	}
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 1, "settlements": 1, "settlement_transitions": 1, "river_job": 1})
	var replays int
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT replay_count FROM settlement_receipts").Scan(&replays); err != nil {
		t.Fatal(err)
	}
	if replays != n-1 {
		t.Fatalf("replay_count = %d, want %d", replays, n-1)
	}
}

// TestBadInputsWriteNothing: every refused input is a 4xx problem naming
// the field, and not one row is written anywhere.
func TestBadInputsWriteNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for _, tc := range badEvents() {
		r := b.post(t, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, r.status, tc.status, r.raw)
			continue
		}
		if r.header.Get("Content-Type") != "application/problem+json" || r.body["status"] != float64(tc.status) || r.body["type"] == nil || r.body["title"] == nil {
			t.Errorf("%s: not a problem: %s", tc.name, r.raw)
		}
		if got, _ := r.body["field"].(string); got != tc.field {
			t.Errorf("%s: field %q, want %q", tc.name, got, tc.field)
		}
	}
	wantCounts(t, b.db, map[string]int{})
	if strings.Contains(b.logs.String(), "DE89") {
		t.Error("a payload reached the log")
	}
}

func TestGetSettlement(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	if r := b.post(t, mustJSON(t, eventFields("view-1"))); r.status != http.StatusCreated {
		t.Fatal(r.status)
	}
	r := b.do(t, http.MethodGet, "/v1/settlements/view-1", "")
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	var v settlement.View
	if err := json.Unmarshal(r.raw, &v); err != nil {
		t.Fatal(err)
	}
	if v.Settlement.State != "pending" || v.Receipt == nil || len(v.Transitions) != 1 || v.Transitions[0].To != "pending" || v.Movement != nil ||
		v.Bank.NextCheckAt == nil {
		t.Fatalf("view: %s", r.raw)
	}
	if r := b.do(t, http.MethodGet, "/v1/settlements/nope", ""); r.status != http.StatusNotFound || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("missing: %d %s", r.status, r.raw)
	}
}
