package intake_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/jobs"
)

func TestBatchMixed(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	// B exists before the batch.
	if r := b.post(t, mustJSON(t, eventFields("B"))); r.status != http.StatusCreated {
		t.Fatal(r.status)
	}
	changed := func(id string) string {
		f := eventFields(id)
		f["amount_cents"] = 1
		return mustJSON(t, f)
	}
	lines := []string{
		mustJSON(t, eventFields("A")),                // 201 new
		`{"settlement_id":"bad","amount_cents":1.5}`, // 422
		mustJSON(t, eventFields("A")),                // 200 replay of A within the batch
		changed("A"),                                 // 409 against A
		mustJSON(t, eventFields("B")),                // 200 replay of B
		changed("B"),                                 // 409 against B
		`not json at all`,                            // 400
		mustJSON(t, eventFields("C")),                // 201 new
	}
	want := []int{201, 422, 200, 409, 200, 409, 400, 201}
	check := func(name string, r response) {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", name, r.status, r.raw)
		}
		var resp intake.BatchResponse
		if err := json.Unmarshal(r.raw, &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Results) != len(want) {
			t.Fatalf("%s: %d results", name, len(resp.Results))
		}
		for i, item := range resp.Results {
			if item.Status != want[i] {
				t.Errorf("%s: event %d: status %d, want %d (%v)", name, i, item.Status, want[i], item.Body)
			}
		}
	}
	check("ndjson", b.do(t, http.MethodPost, "/v1/settlements/batch", strings.Join(lines, "\n")+"\n\n"))
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 3, "settlements": 3, "settlement_transitions": 3, "river_job": 3, "receipt_conflicts": 2})

	// The same batch again as a JSON array, minus the line that is not
	// JSON: A and C are replays now.
	arr := "[" + strings.Join(append(append([]string{}, lines[:6]...), `{"settlement_id":"x"}`, lines[7]), ",\n") + "]"
	want = []int{200, 422, 200, 409, 200, 409, 422, 200}
	check("array", b.do(t, http.MethodPost, "/v1/settlements/batch", arr))
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 3, "settlements": 3, "settlement_transitions": 3, "river_job": 3, "receipt_conflicts": 4})

	// Too many events: 413 for the whole batch, nothing written.
	many := strings.Repeat(mustJSON(t, eventFields("M"))+"\n", intake.MaxBatch+1)
	if r := b.do(t, http.MethodPost, "/v1/settlements/batch", many); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("over the batch limit: %d", r.status)
	}
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 3, "settlements": 3, "settlement_transitions": 3, "river_job": 3, "receipt_conflicts": 4})
}

func TestBatchLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var lines []string
	for i := 0; i < intake.MaxBatch; i++ {
		lines = append(lines, mustJSON(t, eventFields("L-"+strconv.Itoa(i))))
	}
	r := b.do(t, http.MethodPost, "/v1/settlements/batch", strings.Join(lines, "\n"))
	var resp intake.BatchResponse
	if err := json.Unmarshal(r.raw, &resp); err != nil || resp.Counts["created"] != intake.MaxBatch {
		t.Fatalf("%d %v %v", r.status, err, resp.Counts)
	}
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 1000, "settlements": 1000, "settlement_transitions": 1000, "river_job": 1000})
}

// closedPort returns an address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestTokenAuth(t *testing.T) {
	t.Parallel()
	const token = "s3cr3t-token-value"
	b := setup(t, setupOpts{token: token})
	body := mustJSON(t, eventFields("auth-1"))
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", token}, {"Authorization", "Basic " + token}} {
		if r := b.post(t, body, h...); r.status != http.StatusUnauthorized || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%v: %d", h, r.status)
		}
	}
	if r := b.do(t, http.MethodGet, "/v1/settlements/auth-1", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("GET without token: %d", r.status)
	}
	wantCounts(t, b.db, map[string]int{})
	if r := b.post(t, body, "Authorization", "Bearer "+token); r.status != http.StatusCreated {
		t.Fatalf("with token: %d %s", r.status, r.raw)
	}
	if r := b.do(t, http.MethodGet, "/v1/settlements/auth-1", "", "Authorization", "bearer "+token); r.status != http.StatusOK {
		t.Fatalf("GET with token: %d", r.status)
	}
	if r := b.do(t, http.MethodGet, "/healthz", ""); r.status != http.StatusOK {
		t.Fatalf("healthz: %d", r.status)
	}
	if r := b.do(t, http.MethodGet, "/readyz", ""); r.status != http.StatusOK {
		t.Fatalf("readyz: %d", r.status)
	}
	if strings.Contains(b.logs.String(), token) {
		t.Fatal("the token reached the log")
	}
}

// TestDatabaseUnavailable: with PostgreSQL unreachable (nothing listens on
// the port) or the pool closed, intake answers 503 with Retry-After, never
// 500 and never an acknowledgement.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	ln := closedPort(t)
	unreachable, err := database.Connect(context.Background(), "postgres://settle@"+ln+"/settle?connect_timeout=2", database.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unreachable.Close)
	live := setup(t, setupOpts{})
	closed, err := database.Connect(context.Background(), live.db.URL, database.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()

	for name, pool := range map[string]intake.DB{"unreachable": unreachable, "closed": closed} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client, err := river.NewClient(riverpgxv5.New(live.db.Pool), &river.Config{})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := intake.NewService(intake.Config{DB: pool, Jobs: jobs.Inserter{Client: client}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(intake.NewHandler(intake.HandlerConfig{Service: svc, Logger: slog.New(slog.DiscardHandler)}))
			t.Cleanup(srv.Close)
			b := &testBundle{srv: srv}
			for _, r := range []response{
				b.post(t, mustJSON(t, eventFields("down-1"))),
				b.do(t, http.MethodPost, "/v1/settlements/batch", mustJSON(t, eventFields("down-2"))),
				b.do(t, http.MethodGet, "/readyz", ""),
				b.do(t, http.MethodGet, "/v1/settlements/down-1", ""),
			} {
				if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("%d %v %s", r.status, r.header, r.raw)
				}
			}
			if r := b.do(t, http.MethodGet, "/healthz", ""); r.status != http.StatusOK {
				t.Fatalf("healthz: %d", r.status)
			}
		})
	}
}

// blockingBody is a request body whose first Read signals started and then
// waits for release: it holds an intake slot for as long as the test wants.
type blockingBody struct {
	once    sync.Once
	started chan struct{}
	release chan struct{}
	r       io.Reader
}

func (b *blockingBody) Read(p []byte) (int, error) {
	b.once.Do(func() {
		close(b.started)
		<-b.release
	})
	return b.r.Read(p)
}

func (b *blockingBody) Close() error { return nil }

// TestOverload: past --max-inflight the API answers 429 with Retry-After
// and writes nothing; the request holding the slot completes.
func TestOverload(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxInflight: 1})
	body := &blockingBody{started: make(chan struct{}), release: make(chan struct{}), r: strings.NewReader(mustJSON(t, eventFields("slow-1")))}
	held := httptest.NewRequest(http.MethodPost, "/v1/settlements", body)
	held.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.handler.ServeHTTP(rec, held)
	}()
	<-body.started // the slow request holds the only slot

	for _, path := range []string{"/v1/settlements", "/v1/settlements/batch"} {
		r := b.do(t, http.MethodPost, path, mustJSON(t, eventFields("fast-1")))
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s: %d %v %s", path, r.status, r.header, r.raw)
		}
	}
	// Reads are not intake and are not limited.
	if r := b.do(t, http.MethodGet, "/v1/settlements/slow-1", ""); r.status != http.StatusNotFound {
		t.Fatalf("GET: %d", r.status)
	}
	close(body.release)
	<-done
	if rec.Code != http.StatusCreated {
		t.Fatalf("held request: %d %s", rec.Code, rec.Body)
	}
	if r := b.post(t, mustJSON(t, eventFields("fast-1"))); r.status != http.StatusCreated {
		t.Fatalf("after the slot freed: %d", r.status)
	}
	wantCounts(t, b.db, map[string]int{"settlement_receipts": 2, "settlements": 2, "settlement_transitions": 2, "river_job": 2})
	if got := counterValue(t, b.metrics.IntakeTotal.WithLabelValues("overloaded")); got != 2 {
		t.Fatalf("overloaded counted %v times", got)
	}
}

func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
