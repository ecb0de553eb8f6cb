package sim

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestKeyTTLBoundaryResend is the smallest schedule of a double payment the
// simulation found (seeds 86, 481, 788, 1559 and 1803 of the first 2000),
// kept as a regression test. The engine used to re-send a pending
// settlement whose first attempt was younger than the key TTL, judging the
// age when it claimed the send; the POST reached the bank later (latency,
// the client's in-call retries). If the bank had executed the first POST
// but the answer died with the process, and the re-send was claimed less
// than one call's duration before the TTL ended, the bank had forgotten the
// key when the POST arrived and paid again.
//
//  1. s00 is delivered; Send POSTs it, the bank executes pay_1, the
//     process dies before recording the answer (crash point
//     send.after_bank): s00 stays pending with first_attempt_at = T.
//  2. The clock moves to T + KeyTTL - 1s (the job is retried late).
//  3. Send, 2s on the wire each way.
//
// Now a send of a settlement attempted before asks the bank's status first
// (reconcile.StartSend). Without a margin the status call itself arrives
// after the bank forgot the key: 404 past the TTL, so the engine never
// re-sends and flags it needs_investigation (rule 9) — safe, and the
// operator finds it in `settle reconcile`. With the engine's key TTL below
// the bank's by one bank call (the margin README recommends), the status
// call finds pay_1 and s00 is confirmed. Either way the bank paid once.
func TestKeyTTLBoundaryResend(t *testing.T) {
	for _, tc := range []struct {
		name   string
		margin time.Duration
	}{
		{"no margin (the documented setup)", 0},
		{"margin of one bank call", 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			r := newRun(db.Pool, Config{KeyTTLMargin: tc.margin}, rand.New(rand.NewPCG(1, 1)), EngineKeyTTL, CapabilitySets[0].Caps)
			r.genEvents(1)

			r.script(ctx, t, "deliver s00", func(a *actor, out *string) (func(context.Context), string) {
				return r.deliverFn(a, delivery{idx: 0}, out)
			}, nil)
			r.script(ctx, t, "send s00, crash after the bank executed", func(a *actor, out *string) (func(context.Context), string) {
				return r.resolverFn(a, 0, true, out)
			}, func(a *actor) { a.crashAfterBank = 0 })
			var first time.Time
			if err := db.Pool.QueryRow(ctx, "SELECT first_attempt_at FROM settlements WHERE settlement_id = 's00'").Scan(&first); err != nil {
				t.Fatal(err)
			}
			r.clock.Set(first.Add(r.engineTTL - time.Second))
			r.tracef("clock to first attempt + engine key TTL - 1s")
			r.setFaults("2s on the wire", Faults{MinLatency: 2 * time.Second, Latency: 2 * time.Second})
			r.script(ctx, t, "send s00 (retried late)", func(a *actor, out *string) (func(context.Context), string) {
				return r.resolverFn(a, 0, true, out)
			}, nil)
			res, err := r.finish(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Violations) > 0 {
				t.Errorf("exactly-once broken at the key TTL boundary:\n%s", res.Report())
			}
			want := "confirmed"
			if tc.margin == 0 {
				want = "flagged"
			}
			if got := map[bool]string{res.Stats.Confirmed == 1: "confirmed", res.Stats.Flagged == 1: "flagged"}[true]; got != want {
				t.Errorf("s00 ended %q, want %q:\n%s", got, want, strings.Join(res.Trace, "\n"))
			}
		})
	}
}

// script runs one fault-free actor (plan may add faults) and traces it.
func (r *run) script(ctx context.Context, t *testing.T, label string, mk func(*actor, *string) (func(context.Context), string), plan func(*actor)) {
	t.Helper()
	a := r.newActor(ctx, "A", false)
	if plan != nil {
		plan(a)
	}
	out := new(string)
	fn, _ := mk(a, out)
	r.delivered[0] = true
	r.sched.run([]*actor{a}, []func(context.Context){fn})
	if err := r.finishActors(0, []*actor{a}, []string{label + a.plan()}, []*string{out}); err != nil {
		t.Fatal(err)
	}
}
