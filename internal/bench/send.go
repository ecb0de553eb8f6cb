package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/bankclient"
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
	conn := bankclient.SettleConnector
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
	defer a.close()
	n := min(sendSamples, cfg.E2ESettlements)
	evs := make([]intake.Event, n)
	for i := range evs {
		evs[i] = newEvent(fmt.Sprintf("send-%d", i), i)
	}
	if err := postBatch(ctx, a.client, a.base, evs); err != nil {
		return fmt.Errorf("error taking the send samples in: %w", err)
	}
	before, err := readCounters(ctx, pool)
	if err != nil {
		return fmt.Errorf("error reading the database's counters: %w", err)
	}
	trips0 := trips.load()
	for _, ev := range evs {
		out, err := res.Send(ctx, ev.SettlementID, func(context.Context, pgx.Tx, reconcile.Outcome) error { return nil })
		if err != nil {
			return fmt.Errorf("error sending %s: %w", ev.SettlementID, err)
		}
		if out.State != "confirmed" {
			return fmt.Errorf("error sending %s: it is %s, want confirmed", ev.SettlementID, out.State)
		}
	}
	r.RoundTripsPerSend = float64(trips.load()-trips0) / float64(n)
	if err := closeMeasured(ctx, sendPool, pool, "settle-bench-send"); err != nil {
		return err
	}
	after, err := readCounters(ctx, pool)
	if err != nil {
		return fmt.Errorf("error reading the database's counters: %w", err)
	}
	d := after.since(before, 0)
	r.CommitsPerSend, r.RowsPerSend = float64(d.commits)/float64(n), float64(d.rows)/float64(n)
	cfg.Logf("send job: %.2f round trips, %.2f commits, %.2f rows written per settlement (River's fetch and completion not included)",
		r.RoundTripsPerSend, r.CommitsPerSend, r.RowsPerSend)
	return nil
}
