package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

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
	reg := metrics.NewRegistry(db.Pool)
	m := metrics.New(reg)
	m.IntakeTotal.WithLabelValues("created").Add(3)
	m.IntakeTotal.WithLabelValues("replayed").Inc()
	srv := httptest.NewServer(metrics.Handler(reg))
	t.Cleanup(srv.Close)

	code, body := settletest.Get(t, srv.URL+"/metrics", "")
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
	reg := metrics.NewRegistry(nil)
	reg.MustRegister(c)
	srv := httptest.NewServer(metrics.Handler(reg))
	t.Cleanup(srv.Close)
	if _, body := settletest.Get(t, srv.URL+"/metrics", ""); !strings.Contains(body, `settle_settlements{state="pending"} 0`) {
		t.Fatalf("first scrape lacks the pending gauge:\n%s", body)
	}
	db.Pool.Close() // every later query fails
	now.Advance(60 * time.Second)
	_, body := settletest.Get(t, srv.URL+"/metrics", "")
	for _, want := range []string{`settle_settlements{state="pending"} 0`, "settle_settlements_query_errors_total 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape after a failed query lacks %q", want)
		}
	}
}
