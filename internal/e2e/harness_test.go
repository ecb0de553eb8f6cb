package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testbin"
	"github.com/settle/settle/internal/testdb"
	"github.com/settle/settle/internal/testworker"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m, testbin.Cleanup)) }

// bank is an in-process fakebank whose HTTP requests are counted.
type bank struct {
	*fakebank.Bank
	url                   string
	posts, status, others atomic.Int64
}

func startBank(t *testing.T, seed int64, faults bankclient.Faults) *bank {
	t.Helper()
	fb, err := fakebank.New(fakebank.Options{Seed: seed, Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	b := &bank{Bank: fb}
	h := fb.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/payments":
			b.posts.Add(1)
		case strings.HasPrefix(r.URL.Path, "/v1/payments/by-key/"):
			b.status.Add(1)
		default:
			b.others.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	b.url = srv.URL
	t.Cleanup(func() {
		_ = fb.Close()
		srv.Close()
	})
	return b
}

// workerFlags are short intervals so that a crashed worker's settlements
// are resolved within seconds of the restart.
func workerFlags(bankURL string) []string {
	return []string{
		"--listen", "127.0.0.1:0",
		"--bank-url", bankURL,
		"--pending-grace", "2s",
		"--job-timeout", "3s",
		"--rescue-after", "5s",
		"--lease", "4s",
		"--sweep-interval", "250ms",
		"--check-interval", "200ms",
		"--max-check-interval", "1s",
		"--fetch-poll-interval", "100ms",
		"--bank-timeout", "2s",
		"--shutdown-timeout", "6s",
		"--bank-concurrency", "20",
		"--db-max-conns", "12",
		"--log-format", "json",
	}
}

// startWorker starts `settle worker` against dbURL and waits until it
// listens. env adds variables (SETTLE_CRASH_AT=…). The process is killed when
// the test ends if it is still running.
func startWorker(t *testing.T, name, dbURL string, env []string, args ...string) *testworker.Worker {
	t.Helper()
	return testworker.StartT(t, name, dbURL, env, args...)
}

// waitExit waits for the worker to exit and returns its status.
func waitExit(t *testing.T, w *testworker.Worker, within time.Duration) *os.ProcessState {
	t.Helper()
	ps, err := w.Wait(within)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// post sends one event; it returns the status code, or an error when the
// worker gave no answer (it died).
func post(baseURL string, ev intake.Event) (int, error) {
	body, _ := json.Marshal(ev)
	resp, err := httpClient.Post(baseURL+"/v1/settlements", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// postBatch sends events as one NDJSON batch and returns one status per event.
func postBatch(baseURL string, evs []intake.Event) ([]int, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, ev := range evs {
		_ = enc.Encode(ev)
	}
	resp, err := httpClient.Post(baseURL+"/v1/settlements/batch", "application/x-ndjson", &buf)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("batch answered %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Results []struct {
			Status int `json:"status"`
		} `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(evs) {
		return nil, fmt.Errorf("batch of %d answered %d results", len(evs), len(out.Results))
	}
	st := make([]int, len(evs))
	for i, r := range out.Results {
		st[i] = r.Status
	}
	return st, nil
}

// waitAllTerminal polls the database until want settlements exist and all
// are terminal, or fails after within.
func waitAllTerminal(t *testing.T, db *testdb.DB, want int, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		var terminal, total int
		if err := db.Pool.QueryRow(ctx,
			`SELECT count(*) FILTER (WHERE state IN ('confirmed', 'failed')), count(*) FROM settlements`).Scan(&terminal, &total); err != nil {
			t.Fatal(err)
		}
		if terminal == want && total == want {
			return
		}
		if time.Now().After(deadline) {
			rows, err := db.Pool.Query(ctx, `SELECT settlement_id, state, coalesce(investigation_reason, ''), next_check_at FROM settlements
				WHERE state NOT IN ('confirmed', 'failed') ORDER BY settlement_id LIMIT 10`)
			if err == nil {
				for rows.Next() {
					var id, st, reason string
					var next *time.Time
					_ = rows.Scan(&id, &st, &reason, &next)
					t.Logf("not terminal: %s %s %q next_check_at=%v", id, st, reason, next)
				}
				rows.Close()
			}
			t.Fatalf("%d of %d settlements terminal after %s (want %d)", terminal, total, within, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkLedger checks the invariants in SQL: exactly one movement for every
// confirmed settlement, equal to its amount and currency; none for any
// other; and amounts equal to the first accepted payload (want, when given).
func checkLedger(t *testing.T, db *testdb.DB, want map[string]int64) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `
		SELECT s.settlement_id, s.state, s.amount_cents, coalesce(m.n, 0), coalesce(m.amount, 0), coalesce(m.currency = s.currency AND m.account_id = s.account_id, true)
		FROM settlements s
		LEFT JOIN (SELECT settlement_id, count(*) n, sum(amount_cents) amount, min(currency) currency, min(account_id) account_id
		           FROM ledger_movements GROUP BY settlement_id) m USING (settlement_id)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, state          string
			amount, n, moved   int64
			sameCurrencyAndAcc bool
		)
		if err := rows.Scan(&id, &state, &amount, &n, &moved, &sameCurrencyAndAcc); err != nil {
			t.Fatal(err)
		}
		if w, ok := want[id]; want != nil && (!ok || w != amount) {
			t.Errorf("settlement %s holds amount %d, first accepted payload had %d (known %v)", id, amount, w, ok)
		}
		switch {
		case state == "confirmed" && (n != 1 || moved != amount || !sameCurrencyAndAcc):
			t.Errorf("confirmed settlement %s has %d movements for %d (amount %d)", id, n, moved, amount)
		case state != "confirmed" && n != 0:
			t.Errorf("%s settlement %s has %d movements", state, id, n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// checkBank checks that the bank paid no settlement twice, and that what it
// settled matches the ledger: every settled payment at the bank has its
// confirmed settlement with the same amount, and no failed settlement was
// settled at the bank.
func checkBank(t *testing.T, db *testdb.DB, b *bank) {
	t.Helper()
	if st := b.Stats(); st.MaxPaymentsPerReference > 1 {
		t.Errorf("the bank paid a settlement twice: %+v", st)
	}
	client, err := bankclient.New(b.url, bankclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for p, err := range bankclient.Payments(ctx, client, 1000) {
		if err != nil {
			t.Fatal(err)
		}
		var state string
		var amount int64
		err := db.Pool.QueryRow(ctx, `SELECT state, amount_cents FROM settlements WHERE settlement_id = $1`, p.Reference).Scan(&state, &amount)
		if err != nil {
			t.Errorf("bank payment %s for unknown settlement %q: %v", p.ID, p.Reference, err)
			continue
		}
		if p.AmountCents != amount {
			t.Errorf("bank payment %s for %s: amount %d, settlement %d", p.ID, p.Reference, p.AmountCents, amount)
		}
		if p.Status == bankclient.StatusSettled && state != "confirmed" {
			t.Errorf("bank settled %s but the settlement is %s", p.Reference, state)
		}
		if (p.Status == bankclient.StatusFailed || p.Status == bankclient.StatusReturned) && state != "failed" {
			t.Errorf("bank %s %s but the settlement is %s", p.Status, p.Reference, state)
		}
	}
}

// lockedURLs is a set of worker URLs that changes as workers restart.
type lockedURLs struct {
	mu   sync.Mutex
	urls []string
}

func (l *lockedURLs) set(i int, u string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.urls[i] = u
}

func (l *lockedURLs) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.urls...)
}
