package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/settlement"
	"github.com/settle/settle/statemachine"
)

// reconcileBundle is a private database and an in-process bank for the
// reconcile forms, run in-process with the database URL passed explicitly.
type reconcileBundle struct {
	db      *dbtest.DB
	bank    *fakebank.Bank
	bankURL string
	client  *settle.Client
}

func setupReconcile(t *testing.T) *reconcileBundle {
	t.Helper()
	bank, url := fakebanktest.NewServer(t, fakebank.Options{Seed: 1})
	client, err := settle.New(url, bankclient.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &reconcileBundle{db: dbtest.New(t), bank: bank, bankURL: url, client: client}
}

// run runs `settle reconcile args…` and returns the exit code, stdout and
// stderr.
func (b *reconcileBundle) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &reconcileCmd{s: Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}, dbURL: b.db.URL, now: time.Now}
	code := c.run(context.Background(), args)
	return code, out.String(), errb.String()
}

// seed writes a settlement in state st, with its history and (movement) its
// ledger movement; paid creates its payment at the bank first.
func (b *reconcileBundle) seed(t *testing.T, id string, amount int64, st string, movement, paid bool) {
	t.Helper()
	ctx := context.Background()
	if paid {
		if _, err := b.client.Send(ctx, bankclient.KeyFor(id), bankclient.PaymentRequest{
			AmountCents: amount, Currency: "EUR", DebtorAccount: "acc-1", CreditorAccount: "bene-1", Reference: id,
		}); err != nil {
			t.Fatalf("pay %s: %v", id, err)
		}
	}
	err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settlement_receipts (settlement_id, payload_hash, first_event_id, replay_count, last_replay_at)
			VALUES ($1, 'sha256:'||repeat('a', 64), 'ev-'||$1, 2, now())`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, first_attempt_at)
			VALUES ($1, 'acc-1', 'bene-1', $2, 'EUR', 'pending', $4, 'sha256:'||repeat('a', 64), CASE WHEN $3 <> 'pending' THEN now() END)`,
			id, amount, st, bankclient.KeyFor(id)); err != nil {
			return err
		}
		// Its history, events and ledger, by the state machine.
		if err := statemachine.Created(ctx, tx, "received", time.Time{}, id); err != nil {
			return err
		}
		if st != string(settlement.Pending) {
			if err := statemachine.Transition(ctx, tx, statemachine.Change{Source: settlement.SourceWorker, SettlementID: id, From: settlement.Pending, To: settlement.State(st), Reason: "test"}); err != nil {
				return err
			}
		}
		if movement {
			_, err := tx.Exec(ctx, `INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency) VALUES ($1, 'acc-1', $2, 'EUR')`, id, amount)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed %s: %v", id, err)
	}
}

func decodeObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, s)
	}
	return m
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func requireKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing; have %v", k, keysOf(m))
		}
	}
}

func TestReconcileSummaryJSON(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	b.seed(t, "c-1", 100, "confirmed", true, true)
	b.seed(t, "u-1", 100, "uncertain", false, false)

	code, out, errOut := b.run(t, "--json")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	m := decodeObject(t, out)
	requireKeys(t, m, "by_state", "receipts", "replays", "conflicts", "movements", "oldest_uncertain_age_seconds", "needs_investigation")
	bs, _ := m["by_state"].(map[string]any)
	for _, st := range []string{"pending", "sent", "uncertain", "confirmed", "failed"} {
		if _, ok := bs[st].(float64); !ok {
			t.Errorf("by_state.%s = %v, want a number", st, bs[st])
		}
	}
	if bs["confirmed"] != 1.0 || bs["uncertain"] != 1.0 || bs["failed"] != 0.0 || m["replays"] != 4.0 || m["movements"] != 1.0 {
		t.Errorf("summary = %s", out)
	}
	if _, ok := m["oldest_uncertain_age_seconds"].(float64); !ok {
		t.Errorf("oldest_uncertain_age_seconds = %v", m["oldest_uncertain_age_seconds"])
	}
	if l, _ := m["ledger"].(map[string]any); l["balanced"] != true || l["mismatches"] == nil || len(l["mismatches"].([]any)) != 0 {
		t.Errorf("ledger = %v, want balanced with no mismatches", m["ledger"])
	}

	// A settlement the engine will not resolve alone makes the summary a finding.
	if _, err := b.db.Pool.Exec(context.Background(), `UPDATE settlements SET needs_investigation = true,
		investigation_reason = 'bank_forgot_key' WHERE settlement_id = 'u-1'`); err != nil {
		t.Fatal(err)
	}
	code, out, _ = b.run(t)
	if code != exitFindings || !strings.Contains(out, "needs investigation") {
		t.Fatalf("exit %d, out:\n%s", code, out)
	}

	// A posting behind the state machine's back is a ledger mismatch.
	if _, err := b.db.Pool.Exec(context.Background(), `UPDATE settlements SET needs_investigation = false, investigation_reason = NULL;
		INSERT INTO ledger_postings (settlement_id, kind, debit_account, credit_account, amount_minor, currency)
		VALUES ('u-1', 'payout', 'acc-1', 'settle:clearing:settle', 100, 'EUR')`); err != nil {
		t.Fatal(err)
	}
	code, out, _ = b.run(t, "--json")
	m = decodeObject(t, out)
	if l, _ := m["ledger"].(map[string]any); code != exitFindings || l["balanced"] != false || len(l["mismatches"].([]any)) != 3 {
		t.Fatalf("exit %d, ledger %v", code, m["ledger"])
	}
}

func TestReconcileBankJSON(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	for _, id := range []string{"c-1", "c-2", "c-3"} {
		b.seed(t, id, 100, "confirmed", true, true)
	}
	b.seed(t, "p-1", 100, "pending", false, false)

	lists := []string{"missing_in_ledger", "missing_at_bank", "amount_mismatch", "status_mismatch", "duplicate_at_bank", "unresolved"}
	code, out, errOut := b.run(t, "bank", "--json", "--bank-url", b.bankURL)
	if code != exitOK {
		t.Fatalf("clean: exit %d, stderr %s", code, errOut)
	}
	m := decodeObject(t, out)
	requireKeys(t, m, append([]string{"matched"}, lists...)...)
	if m["matched"] != 3.0 {
		t.Errorf("matched = %v, want 3 (the confirmed count)", m["matched"])
	}
	for _, k := range lists {
		l, ok := m[k].([]any)
		if !ok {
			t.Fatalf("%s = %v, want a list", k, m[k])
		}
		if want := map[bool]int{true: 1, false: 0}[k == "unresolved"]; len(l) != want {
			t.Errorf("%s has %d entries, want %d", k, len(l), want)
		}
	}

	// We say failed, the bank settled.
	b.seed(t, "f-1", 500, "failed", false, true)
	code, out, _ = b.run(t, "bank", "--json", "--bank-url", b.bankURL)
	if code != exitFindings {
		t.Fatalf("with a status mismatch: exit %d, want 1\n%s", code, out)
	}
	m = decodeObject(t, out)
	sm := m["status_mismatch"].([]any)
	if len(sm) != 1 || sm[0].(map[string]any)["settlement_id"] != "f-1" {
		t.Fatalf("status_mismatch = %v", sm)
	}
	requireKeys(t, sm[0].(map[string]any), "settlement_id", "state", "amount_cents", "bank_payments", "reason")

	code, out, _ = b.run(t, "bank", "--bank-url", b.bankURL)
	if code != exitFindings || !strings.Contains(out, "status_mismatch (1)") || !strings.Contains(out, "f-1") {
		t.Fatalf("table: exit %d\n%s", code, out)
	}
}

func TestReconcileCouldNotRun(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	code, _, errOut := b.run(t, "bank", "--bank-url", "http://127.0.0.1:1", "--bank-timeout", "500ms")
	if code != exitError || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "bank unreachable") {
		t.Errorf("bank down: exit %d, stderr %q", code, errOut)
	}

	down := &reconcileCmd{s: Stdio{Out: &bytes.Buffer{}, Err: &bytes.Buffer{}}, dbURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", now: time.Now}
	code = down.run(context.Background(), []string{"--json"})
	errOut = down.s.Err.(*bytes.Buffer).String()
	if code != exitError || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "database unreachable") {
		t.Errorf("database down: exit %d, stderr %q", code, errOut)
	}

	for _, args := range [][]string{{"nonsense"}, {"list"}, {"list", "--state", "lost"}, {"show"}, {"resolve"}} {
		if code, _, _ := b.run(t, args...); code != exitError {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestReconcileHelp(t *testing.T) {
	t.Parallel()
	b := &reconcileBundle{db: &dbtest.DB{}}
	for _, form := range []string{"", "list", "show", "conflicts", "resolve", "bank"} {
		args := []string{"--help"}
		if form != "" {
			args = []string{form, "--help"}
		}
		code, out, _ := b.run(t, args...)
		if code != exitOK || !strings.Contains(out, "Usage: settle reconcile") || !strings.Contains(out, "-json") {
			t.Errorf("%s --help: exit %d\n%s", form, code, out)
		}
	}
}

func TestReconcileListShowConflicts(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	b.seed(t, "u-1", 100, "uncertain", false, false)
	b.seed(t, "u-2", 100, "uncertain", false, false)
	b.seed(t, "c-1", 250, "confirmed", true, true)
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `UPDATE settlements SET needs_investigation = true, investigation_reason = 'bank_forgot_key' WHERE settlement_id = 'u-2'`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO receipt_conflicts (settlement_id, stored_hash, incoming_hash, event_id, incoming)
		VALUES ('c-1', 'sha256:'||repeat('a', 64), 'sha256:'||repeat('b', 64), 'ev-x',
		        '{"settlement_id":"c-1","account_id":"acc-1","amount_cents":99999999999,"currency":"EUR","beneficiary":"bene-1"}')`); err != nil {
		t.Fatal(err)
	}

	code, out, _ := b.run(t, "list", "--state", "uncertain", "--json")
	if code != exitOK {
		t.Fatalf("list: exit %d", code)
	}
	m := decodeObject(t, out)
	ss := m["settlements"].([]any)
	if m["count"] != 2.0 || len(ss) != 2 {
		t.Fatalf("list = %s", out)
	}
	flagged := map[string]any{}
	for _, s := range ss {
		r := s.(map[string]any)
		flagged[r["settlement_id"].(string)] = r["investigation_reason"]
	}
	if flagged["u-2"] != "bank_forgot_key" || flagged["u-1"] != nil {
		t.Errorf("investigation reasons = %v", flagged)
	}
	// Nothing has been uncertain for a day.
	if code, out, _ := b.run(t, "list", "--state", "uncertain", "--older-than", "24h", "--json"); code != exitOK || decodeObject(t, out)["count"] != 0.0 {
		t.Errorf("--older-than 24h: exit %d\n%s", code, out)
	}
	code, out, _ = b.run(t, "list", "--state", "uncertain")
	if code != exitOK || !strings.Contains(out, "SETTLEMENT") || !strings.Contains(out, "bank_forgot_key") || !strings.Contains(out, "2 uncertain settlement(s)") {
		t.Errorf("list table: exit %d\n%s", code, out)
	}

	code, out, _ = b.run(t, "show", "c-1", "--json")
	if code != exitOK {
		t.Fatalf("show: exit %d", code)
	}
	m = decodeObject(t, out)
	requireKeys(t, m, "settlement", "receipt", "transitions", "bank_attempts", "movement", "conflicts", "timeline", "last_replay_age_seconds")
	kinds := map[string]bool{}
	for _, e := range m["timeline"].([]any) {
		kinds[e.(map[string]any)["kind"].(string)] = true
	}
	for _, k := range []string{"receipt", "replay", "transition", "movement", "conflict"} {
		if !kinds[k] {
			t.Errorf("timeline lacks %s: %v", k, kinds)
		}
	}
	code, out, _ = b.run(t, "show", "u-2")
	if code != exitOK || !strings.Contains(out, "NEEDS INVESTIGATION: bank_forgot_key") || !strings.Contains(out, "pending → uncertain") {
		t.Errorf("show table: exit %d\n%s", code, out)
	}
	if code, _, errOut := b.run(t, "show", "nope"); code != exitFindings || !strings.Contains(errOut, "no settlement") {
		t.Errorf("show unknown: exit %d, stderr %q", code, errOut)
	}

	code, out, _ = b.run(t, "conflicts", "--json")
	m = decodeObject(t, out)
	cs := m["conflicts"].([]any)
	if code != exitOK || len(cs) != 1 {
		t.Fatalf("conflicts: exit %d\n%s", code, out)
	}
	d := cs[0].(map[string]any)["differences"].([]any)
	if len(d) != 1 || d[0].(map[string]any)["incoming"] != "99999999999" {
		t.Errorf("differences = %v", d)
	}
	if code, out, _ := b.run(t, "conflicts"); code != exitOK || !strings.Contains(out, "amount_cents 250 → 99999999999") {
		t.Errorf("conflicts table: exit %d\n%s", code, out)
	}
}

func TestReconcileResolve(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	b.seed(t, "s-1", 300, "sent", false, true)      // the bank settled it
	b.seed(t, "s-2", 300, "uncertain", false, true) // the bank settled it
	b.seed(t, "c-1", 300, "confirmed", true, true)

	code, out, errOut := b.run(t, "resolve", "s-1", "--bank-url", b.bankURL, "--json")
	if code != exitOK {
		t.Fatalf("resolve: exit %d, stderr %s\n%s", code, errOut, out)
	}
	rs := decodeObject(t, out)["resolved"].([]any)
	if r := rs[0].(map[string]any); r["from"] != "sent" || r["to"] != "confirmed" || r["action"] != "check" {
		t.Errorf("resolved = %v", r)
	}
	code, out, _ = b.run(t, "resolve", "--all", "--bank-url", b.bankURL)
	if code != exitOK || !strings.Contains(out, "s-2") || strings.Contains(out, "c-1") {
		t.Errorf("resolve --all: exit %d\n%s", code, out)
	}
	var movements int
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM ledger_movements").Scan(&movements); err != nil || movements != 3 {
		t.Errorf("movements = %d (%v), want 3", movements, err)
	}
	if code, _, _ := b.run(t, "resolve", "nope", "--bank-url", b.bankURL); code != exitFindings {
		t.Errorf("resolve unknown: exit %d, want 1", code)
	}
	// Now the ledger and the bank agree.
	if code, out, _ := b.run(t, "bank", "--bank-url", b.bankURL); code != exitOK || !strings.Contains(out, "no discrepancies: matched 3") {
		t.Errorf("bank after resolve: exit %d\n%s", code, out)
	}
}

// TestReconcileBinary runs the real binary with its own environment:
// DATABASE_URL and SETTLE_BANK_URL select the database and the bank.
func TestReconcileBinary(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	bin := bintest.Build(t)
	b.seed(t, "c-1", 100, "confirmed", true, true)
	b.seed(t, "c-2", 100, "confirmed", true, false) // never paid at the bank

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "reconcile", "bank", "--json")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+b.db.URL, "SETTLE_BANK_URL="+b.bankURL)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFindings {
		t.Fatalf("exit: %v, stderr %s", err, errb.String())
	}
	m := decodeObject(t, out.String())
	if l := m["missing_at_bank"].([]any); len(l) != 1 || l[0].(map[string]any)["settlement_id"] != "c-2" || m["matched"] != 1.0 {
		t.Errorf("report = %s", out.String())
	}
}
