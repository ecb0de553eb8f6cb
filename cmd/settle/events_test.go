package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

func runEvents(t *testing.T, db *dbtest.DB, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &eventsCmd{s: Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}, dbURL: db.URL}
	return c.run(context.Background(), args), out.String(), errb.String()
}

// TestEventsListRedeliver: `settle events list --json` prints the shape of
// DESIGN.md section 19, filtered; `settle events redeliver` queues events
// again and records the operator action.
func TestEventsListRedeliver(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ('e1', 'acc', 'ben', 100, 'EUR', 'pending', 'k-e1', 'sha256:00')`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO event_sinks (sink) VALUES ('https://hooks.example/a')`); err != nil {
			return err
		}
		return statemachine.Created(ctx, tx, "received", time.Time{}, "e1")
	}); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: "e1", From: settlement.Pending, To: settlement.Sent, Reason: "accepted"})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE event_deliveries SET state = 'dead', attempts = 3, last_status = 500 WHERE n = 2`); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runEvents(t, db, "list", "--json")
	if code != exitOK {
		t.Fatalf("list exit %d: %s", code, errs)
	}
	var got struct {
		Events []map[string]any `json:"events"`
		Count  int              `json:"count"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Count != 2 || len(got.Events) != 2 {
		t.Fatalf("list --json = %s (%v)", out, err)
	}
	e := got.Events[1]
	for _, k := range []string{"event_id", "settlement_id", "type", "created_at", "deliveries"} {
		if _, ok := e[k]; !ok {
			t.Errorf("event lacks %s: %v", k, e)
		}
	}
	d := e["deliveries"].([]any)[0].(map[string]any)
	if e["event_id"] != "e1:2" || e["type"] != "settlement.sent" || d["sink"] != "https://hooks.example/a" || d["state"] != "dead" ||
		d["attempts"] != 3.0 || d["last_status"] != 500.0 {
		t.Errorf("event = %v", e)
	}
	if code, out, _ := runEvents(t, db, "list", "--dead", "--json"); code != exitOK || !strings.Contains(out, `"count":1`) {
		t.Errorf("list --dead: %d %s", code, out)
	}
	if code, out, _ := runEvents(t, db, "list", "--settlement", "e1"); code != exitOK || !strings.Contains(out, "e1:2") || !strings.Contains(out, "2 event(s)") {
		t.Errorf("list --settlement: %d %s", code, out)
	}

	if code, out, errs := runEvents(t, db, "redeliver", "--dead", "--operator", "ana"); code != exitOK || !strings.Contains(out, "1 deliveries of 1 settlement(s)") {
		t.Fatalf("redeliver --dead: %d %s %s", code, out, errs)
	}
	var state, operator, action string
	if err := db.Pool.QueryRow(ctx, `SELECT d.state, a.operator, a.action FROM event_deliveries d, operator_actions a WHERE d.n = 2`).Scan(&state, &operator, &action); err != nil ||
		state != "pending" || operator != "ana" || action != "redeliver" {
		t.Errorf("after redeliver: %s %s %s %v", state, operator, action, err)
	}
	if code, _, _ := runEvents(t, db, "redeliver", "nope:1"); code != exitFindings {
		t.Errorf("redeliver of an unknown event: exit %d, want %d", code, exitFindings)
	}
	if code, _, _ := runEvents(t, db, "redeliver"); code != exitError {
		t.Errorf("redeliver of nothing: exit %d, want %d", code, exitError)
	}
}

// TestEventsSinksForgetSink: `settle events sinks` tells a sink no worker
// registers any more, with its pending deliveries; `settle events
// forget-sink` refuses one a worker registered recently, drops the
// undelivered deliveries of the other and records the operator action.
func TestEventsSinksForgetSink(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	const live, gone = "https://hooks.example/live", "https://hooks.example/gone"
	if _, err := db.Pool.Exec(ctx, `INSERT INTO event_sinks (sink, seen_at) VALUES ($1, now()), ($2, now() - interval '1 day')`, live, gone); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
			VALUES ('s1', 'acc', 'ben', 100, 'EUR', 'pending', 'k-s1', 'sha256:00')`); err != nil {
			return err
		}
		return statemachine.Created(ctx, tx, "received", time.Time{}, "s1")
	}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runEvents(t, db, "sinks", "--json")
	if code != exitOK {
		t.Fatalf("sinks exit %d: %s", code, errs)
	}
	var got struct {
		Sinks []map[string]any `json:"sinks"`
		Count int              `json:"count"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Count != 2 {
		t.Fatalf("sinks --json = %s (%v)", out, err)
	}
	for _, k := range got.Sinks {
		if k["relayed"] != (k["sink"] == live) || k["pending"] != 1.0 {
			t.Errorf("sink %v", k)
		}
	}
	if code, out, _ := runEvents(t, db, "sinks"); code != exitOK || !strings.Contains(out, "no (by no worker since") || !strings.Contains(out, "2 sink(s)") {
		t.Errorf("sinks: %d %s", code, out)
	}

	if code, _, errs := runEvents(t, db, "forget-sink", live); code != exitError || !strings.Contains(errs, "recently") {
		t.Errorf("forget-sink of a live sink: %d %s", code, errs)
	}
	if code, _, _ := runEvents(t, db, "forget-sink", "https://hooks.example/never"); code != exitFindings {
		t.Errorf("forget-sink of an unknown sink: exit %d, want %d", code, exitFindings)
	}
	if code, out, errs := runEvents(t, db, "forget-sink", gone, "--operator", "ana"); code != exitOK || !strings.Contains(out, "1 undelivered deliveries of 1 settlement(s) dropped") {
		t.Fatalf("forget-sink: %d %s %s", code, out, errs)
	}
	var operator, action, detail string
	if err := db.Pool.QueryRow(ctx, `SELECT operator, action, detail FROM operator_actions WHERE settlement_id = 's1'`).Scan(&operator, &action, &detail); err != nil ||
		operator != "ana" || action != "forget_sink" || detail != "forget sink "+gone {
		t.Errorf("recorded action: %s %s %q %v", operator, action, detail, err)
	}
	if code, out, _ := runEvents(t, db, "sinks"); code != exitOK || !strings.Contains(out, "forgotten by ana") {
		t.Errorf("sinks after forget-sink: %d %s", code, out)
	}
	if code, out, _ := runEvents(t, db, "list", "--undelivered"); code != exitOK || strings.Contains(out, gone) {
		t.Errorf("list --undelivered after forget-sink: %d %s", code, out)
	}
}

// TestWorkerEventsPublishFlag: --events-publish takes nats and
// kafka://HOST:PORT/TOPIC, and refuses a bad Kafka SPEC and anything else
// before any work.
func TestWorkerEventsPublishFlag(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string]string{"kafka://broker/settle": "not HOST:PORT", "kafka://broker:9092/settle?group=g": "no parameters", "sqs": "unknown broker"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"worker", "--events-publish", spec}, Stdio{Out: &out, Err: &errOut}); code != exitError || !strings.Contains(errOut.String(), want) {
			t.Errorf("--events-publish %s: exit %d, %s; want %d naming %q", spec, code, errOut.String(), exitError, want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"worker", "--help"}, Stdio{Out: &out, Err: &errOut}); code != exitOK ||
		!strings.Contains(out.String()+errOut.String(), "--events-publish") || !strings.Contains(out.String()+errOut.String(), "--events-nats-url") {
		t.Errorf("worker --help: %d\n%s%s", code, out.String(), errOut.String())
	}
}
