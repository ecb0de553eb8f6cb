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

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
	_ "github.com/settle/settle/bankclient/stripe" // the stripe connector, for --bank stripe
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/checktest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, bintest.Cleanup)) }

// bank is an in-process fakebank whose HTTP requests are counted.
type bank struct {
	*fakebank.Bank
	url string
	// conn is the connector speaking the bank's profile.
	conn                  bankclient.Connector
	posts, status, others atomic.Int64
}

func startBank(t *testing.T, seed int64, faults fakebank.Faults) *bank {
	t.Helper()
	return startBankAs(t, seed, faults, settle.Connector.Name)
}

// startBankAs is startBank serving the API of the connector called name
// (the fakebank profile of the same name).
func startBankAs(t *testing.T, seed int64, faults fakebank.Faults, name string) *bank {
	t.Helper()
	return startBankOpts(t, fakebank.Options{Seed: seed, Faults: faults, Profile: name}, name)
}

// connectors are the connectors the banks' own clients are made with, as
// settle lists them (Open Banking's unconfigured: its tests reach the bank
// through the workers).
var connectors = bankclient.Connectors{settle.Connector, stripe.Connector, obie.NewConnector(obie.Config{})}

// startBankOpts is startBankAs with every option of the fakebank.
func startBankOpts(t *testing.T, opts fakebank.Options, name string) *bank {
	t.Helper()
	conn, err := connectors.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fakebank.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := &bank{Bank: fb, conn: conn}
	h := fb.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && (r.URL.Path == "/v1/payments" || r.URL.Path == "/v1/payouts" ||
			strings.HasSuffix(r.URL.Path, "/domestic-payments")):
			b.posts.Add(1)
		case strings.HasPrefix(r.URL.Path, "/v1/payments/by-key/") || strings.HasPrefix(r.URL.Path, "/v1/payouts/") ||
			(r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/domestic-payments/")):
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

// workerFlags are workerproc.FastFlags with shorter job timeouts and
// leases still, so that a crashed worker's settlements are resolved within
// seconds of the restart, and more bank concurrency for the throughput
// test.
func workerFlags(bankURL string) []string {
	return append(workerproc.FastFlags(bankURL),
		"--job-timeout", "3s",
		"--rescue-after", "5s",
		"--lease", "4s",
		"--sweep-interval", "250ms",
		"--fetch-poll-interval", "100ms",
		"--bank-concurrency", "20",
		"--db-max-conns", "12",
	)
}

// startWorker starts `settle worker` against dbURL and waits until it
// listens. env adds variables (SETTLE_CRASH_AT=…). The process is killed when
// the test ends if it is still running.
func startWorker(t *testing.T, name, dbURL string, env []string, args ...string) *workertest.Worker {
	t.Helper()
	return workertest.StartT(t, name, dbURL, env, args...)
}

// waitExit waits for the worker to exit and returns its status.
func waitExit(t *testing.T, w *workertest.Worker, within time.Duration) *os.ProcessState {
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

// waitAllTerminal waits until want settlements exist and all are
// terminal.
func waitAllTerminal(t *testing.T, db *dbtest.DB, want int) {
	t.Helper()
	ctx := context.Background()
	settletest.Wait(t, fmt.Sprintf("%d terminal settlements", want), func() (bool, string) {
		var terminal, total int
		if err := db.Pool.QueryRow(ctx,
			`SELECT count(*) FILTER (WHERE state IN ('confirmed', 'failed')), count(*) FROM settlements`).Scan(&terminal, &total); err != nil {
			t.Fatal(err)
		}
		state := fmt.Sprintf("%d of %d terminal", terminal, total)
		rows, err := db.Pool.Query(ctx, `SELECT settlement_id || ' ' || state || ' ' || coalesce(investigation_reason, '') || ' next ' || coalesce(next_check_at::text, '-')
			FROM settlements WHERE state NOT IN ('confirmed', 'failed') ORDER BY settlement_id LIMIT 5`)
		if err == nil {
			if open, err := pgx.CollectRows(rows, pgx.RowTo[string]); err == nil && len(open) > 0 {
				state += "; open: " + strings.Join(open, ", ")
			}
		}
		return terminal == want && total == want, state
	})
}

// checkInvariants runs the one exactly-once checker once every settlement
// is terminal: against the bank's books, and, when want is given, with each
// settlement holding the amount of its first accepted payload.
func checkInvariants(t *testing.T, db *dbtest.DB, b *bank, want map[string]int64) {
	t.Helper()
	checktest.CheckInvariantsAt(t, db.Pool, b.books(t), audit.Expect{First: checktest.Amounts(want), Recovered: true})
}

// books returns a bankclient.Bank whose statement is the bank's books: its
// own connector's when the bank's API has a list of payments, else the
// fakebank's books read in this process (Open Banking has no list).
func (b *bank) books(t *testing.T) bankclient.Bank {
	t.Helper()
	if b.conn.Capabilities.NoList {
		return b.BooksClient()
	}
	client, err := b.conn.New(b.url, bankclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return client
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

// killMidCall delivers a batch with deliver while the bank b answers each
// call only after 400–600 ms, waits until a call to it is in flight inside
// a running job of its queue, runs kill (which SIGKILLs a worker and starts
// another) and gives the bank back its faults.
//
// Waiting for running bank jobs before delivering more events, as these
// tests once did, can wait for ever: one job sends a batch of settlements,
// so a worker may finish all it was given, and then no bank job runs until
// more events come. Here the batch just delivered makes the jobs, and the
// slow answers keep each call in flight for longer than a pause of the
// wait, so the kill comes mid-call whatever the machine's load.
func killMidCall(t *testing.T, db *dbtest.DB, b *bank, bankName string, faults fakebank.Faults, deliver, kill func()) (running, inFlight int) {
	t.Helper()
	slow := faults
	slow.LatencyMinMS, slow.LatencyMaxMS = 400, 600
	if err := b.SetFaults(slow); err != nil {
		t.Fatal(err)
	}
	deliver()
	ctx := context.Background()
	settletest.Wait(t, "a bank call in flight in a running bank job", func() (bool, string) {
		if err := db.Pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM river_job WHERE queue = 'bank_' || $1 AND state = 'running'),
			(SELECT count(*) FROM bank_attempts a JOIN settlements s USING (settlement_id)
			  WHERE a.finished_at IS NULL AND s.bank = $1)`, bankName).Scan(&running, &inFlight); err != nil {
			t.Fatal(err)
		}
		return running > 0 && inFlight > 0, fmt.Sprintf("%d bank jobs running, %d calls in flight", running, inFlight)
	})
	kill()
	if err := b.SetFaults(faults); err != nil {
		t.Fatal(err)
	}
	return running, inFlight
}
