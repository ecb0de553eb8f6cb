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
	"github.com/settle/settle/internal/testsupport/mototest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// TestSourceSpecs checks which --source SPECs are taken.
func TestSourceSpecs(t *testing.T) {
	t.Parallel()
	for spec, ok := range map[string]bool{
		"nats": true,
		"sqs:https://sqs.eu-west-1.amazonaws.com/123456789012/payouts": true,
		"sqs:http://127.0.0.1:5000/123456789012/payouts":               true,
		"sqs:":                      false,
		"sqs:payouts":               false,
		"sqs:ftp://host/1/payouts":  false,
		"sqs:https://host":          false,
		"kafka://broker:9092/topic": true,
		"kafka://broker/topic":      false,
		"rabbit":                    false,
	} {
		if err := checkSpec(spec); (err == nil) != ok {
			t.Errorf("checkSpec(%q) = %v, want ok=%v", spec, err, ok)
		}
	}
}

// TestSubmitAndWorkerThroughSQS publishes NDJSON to a queue of moto_server
// (the stand-in for SQS) with settle submit --source sqs:URL, runs a
// worker with --source sqs:URL reaching it through the standard AWS
// environment, and finds the event settled once, its duplicate a replay
// and the bad line in settle reconcile rejects with source sqs and its
// MessageId.
func TestSubmitAndWorkerThroughSQS(t *testing.T) {
	t.Parallel()
	moto := mototest.Start(t)
	queue := moto.Queue(t, 30*time.Second)
	db := dbtest.New(t)
	bin := bintest.Build(t)
	env := append(envWithout("SETTLE_", "DATABASE_URL=", "AWS_"), moto.Env()...)
	events := filepath.Join(t.TempDir(), "events.ndjson")
	lines := `{"settlement_id":"q-1","account_id":"a","amount_cents":100,"currency":"EUR","beneficiary":"b"}
{"settlement_id":"q-1","account_id":"a","amount_cents":100,"currency":"EUR","beneficiary":"b"}
this is not an event
`
	if err := os.WriteFile(events, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runBin(t, bin, env, "submit", "--source", "sqs:"+queue, events)
	if code != exitOK || !strings.Contains(out, "3 lines: 3 published to sqs:"+queue+", 0 invalid, 0 errors") {
		t.Fatalf("settle submit --source sqs exited %d:\n%s", code, out)
	}
	w := workertest.StartT(t, "worker", db.URL, moto.Env(), "--listen", "127.0.0.1:0", "--bank-url", "http://127.0.0.1:1",
		"--source", "sqs:"+queue, "--log-format", "json")
	dbEnv := append(env, "DATABASE_URL="+db.URL)
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
	if r := rejects.Rejects[0]; r.Source != "sqs" || len(r.TransportID) < 8 || r.Size != len("this is not an event") {
		t.Errorf("reject %+v, want source sqs, a MessageId as transport_id and the line's size", r)
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
		t.Errorf("the worker did not compare the queue's retention with --replay-horizon:\n%s", log)
	}
	if err := w.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestDemoThroughSQS runs `settle demo --source sqs`: moto_server (the
// stand-in for SQS) is started for the demo, named as a stand-in, and
// stopped after it; the events come through its queue with redeliveries
// caused the real way, and every invariant holds.
func TestDemoThroughSQS(t *testing.T) {
	t.Parallel()
	mototest.Require(t)
	bin := bintest.Build(t)
	env := embeddedHome(t, bin)
	out, code := runBin(t, bin, env, "demo", "--source", "sqs", "--events", "60", "--faults", "flaky")
	if code != exitOK {
		t.Fatalf("settle demo --source sqs exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		"a local stand-in for Amazon SQS started for the demo",
		"sent 48 first deliveries to the queue",
		"and went silent: no delete",
		"was killed (SIGKILL) before deleting it",
		"The events came through Amazon SQS (moto_server, a local stand-in, not SQS itself): 60 messages",
		"the queue ends with 0 messages waiting, 0 in flight",
		"conflicts 1",
		"needs investigation 0",
		"missing_in_ledger 0", "missing_at_bank 0", "duplicate_at_bank 0", "unresolved 0",
		"settle demo: OK, every invariant holds",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}
