package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/kafkatest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// TestSubmitAndWorkerThroughKafka produces NDJSON to a topic of kfake (the
// in-process stand-in for Kafka) with settle submit --source kafka://…,
// runs a worker consuming it, and finds the event settled once, its
// duplicate a replay and the bad line in settle reconcile rejects with
// source kafka and its topic/partition/offset. A missing topic is refused
// by both, and --msg-id event by submit.
func TestSubmitAndWorkerThroughKafka(t *testing.T) {
	t.Parallel()
	kc := kafkatest.Start(t, 2, "payouts")
	spec := kc.Spec("payouts")
	db := dbtest.New(t)
	bin := bintest.Build(t)
	env := envWithout("SETTLE_", "DATABASE_URL=")
	events := filepath.Join(t.TempDir(), "events.ndjson")
	lines := `{"settlement_id":"k-1","account_id":"a","amount_cents":100,"currency":"EUR","beneficiary":"b"}
{"settlement_id":"k-1","account_id":"a","amount_cents":100,"currency":"EUR","beneficiary":"b"}
this is not an event
`
	if err := os.WriteFile(events, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := runBin(t, bin, env, "submit", "--source", kc.Spec("missing"), events); code != exitError || !strings.Contains(out, "does not exist") {
		t.Errorf("submit to a missing topic exited %d:\n%s", code, out)
	}
	if out, code := runBin(t, bin, env, "submit", "--source", spec, "--msg-id", "event", events); code != exitError || !strings.Contains(out, "Kafka has no message id") {
		t.Errorf("submit --msg-id event to kafka exited %d:\n%s", code, out)
	}
	out, code := runBin(t, bin, env, "submit", "--source", spec, events)
	if code != exitOK || !strings.Contains(out, "3 lines: 3 published to "+spec+", 0 invalid, 0 errors") {
		t.Fatalf("settle submit --source kafka exited %d:\n%s", code, out)
	}
	dbEnv := append(env, "DATABASE_URL="+db.URL)
	if out, code := runBin(t, bin, dbEnv, "worker", "--listen", "127.0.0.1:0", "--bank-url", "http://127.0.0.1:1", "--source", kc.Spec("missing")); code != exitError || !strings.Contains(out, "does not exist") {
		t.Errorf("a worker on a missing topic exited %d:\n%s", code, out)
	}
	w := workertest.StartT(t, "worker", db.URL, nil, "--listen", "127.0.0.1:0", "--bank-url", "http://127.0.0.1:1",
		"--source", spec, "--source-lease", "3s", "--log-format", "json")
	var rejects struct {
		Rejects []struct {
			Source      string `json:"source"`
			TransportID string `json:"transport_id"`
			Size        int    `json:"size"`
		} `json:"rejects"`
		Count int `json:"count"`
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		js, _ := runBinOut(t, bin, dbEnv, "reconcile", "rejects", "--json")
		if err := json.Unmarshal([]byte(js), &rejects); err == nil && rejects.Count == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reject after 2 minutes: %s\n%s", js, workerproc.Tail(w.LogPath(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := rejects.Rejects[0]; r.Source != "kafka" || !strings.HasPrefix(r.TransportID, "payouts/") || r.Size != len("this is not an event") {
		t.Errorf("reject %+v, want source kafka, payouts/PARTITION/OFFSET as transport_id and the line's size", r)
	}
	for {
		var n, replays int
		if err := db.Pool.QueryRow(t.Context(), `SELECT count(*), coalesce(sum(replay_count), 0) FROM settlement_receipts`).Scan(&n, &replays); err != nil {
			t.Fatal(err)
		}
		if n == 1 && replays == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d receipts with %d replays, want 1 and 1\n%s", n, replays, workerproc.Tail(w.LogPath(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if log := workerproc.Tail(w.LogPath(), 1000); !strings.Contains(log, "retention") {
		t.Errorf("the worker did not compare the topic's retention with --replay-horizon:\n%s", log)
	}
	if err := w.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
}
