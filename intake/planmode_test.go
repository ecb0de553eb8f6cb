package intake_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/jobs"
)

// TestCreationEventsLeaveThePlanModeAlone: intake forces the generic plan
// for the creation events of a few settlements, for that statement alone;
// the connection keeps its own plan_cache_mode (here the connection
// string's) for everything after, whether the events took the generic
// plan (one event, a group) or not (a batch of many), and every creation
// event is written.
func TestCreationEventsLeaveThePlanModeAlone(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // one connection: the one each transaction ran on
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.NewService(intake.Config{DB: pool, Jobs: jobs.Inserter{Client: client}})
	if err != nil {
		t.Fatal(err)
	}
	mode := func() string {
		t.Helper()
		var m string
		if err := pool.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if _, err := svc.Submit(ctx, event("one", "acc-1", 100)); err != nil {
		t.Fatal(err)
	}
	if m := mode(); m != "force_custom_plan" {
		t.Fatalf("after one event plan_cache_mode is %s, want the connection's force_custom_plan", m)
	}
	for _, n := range []int{3, 40} {
		evs := make([]intake.Event, n)
		for i := range evs {
			evs[i] = event(fmt.Sprintf("batch-%d-%d", n, i), "acc-1", 100)
		}
		// inTx runs in the intake transaction after the creation events,
		// where a SET LOCAL would still hold.
		var inside string
		if _, err := svc.SubmitBatchTx(ctx, evs, func(ctx context.Context, tx pgx.Tx, _ []error) error {
			return tx.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&inside)
		}); err != nil {
			t.Fatal(err)
		}
		if inside != "force_custom_plan" {
			t.Fatalf("in the transaction of a batch of %d, after its creation events, plan_cache_mode is %s, want the connection's force_custom_plan", n, inside)
		}
		if m := mode(); m != "force_custom_plan" {
			t.Fatalf("after a batch of %d plan_cache_mode is %s, want the connection's force_custom_plan", n, m)
		}
	}
	var settlements, events int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM settlements),
		(SELECT count(*) FROM settlement_events WHERE type = 'settlement.pending' AND n = 1)`).Scan(&settlements, &events); err != nil {
		t.Fatal(err)
	}
	if settlements != 44 || events != 44 {
		t.Fatalf("%d settlements and %d creation events, want 44 of each", settlements, events)
	}
}
