package faulttest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/loadtest"
)

// TestBatchWhileDatabaseDown posts a batch while PostgreSQL is stopped: the
// whole batch is answered 503 with Retry-After and nothing in it is
// acknowledged (no per-event 201 for what was never committed). Once the
// server is back the same batch is taken in full, and the settlements are
// paid once.
func TestBatchWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	cluster := startCluster(t)
	bank := startBank(t, 3, fakebank.Faults{SettleDelayMS: 100})
	w := startWorker(t, "w-batch", cluster.URL, workerproc.FastFlags(bank.URL)...)
	pool := connect(t, cluster.URL)
	ctx := deadline(t, 3*time.Minute)

	evs := events("batch-down", 25)
	var body bytes.Buffer
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		body.Write(append(b, '\n'))
	}
	postBatch := func() (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL()+"/v1/settlements/batch", bytes.NewReader(body.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, b
	}

	if err := cluster.Stop(ctx, true); err != nil {
		t.Fatal(err)
	}
	status, header, answer := postBatch()
	if status != http.StatusServiceUnavailable || header.Get("Retry-After") == "" {
		t.Fatalf("batch while the database is down: %d (Retry-After %q) %s, want 503 with Retry-After", status, header.Get("Retry-After"), answer)
	}
	if bytes.Contains(answer, []byte(`"status":201`)) || bytes.Contains(answer, []byte(`"status":200`)) {
		t.Fatalf("an event was acknowledged while the database was down: %s", answer)
	}

	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "/readyz after the restart", func() bool { return get(t, w.URL()+"/readyz") == http.StatusOK })
	status, _, answer = postBatch()
	var resp intake.BatchResponse
	if err := json.Unmarshal(answer, &resp); status != http.StatusOK || err != nil || len(resp.Results) != len(evs) {
		t.Fatalf("batch after the restart: %d %v %s", status, err, answer)
	}
	acked := map[string]int64{}
	for i, r := range resp.Results {
		if r.Status != http.StatusCreated {
			t.Fatalf("event %d: %d, want 201 (nothing was stored while the database was down)", i, r.Status)
		}
		acked[evs[i].SettlementID] = evs[i].AmountCents
	}
	if err := loadtest.WaitTerminal(ctx, pool, len(evs)); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, pool, bank, acked)
}
