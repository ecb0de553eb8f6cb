package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/reconcile"
)

// sendSamples is how many settlements the send job's cost is counted on.
const sendSamples = 200

// measureSendCost counts what the worker's send job costs the database per
// settlement: it takes sendSamples settlements in through the intake API,
// then runs reconcile.Resolver.Send on each, one at a time, in this
// process, against a fakebank at zero latency, with the worker's
// connector and return watch, on the benchmark's traced pool. The job's
// River completion (one statement in the outcome transaction, in the
// worker) is not part of it, and neither is River's fetch.
func measureSendCost(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, trips *tripCounter, r *Result) error {
	bank, err := fakebank.New(fakebank.Options{})
	if err != nil {
		return err
	}
	bankURL, err := bank.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer bank.Close()
	conn := settle.Connector
	client, err := conn.New(bankURL, bankclient.Options{})
	if err != nil {
		return err
	}
	sendPool, err := openMeasured(ctx, dbURL, "settle-bench-send", 4, trips)
	if err != nil {
		return err
	}
	defer sendPool.Close()
	caps := conn.Capabilities
	res := &reconcile.Resolver{DB: sendPool, Bank: client, Capabilities: &caps, ReturnWatch: conn.DefaultReturnWatch}

	a, err := startAPI(pool, 1)
	if err != nil {
		return err
	}
	n := min(sendSamples, cfg.E2ESettlements)
	evs := make([]intake.Event, n)
	for i := range evs {
		evs[i] = newEvent(fmt.Sprintf("send-%d", i), i)
	}
	err = postBatch(ctx, a.client, a.base, evs)
	a.close()
	if err != nil {
		return fmt.Errorf("error taking the send samples in: %w", err)
	}
	// The rows come from pg_stat_database: the benchmark's other
	// connections are ended first, so that none of their counts is
	// published late into this window.
	pool.Reset()
	if err := waitBackendsGone(ctx, sendPool, benchAppName); err != nil {
		return err
	}
	counted, err := readCounters(ctx, pool)
	if err != nil {
		return fmt.Errorf("error reading the database's counters: %w", err)
	}
	before := trips.snapshot()
	for _, ev := range evs {
		out, err := res.Send(ctx, ev.SettlementID, func(context.Context, pgx.Tx, reconcile.Outcome) error { return nil })
		if err != nil {
			return fmt.Errorf("error sending %s: %w", ev.SettlementID, err)
		}
		if out.State != "confirmed" {
			return fmt.Errorf("error sending %s: it is %s, want confirmed", ev.SettlementID, out.State)
		}
	}
	after := trips.snapshot()
	r.RoundTripsPerSend = float64(after.trips-before.trips) / float64(n)
	r.CommitsPerSend = float64(after.commits-before.commits) / float64(n)
	if err := closeMeasured(ctx, sendPool, pool, "settle-bench-send"); err != nil {
		return err
	}
	last, err := readCounters(ctx, pool)
	if err != nil {
		return fmt.Errorf("error reading the database's counters: %w", err)
	}
	r.RowsPerSend = float64(last.since(counted, 0).rows) / float64(n)
	cfg.Logf("send job: %.2f round trips, %.2f commits, %.2f rows written per settlement (River's fetch and completion not included)",
		r.RoundTripsPerSend, r.CommitsPerSend, r.RowsPerSend)
	return nil
}
