package console_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/settlecmd/worker"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/settlement"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// updateDocs makes the browser tests also write the README's screenshots
// (docs/console-overview.png and docs/console-story.png).
var updateDocs = flag.Bool("update-docs", false, "write the README's console screenshots under docs/")

// screenshotDir is where the browser tests save their screenshots: a
// directory git ignores, so that a developer can look at them after a run.
const screenshotDir = "testdata/screenshots"

// testBundle is a whole worker (River, the bank client, the HTTP API and
// the console) on a private database and an in-process fakebank, serving
// on a free port until the test ends.
type testBundle struct {
	db    *dbtest.DB
	bank  *fakebank.Bank
	base  string // http://host:port of the worker
	token string
	logs  *settletest.Buffer
}

// setup boots the worker with token as its API token ("" for an open
// console), the bank's initial faults, and tune applied to its config.
func setup(t *testing.T, token string, faults fakebank.Faults, tune func(*worker.Config)) *testBundle {
	t.Helper()
	b := &testBundle{db: dbtest.New(t), token: token, logs: &settletest.Buffer{}}
	var bankURL string
	b.bank, bankURL = fakebanktest.NewServer(t, fakebank.Options{Seed: 1, Faults: faults})
	c := worker.DefaultConfig()
	c.Pool, c.BankURL, c.APIToken, c.Listen = b.db.Pool, bankURL, token, "127.0.0.1:0"
	c.ShutdownTimeout = 5 * time.Second
	// One request per bank call: a lost answer makes the settlement
	// uncertain instead of being retried inside the call.
	c.BankAttempts = 1
	c.BankTimeout = 5 * time.Second
	c.CheckInterval, c.MaxCheckInterval = 100*time.Millisecond, time.Second
	c.SweepInterval, c.FetchPollInterval = time.Second, 50*time.Millisecond
	c.Logger = slogJSON(b.logs)
	if tune != nil {
		tune(&c)
	}
	w, err := worker.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(addr string) { ready <- addr }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker Run: %v", err)
		}
		w.Close()
	})
	select {
	case addr := <-ready:
		b.base = "http://" + addr
	case err := <-done:
		t.Fatalf("worker Run: %v", err)
	}
	return b
}

// auth is the API's Authorization header ("" when open).
func (b *testBundle) auth() string {
	if b.token == "" {
		return ""
	}
	return "Bearer " + b.token
}

// submit posts one event for settlement id and returns the HTTP status.
func (b *testBundle) submit(t *testing.T, id, account string, amount int64) int {
	t.Helper()
	ev := fmt.Sprintf(`{"settlement_id":%q,"account_id":%q,"amount_cents":%d,"currency":"EUR","beneficiary":"DE89370400440532013000"}`,
		id, account, amount)
	code, body := settletest.Do(t, http.MethodPost, b.base+"/v1/settlements", b.auth(), ev)
	if code != http.StatusCreated && code != http.StatusOK && code != http.StatusConflict {
		t.Fatalf("POST %s = %d %s", id, code, body)
	}
	return code
}

// view reads settlement id through the API.
func (b *testBundle) view(t *testing.T, id string) settlement.View {
	t.Helper()
	code, body := settletest.Get(t, b.base+"/v1/settlements/"+id, b.auth())
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", id, code, body)
	}
	var v settlement.View
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// waitState waits until settlement id is in state want.
func (b *testBundle) waitState(t *testing.T, id string, want settlement.State) settlement.View {
	t.Helper()
	var v settlement.View
	settletest.Wait(t, id+" "+string(want), func() (bool, string) {
		v = b.view(t, id)
		return v.Settlement.State == want, string(v.Settlement.State)
	})
	return v
}

// actions reads the operator actions recorded on settlement id.
func (b *testBundle) actions(t *testing.T, id string) []inspect.OperatorAction {
	t.Helper()
	st, err := (&inspect.Inspector{DB: b.db.Pool}).Show(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st.OperatorActions
}

// saveDocs copies a screenshot to docs/ when -update-docs is given.
func saveDocs(t *testing.T, path, name string) {
	t.Helper()
	if !*updateDocs {
		return
	}
	png, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "docs", name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// slogJSON is a logger writing every level as JSON to w.
func slogJSON(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
