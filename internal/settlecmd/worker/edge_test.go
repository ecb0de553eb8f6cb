package worker_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/settlecmd/worker"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// edgeReq is one request to a worker's edge.
type edgeReq struct {
	method, path, host, contentType, body string
	header                                []string // name, value, …
}

// send sends r to the server at base and returns the status and body.
func send(t *testing.T, base string, r edgeReq) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), r.method, base+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.host != "" {
		req.Host = r.host
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	for i := 0; i+1 < len(r.header); i += 2 {
		req.Header.Set(r.header[i], r.header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// edgeWorker serves a worker's handler on a real HTTP server and returns
// its base URL, its database and its log.
func edgeWorker(t *testing.T, token string, tweak func(*worker.Config)) (string, *pgxpool.Pool, *settletest.Buffer) {
	t.Helper()
	logs := &settletest.Buffer{}
	var pool *pgxpool.Pool
	w := newWorker(t, token, func(c *worker.Config) {
		c.Logger = slogJSON(logs)
		pool = c.Pool
		if tweak != nil {
			tweak(c)
		}
	})
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	return srv.URL, pool, logs
}

func stored(t *testing.T, pool *pgxpool.Pool, id string) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM settlement_receipts WHERE settlement_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func event(id string) string {
	return `{"settlement_id":"` + id + `","account_id":"acc","amount_cents":100,"currency":"EUR","beneficiary":"b"}`
}

// TestWritesTakeJSONOnly (issue 32, item 5): a browser's cross-site simple
// request (text/plain, a form, no type at all) creates nothing: 415 with a
// problem+json body naming the fix; JSON and NDJSON are taken. The log
// holds one line of the refusals, not one per request.
func TestWritesTakeJSONOnly(t *testing.T) {
	t.Parallel()
	base, pool, logs := edgeWorker(t, "", nil)
	for i, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx", "json"} {
		id := "ct-" + string(rune('a'+i))
		for _, path := range []string{"/v1/settlements", "/v1/settlements/batch"} {
			code, body := send(t, base, edgeReq{method: http.MethodPost, path: path, contentType: ct, body: event(id)})
			if code != http.StatusUnsupportedMediaType || !strings.Contains(body, "application/json") {
				t.Errorf("POST %s as %q = %d %s, want 415 naming application/json", path, ct, code, body)
			}
		}
		if stored(t, pool, id) {
			t.Errorf("POST as %q stored a receipt", ct)
		}
	}
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
		id := "ok-" + string(rune('a'+i))
		if code, body := send(t, base, edgeReq{method: http.MethodPost, path: "/v1/settlements", contentType: ct, body: event(id)}); code != http.StatusCreated {
			t.Errorf("POST as %q = %d %s, want 201", ct, code, body)
		}
	}
	if code, body := send(t, base, edgeReq{method: http.MethodPost, path: "/v1/settlements/batch", contentType: "application/x-ndjson", body: event("nd-1") + "\n" + event("nd-2")}); code != http.StatusOK || !stored(t, pool, "nd-2") {
		t.Errorf("NDJSON batch = %d %s", code, body)
	}
	if n := strings.Count(logs.String(), "write without a JSON content type refused"); n < 1 || n > 2 {
		t.Errorf("%d log lines for 14 refused writes, want 1 (2 at a boundary of the interval):\n%s", n, logs.String())
	}
}

// TestCrossOriginAndHost (issue 32, item 5): the whole mux, River UI and
// console included, refuses writes from another site's page (403) and
// requests whose Host is neither this machine nor a --public-host (421,
// DNS rebinding); /healthz and /readyz answer any Host.
func TestCrossOriginAndHost(t *testing.T) {
	t.Parallel()
	base, pool, _ := edgeWorker(t, "", func(c *worker.Config) {
		c.PublicHosts = []string{"settle.example.com", "api.example.com:8443"}
		c.RiverUIAdmin = true
	})
	port := base[strings.LastIndex(base, ":")+1:]
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Site", "same-site"},
		{"Origin", "http://evil.example"}, {"Origin", "http://localhost:1"},
	} {
		for _, r := range []edgeReq{
			{method: http.MethodPost, path: "/v1/settlements", contentType: "application/json", body: event("xo-1")},
			{method: http.MethodPut, path: "/riverui/api/queues/bank/pause"},
			{method: http.MethodPost, path: "/riverui/api/jobs/cancel", contentType: "text/plain;charset=UTF-8", body: `{"ids":["1"]}`},
			{method: http.MethodPost, path: "/console/settlement/note", contentType: "application/x-www-form-urlencoded", body: "id=xo-1&note=x&operator=eve"},
		} {
			r.header = h
			if code, body := send(t, base, r); code != http.StatusForbidden {
				t.Errorf("%s %s with %s: %d %.200s, want 403", r.method, r.path, h, code, body)
			}
		}
	}
	if stored(t, pool, "xo-1") {
		t.Error("a cross-site POST stored a receipt")
	}
	// The River UI's own page: same-origin.
	if code, body := send(t, base, edgeReq{method: http.MethodGet, path: "/riverui/api/queues", header: []string{"Sec-Fetch-Site", "same-origin"}}); code != http.StatusOK {
		t.Errorf("same-origin GET of the River UI: %d %.200s", code, body)
	}

	for _, host := range []string{"evil.example", "evil.example:" + port, "rebind.attacker.example:" + port, "settle.example.com.evil.example",
		"api.example.com", "api.example.com:443", "127.0.0.1.nip.io:" + port, "localhost.evil.example"} {
		for _, path := range []string{"/v1/settlements/x", "/console/", "/riverui/", "/riverui/api/queues", "/metrics"} {
			if code, body := send(t, base, edgeReq{method: http.MethodGet, path: path, host: host}); code != http.StatusMisdirectedRequest || !strings.Contains(body, "--public-host") {
				t.Errorf("GET %s with Host %s = %d %.200s, want 421 naming --public-host", path, host, code, body)
			}
		}
		if code, body := send(t, base, edgeReq{method: http.MethodPost, path: "/v1/settlements", host: host, contentType: "application/json", body: event("rb-1")}); code != http.StatusMisdirectedRequest {
			t.Errorf("POST with Host %s = %d %s, want 421", host, code, body)
		}
	}
	if stored(t, pool, "rb-1") {
		t.Error("a rebound POST stored a receipt")
	}
	for _, host := range []string{"localhost:" + port, "LOCALHOST", "127.0.0.1:" + port, "[::1]:" + port, "127.0.0.2", "settle.example.com",
		"settle.example.com:443", "Settle.Example.com.", "api.example.com:8443"} {
		if code, body := send(t, base, edgeReq{method: http.MethodGet, path: "/v1/settlements/x", host: host}); code != http.StatusNotFound {
			t.Errorf("GET with Host %s = %d %.200s, want 404 (served)", host, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := send(t, base, edgeReq{method: http.MethodGet, path: path, host: "10.1.2.3:8080"}); code != http.StatusOK {
			t.Errorf("GET %s by a probe's Host = %d, want 200", path, code)
		}
	}
}

// TestRiverUIReadOnlyAndBounded (issue 32, item 7): without --riverui-admin
// the River UI reads but never writes (pausing the bank queue stops every
// payment), even with the token; with it, a body over 1 MiB is refused
// before it is read into memory.
func TestRiverUIReadOnlyAndBounded(t *testing.T) {
	t.Parallel()
	const tok = "riverui-token-0123456789"
	auth := []string{"Authorization", "Bearer " + tok}
	base, pool, _ := edgeWorker(t, tok, nil)
	if _, err := pool.Exec(context.Background(), `INSERT INTO river_queue (name, metadata, created_at, updated_at) VALUES ('bank', '{}', now(), now())`); err != nil {
		t.Fatal(err)
	}
	paused := func() bool {
		var p bool
		if err := pool.QueryRow(context.Background(), `SELECT paused_at IS NOT NULL FROM river_queue WHERE name = 'bank'`).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, r := range []edgeReq{
		{method: http.MethodPut, path: "/riverui/api/queues/bank/pause"},
		{method: http.MethodPatch, path: "/riverui/api/queues/bank", contentType: "application/json", body: `{"concurrency":null}`},
		{method: http.MethodPost, path: "/riverui/api/jobs/cancel", contentType: "application/json", body: `{"ids":["1"]}`},
		{method: http.MethodPost, path: "/riverui/api/jobs/delete", contentType: "application/json", body: `{"ids":["1"]}`},
		{method: http.MethodPost, path: "/riverui/api/jobs/retry", contentType: "application/json", body: `{"ids":["1"]}`},
	} {
		r.header = auth
		if code, body := send(t, base, r); code != http.StatusForbidden || !strings.Contains(body, "--riverui-admin") {
			t.Errorf("%s %s read-only: %d %.200s, want 403 naming --riverui-admin", r.method, r.path, code, body)
		}
	}
	if paused() {
		t.Fatal("a read-only River UI paused the bank queue")
	}
	if code, body := send(t, base, edgeReq{method: http.MethodGet, path: "/riverui/api/queues/bank", header: auth}); code != http.StatusOK {
		t.Errorf("GET a queue read-only: %d %.200s", code, body)
	}

	admin, apool, _ := edgeWorker(t, tok, func(c *worker.Config) { c.RiverUIAdmin = true })
	if _, err := apool.Exec(context.Background(), `INSERT INTO river_queue (name, metadata, created_at, updated_at) VALUES ('bank', '{}', now(), now())`); err != nil {
		t.Fatal(err)
	}
	// Over 1 MiB of valid JSON: refused by its length, and when it is sent
	// chunked, when the reading passes the bound.
	big := `{"ids":["1"` + strings.Repeat(`,"1"`, 600_000) + `]}`
	if code, body := send(t, admin, edgeReq{method: http.MethodPost, path: "/riverui/api/jobs/cancel", contentType: "application/json", body: big, header: auth}); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2.4 MB body to the River UI = %d %.200s, want 413", code, body)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, admin+"/riverui/api/jobs/cancel", io.MultiReader(bytes.NewReader([]byte(big))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 || resp.StatusCode >= 500 {
		t.Errorf("a 2.4 MB chunked body to the River UI = %d, want a 4xx", resp.StatusCode)
	}
	if code, body := send(t, admin, edgeReq{method: http.MethodPut, path: "/riverui/api/queues/bank/pause", header: auth}); code != http.StatusOK {
		t.Errorf("PUT pause with --riverui-admin = %d %.200s", code, body)
	}
}

// TestOpenOnlyOnLoopback (issue 32, item 5): without an API token the
// worker refuses to listen beyond this machine, and on loopback it says
// loudly that it is open.
func TestOpenOnlyOnLoopback(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	_, bankURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 1})
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0", "myhost:0"} {
		c := worker.DefaultConfig()
		c.Pool, c.BankURL, c.Listen = db.Pool, bankURL, listen
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "without an API token") {
			t.Errorf("--listen %s without a token: %v, want a refusal", listen, err)
		}
		c.APIToken = "open-token-0123456789"
		if err := c.Validate(); err != nil {
			t.Errorf("--listen %s with a token: %v", listen, err)
		}
	}
	logs := &settletest.Buffer{}
	c := worker.DefaultConfig()
	c.Pool, c.BankURL, c.Listen, c.Logger = db.Pool, bankURL, "127.0.0.1:0", slogJSON(logs)
	c.ShutdownTimeout = 5 * time.Second
	w, err := worker.New(c)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if !strings.Contains(logs.String(), "OPEN: no API token") {
		t.Errorf("no loud line about an open worker:\n%s", logs.String())
	}
}

// slogJSON is a logger writing every level as JSON to w.
func slogJSON(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestRejectsLogBounded (issue 32, item 14): a batch of bad events logs
// one line with counts, not one per event, and a flood of forged webhooks
// logs one line with a count of those left out.
func TestRejectsLogBounded(t *testing.T) {
	t.Parallel()
	base, _, logs := edgeWorker(t, "", func(c *worker.Config) { c.WebhookSecret = "whsec_test" })
	var batch strings.Builder
	for i := 0; i < 300; i++ {
		batch.WriteString(`{"settlement_id":"bad","amount_cents":-1}` + "\n")
	}
	batch.WriteString(event("good-1") + "\n")
	if code, body := send(t, base, edgeReq{method: http.MethodPost, path: "/v1/settlements/batch", contentType: "application/x-ndjson", body: batch.String()}); code != http.StatusOK {
		t.Fatalf("batch = %d %.300s", code, body)
	}
	for i := 0; i < 50; i++ {
		if code, _ := send(t, base, edgeReq{method: http.MethodPost, path: "/v1/bank/webhooks/settle", contentType: "application/json",
			body: `{"reference":"x"}`, header: []string{"Settle-Signature", "t=1,v1=00"}}); code != http.StatusBadRequest {
			t.Fatalf("forged webhook = %d, want 400", code)
		}
	}
	out := logs.String()
	if n := strings.Count(out, `"msg":"intake: invalid"`); n != 0 {
		t.Errorf("%d per-event lines for the batch's rejects, want none", n)
	}
	if n := strings.Count(out, "batch events rejected"); n != 1 || !strings.Contains(out, `"rejected":300`) {
		t.Errorf("%d summary lines of the batch's rejects, want 1 saying 300:\n%.2000s", n, out)
	}
	if n := strings.Count(out, "webhook refused"); n < 1 || n > 2 {
		t.Errorf("%d log lines for 50 forged webhooks, want 1 (2 at a boundary of the interval)", n)
	}
}

// TestPublicURL: --public-url is the console's address as account
// holders' browsers reach it. A bank sends them back only to an https
// address (plain http only on this machine) with no query, fragment or
// credentials; anything else is refused at start. Its host is answered to
// (the redirect comes to it), other hosts still get 421.
func TestPublicURL(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	_, bankURL := fakebanktest.NewServer(t, fakebank.Options{Seed: 1})
	for _, bad := range []string{"pay.example.com", "/console", "ftp://pay.example.com", "http://pay.example.com",
		"https://", "https://pay.example.com/?a=b", "https://pay.example.com/#x", "https://u:p@pay.example.com", "https://pay.example.com:99999999", "https://pay .example.com"} {
		c := worker.DefaultConfig()
		c.Pool, c.BankURL, c.PublicURL = db.Pool, bankURL, bad
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--public-url") {
			t.Errorf("--public-url %q: %v, want a refusal naming --public-url", bad, err)
		}
	}
	for _, good := range []string{"https://pay.example.com", "https://pay.example.com:8443/settle/", "http://127.0.0.1:8080", "http://localhost"} {
		c := worker.DefaultConfig()
		c.Pool, c.BankURL, c.PublicURL = db.Pool, bankURL, good
		if err := c.Validate(); err != nil {
			t.Errorf("--public-url %q: %v", good, err)
		}
	}
	base, _, _ := edgeWorker(t, "", func(c *worker.Config) { c.PublicURL = "https://pay.example.com:8443/settle" })
	if code, body := send(t, base, edgeReq{method: http.MethodGet, path: "/v1/settlements/x", host: "pay.example.com:8443"}); code != http.StatusNotFound {
		t.Errorf("GET with the public URL's Host = %d %.200s, want 404 (served)", code, body)
	}
	for _, host := range []string{"pay.example.com", "pay.example.com:443", "evil.example"} {
		if code, body := send(t, base, edgeReq{method: http.MethodGet, path: "/v1/settlements/x", host: host}); code != http.StatusMisdirectedRequest {
			t.Errorf("GET with Host %s = %d %.200s, want 421", host, code, body)
		}
	}
}
