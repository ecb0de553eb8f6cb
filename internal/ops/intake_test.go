package ops_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/dbtest"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/ops"
	"github.com/settle/settle/internal/submit"
)

// noJobs stands in for River: this test is about intake and its metrics.
type noJobs struct{}

func (noJobs) InsertSendTx(context.Context, pgx.Tx, []string) error { return nil }

// TestSubmitThroughIntakeThenScrape sends a known NDJSON file with bad lines
// through the real intake API with submit, checks submit's counts, then
// scrapes /metrics and checks the counters' and gauges' values.
func TestSubmitThroughIntakeThenScrape(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	reg := ops.NewRegistry(db.Pool)
	m := metrics.New(reg)
	svc, err := intake.NewService(intake.Config{DB: db.Pool, Jobs: noJobs{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", intake.NewHandler(intake.HandlerConfig{Service: svc, APIToken: "tok"}))
	mux.Handle("GET /metrics", ops.MetricsHandler(reg))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	f, err := os.Open("../submit/testdata/events.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Concurrency 1 keeps the file's order, so "first" and "redelivery"
	// are well defined.
	sum, err := submit.Run(context.Background(), f, submit.Options{URL: srv.URL, Token: "tok", Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Lines != 10 || sum.Created != 3 || sum.Replayed != 2 || sum.Conflict != 1 || sum.Invalid != 4 || sum.Errors != 0 {
		t.Errorf("summary = %+v, want 10 lines: 3 created, 2 replayed, 1 conflict, 4 invalid, 0 errors", sum)
	}
	var problemLines []int
	for _, p := range sum.Problems {
		problemLines = append(problemLines, p.Line)
	}
	if want := []int{4, 5, 6, 9, 11}; !equalInts(problemLines, want) {
		t.Errorf("problem lines = %v, want %v: %+v", problemLines, want, sum.Problems)
	}

	_, body := get(t, srv, "/metrics", "")
	for _, want := range []string{
		// Line 4 is refused by submit itself and never reaches intake.
		`settle_intake_total{outcome="created"} 3`,
		`settle_intake_total{outcome="replayed"} 2`,
		`settle_intake_total{outcome="conflict"} 1`,
		`settle_intake_total{outcome="invalid"} 3`,
		"settle_receipt_conflicts_total 1",
		"settle_replay_age_seconds_count 2",
		`settle_settlements{state="pending"} 3`,
		`settle_settlements{state="confirmed"} 0`,
		"settle_needs_investigation 0",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "settle_") {
				t.Log(l)
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
