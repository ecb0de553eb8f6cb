package console_test

import (
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/console"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/reconcile"
)

var benchSettlements = flag.Int("console.settlements", 1_000_000, "how many settlements BenchmarkConsole fills the database with")

// fillSQL writes $1 settlements as the engine would have left them, a
// month of traffic: 0.1 % each pending, sent, failed and returned, 0.2 %
// uncertain (half of them flagged for investigation), the rest confirmed;
// each with its receipt (one in ten redelivered), its transitions, its bank
// calls, its movements; one conflict per 10,000 settlements.
var fillSQL = []string{`
	INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash,
	  bank_payment_id, bank_status, send_attempts, first_attempt_at, check_attempts, needs_investigation, investigation_reason,
	  created_at, updated_at)
	SELECT 's-' || lpad(i::text, 7, '0'), 'acc-' || (i % 500), 'DE89370400440532013000', 100 + i % 10000, 'EUR',
	  CASE i % 1000 WHEN 0 THEN 'pending' WHEN 1 THEN 'sent' WHEN 2 THEN 'uncertain' WHEN 5 THEN 'uncertain'
	    WHEN 3 THEN 'failed' WHEN 4 THEN 'returned' ELSE 'confirmed' END,
	  md5('k' || i), 'sha256:' || encode(sha256(('p' || i)::bytea), 'hex'),
	  CASE WHEN i % 1000 = 0 THEN NULL ELSE 'pay-' || i END, NULL,
	  CASE WHEN i % 1000 = 0 THEN 0 ELSE 1 END, CASE WHEN i % 1000 = 0 THEN NULL ELSE t + interval '1 s' END, 1,
	  i % 1000 = 5, CASE WHEN i % 1000 = 5 THEN 'the bank forgot the key' END, t, t + interval '4 s'
	FROM generate_series(1, $1::int) i,
	     LATERAL (SELECT now() - interval '30 days' + i * (interval '30 days' / $1::int) AS t) x`, `
	INSERT INTO settlement_receipts (settlement_id, payload_hash, received_at, replay_count, last_replay_at)
	SELECT settlement_id, payload_hash, created_at, CASE WHEN right(settlement_id, 1) = '7' THEN 1 ELSE 0 END,
	  CASE WHEN right(settlement_id, 1) = '7' THEN created_at + interval '2 s' END FROM settlements`, `
	INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason, at)
	SELECT settlement_id, f, tt, r, created_at + d FROM settlements s, LATERAL (VALUES
	  (NULL, 'pending', 'received', interval '0'),
	  ('pending', CASE WHEN s.state IN ('sent', 'confirmed', 'returned') THEN 'sent' ELSE s.state END, 'bank answered', interval '1 s'),
	  ('sent', 'confirmed', 'bank settled', interval '3 s'),
	  ('confirmed', 'returned', 'bank returned', interval '4 s')) v(f, tt, r, d)
	WHERE f IS NULL OR (f = 'pending' AND s.state <> 'pending') OR (f = 'sent' AND s.state IN ('confirmed', 'returned'))
	   OR (f = 'confirmed' AND s.state = 'returned')`, `
	INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at, finished_at, outcome, bank_status, http_status)
	SELECT settlement_id, op, bank_key, created_at + d, created_at + d + interval '12 ms', 'payment', st, 200
	FROM settlements s, LATERAL (VALUES ('send', interval '1 s', 'accepted'), ('status', interval '3 s', 'settled')) v(op, d, st)
	WHERE s.state <> 'pending' AND (op = 'send' OR s.state IN ('confirmed', 'returned'))`, `
	INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency, bank_payment_id, created_at)
	SELECT settlement_id, k, account_id, amount_cents, currency, bank_payment_id, created_at + interval '3 s'
	FROM settlements s, LATERAL (VALUES ('payout'), ('reversal')) v(k)
	WHERE (k = 'payout' AND s.state IN ('confirmed', 'returned')) OR (k = 'reversal' AND s.state = 'returned')`, `
	INSERT INTO receipt_conflicts (settlement_id, stored_hash, incoming_hash, incoming)
	SELECT settlement_id, payload_hash, 'sha256:' || encode(sha256(('x' || settlement_id)::bytea), 'hex'),
	  jsonb_build_object('settlement_id', settlement_id, 'amount_cents', amount_cents + 1)
	FROM settlements WHERE right(settlement_id, 4) = '0042'`, `
	INSERT INTO operator_actions (settlement_id, operator, action, detail, result, ok, at)
	SELECT settlement_id, 'alice', 'note', 'looked at it', 'recorded', true, updated_at
	FROM settlements WHERE state = 'returned'`,
}

// benchDatabase fills a database with -console.settlements settlements (a
// few minutes for a million) and vacuums it, as autovacuum would have by
// then.
func benchDatabase(b *testing.B) *dbtest.DB {
	db := dbtest.New(b)
	// The benchmark's own connection: no statement timeout for the fill.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	start := time.Now()
	for k, q := range fillSQL {
		var args []any
		if k == 0 {
			args = []any{*benchSettlements}
		}
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			b.Fatalf("error filling: %v\n%s", err, q)
		}
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d settlements in %s", *benchSettlements, time.Since(start).Round(time.Second))
	return db
}

// BenchmarkConsole measures the console's pages over HTTP at
// -console.settlements settlements (default a million): the overview, list
// pages (the first, one deep in the keyset, by account, flagged), a story
// and the conflicts. Besides the mean it reports each page's p50, p99 and
// slowest answer.
func BenchmarkConsole(b *testing.B) {
	db := benchDatabase(b)
	c, err := console.New(console.Config{DB: db.Pool, Resolver: &reconcile.Resolver{DB: db.Pool}})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(c)
	b.Cleanup(srv.Close)

	ctx := context.Background()
	deep := func(filter string, args ...any) string {
		b.Helper()
		var at time.Time
		var id string
		// OFFSET here only finds where to start; the page itself is a keyset.
		q := `SELECT created_at, settlement_id FROM settlements s ` + filter + ` ORDER BY created_at, settlement_id OFFSET $1 LIMIT 1`
		if err := db.Pool.QueryRow(ctx, q, args...).Scan(&at, &id); err != nil {
			b.Fatal(err)
		}
		return inspect.Cursor{CreatedAt: at, SettlementID: id}.String()
	}
	n := *benchSettlements
	var story string
	if err := db.Pool.QueryRow(ctx, `SELECT settlement_id FROM settlements WHERE state = 'returned' ORDER BY settlement_id DESC LIMIT 1`).Scan(&story); err != nil {
		b.Fatal(err)
	}
	pages := []struct{ name, path string }{
		{"overview", "/console/"},
		{"list-first", "/console/settlements"},
		{"list-confirmed-deep", "/console/settlements?" + url.Values{"state": {"confirmed"}, "after": {deep("WHERE state = 'confirmed'", n*9/10)}}.Encode()},
		{"list-all-deep", "/console/settlements?" + url.Values{"after": {deep("", n*9/10)}}.Encode()},
		{"list-account-deep", "/console/settlements?" + url.Values{"account": {"acc-7"}, "after": {deep("WHERE account_id = 'acc-7'", n/500*9/10)}}.Encode()},
		{"list-uncertain-older", "/console/settlements?state=uncertain&older=24h"},
		{"list-flagged", "/console/settlements?flagged=1"},
		{"story", "/console/settlement?" + url.Values{"id": {story}}.Encode()},
		{"conflicts", "/console/conflicts"},
		{"statements", "/console/statements"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			get(b, srv.URL+p.path) // warm: plans cached, pages in memory
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				get(b, srv.URL+p.path)
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))]) / 1e6 }
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(q(1), "max-ms")
		})
	}
}

func get(b *testing.B, url string) {
	resp, err := http.Get(url) //nolint:noctx // a benchmark's loopback request
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s = %d %v\n%.500s", url, resp.StatusCode, err, body)
	}
}
