package ops_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/internal/dbtest"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/ops"
	"github.com/settle/settle/internal/settletest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// get fetches path from srv with the given Authorization header (none when
// empty) and returns the status and body.
func get(t *testing.T, srv *httptest.Server, path, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestMetricsHandlerReportsStatesAndCounters(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	// Three settlements: two confirmed, one uncertain and flagged.
	for i, row := range []struct {
		state string
		inv   bool
	}{{"confirmed", false}, {"confirmed", false}, {"uncertain", true}} {
		id := "s" + string(rune('a'+i))
		var reason any
		if row.inv {
			reason = "key ttl passed"
		}
		_, err := db.Pool.Exec(ctx, `INSERT INTO settlements
			(settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, needs_investigation, investigation_reason)
			VALUES ($1, 'acc', 'ben', 100, 'EUR', $2, 'key-'||$1, 'sha256:x', $3, $4)`, id, row.state, row.inv, reason)
		if err != nil {
			t.Fatal(err)
		}
	}
	reg := ops.NewRegistry(db.Pool)
	m := metrics.New(reg)
	m.IntakeTotal.WithLabelValues("created").Add(3)
	m.IntakeTotal.WithLabelValues("replayed").Inc()
	srv := httptest.NewServer(ops.MetricsHandler(reg))
	t.Cleanup(srv.Close)

	code, body := get(t, srv, "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d\n%s", code, body)
	}
	for _, want := range []string{
		`settle_settlements{state="confirmed"} 2`,
		`settle_settlements{state="uncertain"} 1`,
		`settle_settlements{state="pending"} 0`,
		`settle_settlements{state="failed"} 0`,
		`settle_settlements{state="sent"} 0`,
		"settle_needs_investigation 1",
		`settle_intake_total{outcome="created"} 3`,
		`settle_intake_total{outcome="replayed"} 1`,
		"settle_settlements_query_errors_total 0",
		"go_goroutines ",
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestStateCollectorKeepsLastValuesWhenTheDatabaseFails(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	now := settletest.NewManualClock(time.Unix(1_700_000_000, 0))
	c := metrics.NewStateCollector(db.Pool, metrics.StateCollectorOpts{Now: now.Now})
	reg := ops.NewRegistry(nil)
	reg.MustRegister(c)
	srv := httptest.NewServer(ops.MetricsHandler(reg))
	t.Cleanup(srv.Close)
	if _, body := get(t, srv, "/metrics", ""); !strings.Contains(body, `settle_settlements{state="pending"} 0`) {
		t.Fatalf("first scrape lacks the pending gauge:\n%s", body)
	}
	db.Pool.Close() // every later query fails
	now.Advance(60 * time.Second)
	_, body := get(t, srv, "/metrics", "")
	for _, want := range []string{`settle_settlements{state="pending"} 0`, "settle_settlements_query_errors_total 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape after a failed query lacks %q", want)
		}
	}
}

func TestRiverUIAnswersBehindTheToken(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
	}{{"open", ""}, {"token", "s3cret"}} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ops.RiverUI(ctx, client, tc.token, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle(ops.RiverUIPrefix, h)
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			auth := ""
			if tc.token != "" {
				if code, _ := get(t, srv, "/riverui/", ""); code != http.StatusUnauthorized {
					t.Errorf("GET /riverui/ without the token = %d, want 401", code)
				}
				if code, _ := get(t, srv, "/riverui/", "Bearer wrong"); code != http.StatusUnauthorized {
					t.Errorf("GET /riverui/ with a wrong token = %d, want 401", code)
				}
				auth = "Bearer " + tc.token
			}
			code, body := get(t, srv, "/riverui/", auth)
			if code != http.StatusOK || !strings.Contains(body, "<html") {
				t.Errorf("GET /riverui/ = %d, want 200 with the UI's page\n%.300s", code, body)
			}
			code, body = get(t, srv, "/riverui/api/queues", auth)
			if code != http.StatusOK {
				t.Errorf("GET /riverui/api/queues = %d, want 200\n%.300s", code, body)
			}
		})
	}
}

func TestRequireTokenAcceptsBasicPasswordForBrowsers(t *testing.T) {
	t.Parallel()
	h := ops.RequireToken("tok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/riverui/", nil)
	req.SetBasicAuth("anyone", "tok")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("basic auth with the token as password = %d, want 200", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/riverui/", nil))
	if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic") {
		t.Errorf("no credentials = %d %q, want 401 with a Basic challenge", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}
}

func TestNewLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := ops.NewLogger(&buf, ops.LogFormatAuto, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("decided", "settlement_id", "s1")
	if !strings.HasPrefix(buf.String(), "{") {
		t.Errorf("auto on a non-terminal wrote %q, want JSON", buf.String())
	}
	buf.Reset()
	l, _ = ops.NewLogger(&buf, ops.LogFormatText, slog.LevelInfo)
	l.Info("decided", "settlement_id", "s1")
	if !strings.Contains(buf.String(), "settlement_id=s1") {
		t.Errorf("text wrote %q", buf.String())
	}
	if _, err := ops.NewLogger(&buf, "xml", slog.LevelInfo); err == nil {
		t.Error("NewLogger accepted format xml")
	}
}
