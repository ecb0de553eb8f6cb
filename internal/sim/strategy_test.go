package sim

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestLostAnswerStrategies runs one schedule against every kind of bank
// that cannot be asked by our key, with the engine as shipped and with a
// bug planted in the strategy it uses there, and expects the checker to
// pass the first and catch the second:
//
//  1. s00 is delivered; Send POSTs it, the bank executes pay_1, the
//     process dies before recording the answer: no payment id is known.
//  2. The clock moves to the end of the key window, plus a little: the
//     bank (key TTL equal to the engine's) has forgotten the key.
//  3. Resolve, 2 s on the wire each way.
//
// As shipped, the engine never replays a request that could arrive after
// the window: it searches the bank's list (found: confirmed) or, without
// one, flags the settlement for a human. With replays decided as if
// requests arrived before they left ("replay-after-window"), the replay
// reaches a bank that forgot the key and is paid twice.
func TestLostAnswerStrategies(t *testing.T) {
	for _, tc := range []struct {
		bank, plant string
		ends        string // confirmed, flagged, or caught (a double payment found)
	}{
		{"by-id/original-replay/list", "", "confirmed"},
		{"by-id/current-replay", "", "flagged"},
		{"list-only", "", "confirmed"},
		{"by-id/original-replay/list", "replay-after-window", "caught"},
		{"by-id/current-replay", "replay-after-window", "caught"},
		{"list-only", "replay-after-window", "caught"},
		{"by-key", "resend-after-window", "caught"},
	} {
		t.Run(tc.bank+"/"+tc.plant, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			cfg := Config{Bank: tc.bank, Plant: tc.plant}
			_, caps, err := cfg.capabilities()
			if err != nil {
				t.Fatal(err)
			}
			r := newRun(db.Pool, cfg, rand.New(rand.NewPCG(1, 1)), EngineKeyTTL, caps)
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
			r.clock.Set(first.Add(EngineKeyTTL + 30*time.Second))
			r.setFaults("2s on the wire", Faults{MinLatency: 2 * time.Second, Latency: 2 * time.Second})
			// "resend-after-window" needs a 404 by key to resend after: the
			// crash leaves the settlement pending, and the engine asks first.
			r.script(ctx, t, "resolve s00 after the window", func(a *actor, out *string) (func(context.Context), string) {
				return r.resolverFn(a, 0, false, out)
			}, nil)
			res, err := r.finish(ctx)
			if err != nil {
				t.Fatal(err)
			}
			caught := false
			for _, v := range res.Violations {
				caught = caught || strings.Contains(v, "PAID 2 TIMES") || strings.Contains(v, "POST past the key TTL")
			}
			got := map[bool]string{res.Stats.Confirmed == 1: "confirmed", res.Stats.Flagged == 1: "flagged", caught: "caught"}[true]
			if tc.ends != "caught" && len(res.Violations) > 0 {
				t.Fatalf("exactly-once broken:\n%s", res.Report())
			}
			if got != tc.ends {
				t.Errorf("ended %q, want %q:\n%s", got, tc.ends, res.Report())
			}
		})
	}
}
