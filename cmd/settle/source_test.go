package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/bintest"
)

// TestDemoThroughNATS runs `settle demo --source nats` with no NATS_URL:
// the embedded JetStream server is started for the demo and stopped after
// it, the events come through JetStream with redeliveries caused the real
// way, and every invariant holds.
func TestDemoThroughNATS(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)
	out, code := runBin(t, bin, env, "demo", "--source", "nats", "--events", "60", "--faults", "flaky")
	if code != exitOK {
		t.Fatalf("settle demo --source nats exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		"60 payout events for 48 settlements (11 redeliveries, 1 conflicting)",
		"published 48 first deliveries",
		"and went silent: no ack",
		"was killed (SIGKILL) before acknowledging it",
		"The events came through NATS JetStream: 60 messages",
		"the consumer ends with 0 pending, 0 awaiting ack",
		"conflicts 1",
		"needs investigation 0",
		"missing_in_ledger 0", "missing_at_bank 0", "duplicate_at_bank 0", "unresolved 0",
		"settle demo: OK, every invariant holds",
		"stopped the embedded NATS server at",
		"stopped the embedded PostgreSQL cluster",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
	if status, _ := runBin(t, bin, env, "db", "status"); strings.Contains(status, "nats:     running") {
		t.Errorf("the embedded NATS server still runs after the demo:\n%s", status)
	}
}

// TestEmbeddedNATSShared runs a worker with --source nats and no NATS_URL
// (it starts the embedded JetStream server), publishes from another
// process through the same server, finds the invalid message in settle
// reconcile rejects, sees the server in settle db status, and stops it
// with settle db stop once the worker is gone (which leaves it running).
func TestEmbeddedNATSShared(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)
	home := strings.TrimPrefix(env[len(env)-1], "SETTLE_HOME=")
	w, err := workerproc.Start(context.Background(), workerproc.Options{
		Executable: bin, Name: "worker", LogPath: filepath.Join(t.TempDir(), "worker.log"),
		Env:           []string{"SETTLE_HOME=" + home},
		KeepSettleEnv: []string{"SETTLE_HOME"},
		Args:          []string{"--listen", "127.0.0.1:0", "--bank-url", "http://127.0.0.1:1", "--source", "nats", "--log-format", "json"},
		DieWithParent: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Kill)
	// The worker's own environment had no DATABASE_URL: it used the
	// embedded cluster too.
	events := filepath.Join(t.TempDir(), "events.ndjson")
	lines := `{"settlement_id":"n-1","account_id":"a","amount_cents":100,"currency":"EUR","beneficiary":"b"}
{"settlement_id":"n-1","account_id":"a","amount_cents":100,"currency":"EUR","beneficiary":"b"}
this is not an event
`
	if err := os.WriteFile(events, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runBin(t, bin, env, "submit", "--source", "nats", events)
	if code != exitOK || !strings.Contains(out, "3 lines: 3 published to nats") {
		t.Fatalf("settle submit --source nats exited %d:\n%s", code, out)
	}
	var rejects struct {
		Rejects []struct {
			Source      string `json:"source"`
			TransportID string `json:"transport_id"`
			Reason      string `json:"reason"`
			Size        int    `json:"size"`
		} `json:"rejects"`
		Count int `json:"count"`
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		js, _ := runBinOut(t, bin, env, "reconcile", "rejects", "--json")
		if err := json.Unmarshal([]byte(js), &rejects); err == nil && rejects.Count == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reject after 2 minutes: %s\n%s", js, workerproc.Tail(w.LogPath(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// submit publishes its lines concurrently, so the bad line's stream
	// sequence is one of the three, not necessarily the last.
	if r := rejects.Rejects[0]; r.Source != "nats" || (r.TransportID != "1" && r.TransportID != "2" && r.TransportID != "3") ||
		r.Size != len("this is not an event") || r.Reason == "" {
		t.Errorf("reject %+v, want source nats, a transport_id that is a stream sequence (1 to 3), the line's size and a reason", r)
	}
	status, _ := runBin(t, bin, env, "db", "status")
	if !strings.Contains(status, "nats:     running") {
		t.Fatalf("settle db status does not show the embedded NATS server:\n%s", status)
	}
	if err := w.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if status, _ := runBin(t, bin, env, "db", "status"); !strings.Contains(status, "nats:     running") {
		t.Fatalf("the worker stopped the shared NATS server:\n%s", status)
	}
	if out, code := runBin(t, bin, env, "db", "stop"); code != exitOK || !strings.Contains(out, "stopped the embedded NATS server") {
		t.Fatalf("settle db stop exited %d:\n%s", code, out)
	}
	if status, _ := runBin(t, bin, env, "db", "status"); !strings.Contains(status, "nats:     stopped") {
		t.Fatalf("settle db status after db stop:\n%s", status)
	}
}
