package sim

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/dbtest"
)

// returnBundle is one scripted schedule of TestReturnSources: s00
// delivered, sent, confirmed, at a bank of one capability set.
type returnBundle struct {
	r  *run
	db *dbtest.DB
}

// setupReturn runs s00 to confirmed (or, with sentOnly, leaves it sent:
// the bank settles it a minute after the POST) at the bank called bank,
// with plant in the engine.
func setupReturn(ctx context.Context, t *testing.T, bank, plant string, sentOnly bool) returnBundle {
	t.Helper()
	db := dbtest.New(t)
	cfg := Config{Bank: bank, Plant: plant}
	_, caps, err := cfg.capabilities()
	if err != nil {
		t.Fatal(err)
	}
	r := newRun(db.Pool, cfg, rand.New(rand.NewPCG(1, 1)), EngineKeyTTL, caps)
	r.bank.cfg.SettleDelayMin, r.bank.cfg.SettleDelayMax = time.Minute, time.Minute
	// At a consent bank the customer authorises the consent at once.
	r.bank.cfg.ConsentDecideMax, r.bank.cfg.ConsentReject, r.bank.cfg.ConsentAbandon = 0, 0, 0
	if err := r.setupPlant(ctx); err != nil {
		t.Fatal(err)
	}
	r.genEvents(1)
	r.script(ctx, t, "deliver s00", func(a *actor, out *string) (func(context.Context), string) {
		return r.deliverFn(a, delivery{idx: 0}, out)
	}, nil)
	r.script(ctx, t, "send s00", func(a *actor, out *string) (func(context.Context), string) {
		return r.resolverFn(a, 0, true, out)
	}, nil)
	if caps.Authorisation {
		// The payment waits for its account holder's token: they open
		// the link and the redirect pays it.
		r.script(ctx, t, "the customer authorises", r.customerFn, nil)
	}
	r.clock.Advance(time.Minute)
	b := returnBundle{r: r, db: db}
	if sentOnly {
		b.wantState(ctx, t, "sent")
		return b
	}
	r.script(ctx, t, "resolve s00 (settled)", func(a *actor, out *string) (func(context.Context), string) {
		return r.resolverFn(a, 0, false, out)
	}, nil)
	b.wantState(ctx, t, "confirmed")
	return b
}

func (b returnBundle) wantState(ctx context.Context, t *testing.T, want string) {
	t.Helper()
	var state string
	if err := b.db.Pool.QueryRow(ctx, "SELECT state FROM settlements WHERE settlement_id = 's00'").Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != want {
		t.Fatalf("s00 is %s, want %s:\n%s", state, want, strings.Join(b.r.res.Trace, "\n"))
	}
}

// returnNow makes the bank return s00's payment now, amount of it (0: all).
func (b returnBundle) returnNow(t *testing.T, amount int64) {
	t.Helper()
	ps := b.r.bank.Payments()
	if len(ps) != 1 {
		t.Fatalf("the bank holds %d payments, want 1", len(ps))
	}
	if err := b.r.bank.ReturnNow(ps[0].ID, amount, "AC04"); err != nil {
		t.Fatal(err)
	}
}

// The sources of a return, as actors.
var returnSources = map[string]func(r *run, a *actor, out *string) (func(context.Context), string){
	"status": func(r *run, a *actor, out *string) (func(context.Context), string) {
		return r.resolverFn(a, 0, false, out)
	},
	"webhook": func(r *run, a *actor, out *string) (func(context.Context), string) {
		return r.webhookFn(a, 0, out)
	},
	"statement": func(r *run, a *actor, out *string) (func(context.Context), string) {
		return r.importFn(a, r.statementFile(r.bank.PaymentsBooked(), r.bank.ReturnsBooked()), out), "statement"
	},
}

// together runs every source of sources at once, each twice, interleaved
// by the scheduler.
func (b returnBundle) together(t *testing.T, sources ...string) {
	t.Helper()
	r := b.r
	var (
		as      []*actor
		fns     []func(context.Context)
		descs   []string
		results []*string
	)
	for _, src := range sources {
		for range 2 {
			a := r.newActor(context.Background(), string(rune('A'+len(as))), false)
			out := new(string)
			fn, desc := returnSources[src](r, a, out)
			as, fns, descs, results = append(as, a), append(fns, fn), append(descs, a.name+":"+desc), append(results, out)
		}
	}
	r.sched.run(as, fns)
	if err := r.finishActors(0, as, descs, results); err != nil {
		t.Fatal(err)
	}
}

// TestReturnSources: at every kind of bank, a confirmed settlement's
// payment comes back and is reported by one source (the status API of the
// return watch, a webhook hint, an imported statement) or by all of them
// at once, twice each, interleaved at every database statement; then the
// recovery imports the bank's end-of-day statement, one more report of
// the same return. As shipped, the engine books one reversal with the move
// to returned, whatever the source (at a bank that reports returns on
// statements only, the statement's). With a return bug planted — every
// reversal written twice with the UNIQUE dropped, or the reversal
// committed apart from its transition and the process dying before the
// transition commits — the checker names it.
func TestReturnSources(t *testing.T) {
	type tc struct{ bank, source, plant, want string }
	var cases []tc
	for _, cs := range CapabilitySets {
		for _, src := range []string{"status", "webhook", "statement", "all"} {
			cases = append(cases, tc{cs.Name, src, "", ""})
		}
		cases = append(cases,
			tc{cs.Name, "all", "second-reversal", "returned with 3 ledger movement(s) (payout+reversal×2)"},
			tc{cs.Name, "all", "reversal-outside-transition", "confirmed with 2 ledger movement(s) (payout+reversal), want payout"})
	}
	for _, c := range cases {
		t.Run(c.bank+"/"+c.source+"/"+c.plant, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupReturn(ctx, t, c.bank, c.plant, false)
			b.returnNow(t, 0)
			if c.source == "all" {
				b.together(t, "status", "webhook", "statement")
			} else {
				b.together(t, c.source)
			}
			res, err := b.r.finish(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if c.plant != "" {
				for _, v := range res.Violations {
					if strings.Contains(v, c.want) {
						return
					}
				}
				t.Fatalf("the checker missed the planted %s (want %q):\n%s", c.plant, c.want, res.Report())
			}
			if len(res.Violations) > 0 {
				t.Fatalf("exactly-once broken:\n%s", res.Report())
			}
			if res.Stats.Returned != 1 {
				t.Errorf("s00 did not end returned:\n%s", res.Report())
			}
			var reversals, toReturned int
			if err := b.db.Pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM ledger_movements WHERE kind = 'reversal'),
				(SELECT count(*) FROM settlement_transitions WHERE to_state = 'returned')`).Scan(&reversals, &toReturned); err != nil {
				t.Fatal(err)
			}
			if reversals != 1 || toReturned != 1 {
				t.Errorf("%d reversals and %d transitions to returned, want one of each:\n%s", reversals, toReturned, res.Report())
			}
		})
	}
}

// TestReturnBeforeConfirmationAndPartial: at every kind of bank, a return
// of a settlement the engine has not seen settle (still sent) ends it
// failed with no movement, or returned with its reversal at a bank whose
// API still says settled (the status check confirms it first, the
// statement then returns it); a partial return, before or after
// confirmation, is flagged, never booked; the checker passes each.
func TestReturnBeforeConfirmationAndPartial(t *testing.T) {
	for _, cs := range CapabilitySets {
		for _, tc := range []struct {
			name     string
			sentOnly bool
			amount   int64
			want     []string // the states s00 may end in
		}{
			{"in full while sent", true, 0, []string{"failed", "returned"}},
			{"in part while sent", true, 1, []string{"uncertain", "confirmed"}},
			{"in part after confirmation", false, 1, []string{"confirmed"}},
		} {
			t.Run(cs.Name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				b := setupReturn(ctx, t, cs.Name, "", tc.sentOnly)
				b.returnNow(t, tc.amount)
				b.together(t, "statement", "status", "webhook")
				res, err := b.r.finish(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Violations) > 0 {
					t.Fatalf("exactly-once broken:\n%s", res.Report())
				}
				var state string
				var flagged bool
				var reversals int
				if err := b.db.Pool.QueryRow(ctx, `SELECT state, needs_investigation,
					(SELECT count(*) FROM ledger_movements WHERE kind = 'reversal') FROM settlements`).Scan(&state, &flagged, &reversals); err != nil {
					t.Fatal(err)
				}
				ok := false
				for _, w := range tc.want {
					ok = ok || state == w
				}
				if !ok || (tc.amount != 0 && (!flagged || reversals != 0)) {
					t.Errorf("s00 ended %s (flagged %v, %d reversals), want one of %v (a partial return flagged, unbooked):\n%s",
						state, flagged, reversals, tc.want, res.Report())
				}
			})
		}
	}
}

// TestReturnPlantsInSchedules runs random return schedules with each
// return plant and expects the checker to catch it in some of them (a
// schedule without a booked return cannot show it).
func TestReturnPlantsInSchedules(t *testing.T) {
	for _, plant := range []string{"second-reversal", "reversal-outside-transition"} {
		t.Run(plant, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			for seed := uint64(1); seed <= 20; seed++ {
				if err := truncate(ctx, db.Pool); err != nil {
					t.Fatal(err)
				}
				res, err := Run(ctx, db.Pool, Config{Seed: seed, Settlements: 6, Returns: true, Plant: plant})
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range res.Violations {
					if strings.Contains(v, "reversal") {
						t.Logf("seed %d caught: %s", seed, v)
						return
					}
				}
			}
			t.Errorf("no schedule of seeds 1..20 caught the planted %s", plant)
		})
	}
}

// TestReturnCrashBeforeCommit: at every kind of bank, the process booking a
// return (from each source) dies after its transaction moved the
// settlement to returned and wrote the reversal, before the commit: the
// database keeps neither (the settlement stays confirmed with its payout
// alone), and the next report of the return books exactly one reversal.
func TestReturnCrashBeforeCommit(t *testing.T) {
	for _, cs := range CapabilitySets {
		for _, src := range []string{"status", "webhook", "statement"} {
			if cs.Caps.ReturnsOnStatementsOnly && src != "statement" {
				continue // that bank's status API never reports the return
			}
			t.Run(cs.Name+"/"+src, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				b := setupReturn(ctx, t, cs.Name, "", false)
				b.returnNow(t, 0)
				r := b.r
				r.script(ctx, t, src+", crashing before the commit", func(a *actor, out *string) (func(context.Context), string) {
					return returnSources[src](r, a, out)
				}, func(a *actor) { a.crashBeforeReturnCommit = true })
				b.wantState(ctx, t, "confirmed")
				var payouts, reversals, toReturned int
				if err := b.db.Pool.QueryRow(ctx, `SELECT
					(SELECT count(*) FROM ledger_movements WHERE kind = 'payout'),
					(SELECT count(*) FROM ledger_movements WHERE kind = 'reversal'),
					(SELECT count(*) FROM settlement_transitions WHERE to_state = 'returned')`).Scan(&payouts, &reversals, &toReturned); err != nil {
					t.Fatal(err)
				}
				if payouts != 1 || reversals != 0 || toReturned != 0 {
					t.Fatalf("after the crash: %d payouts, %d reversals, %d transitions to returned; want 1, 0, 0:\n%s",
						payouts, reversals, toReturned, strings.Join(r.res.Trace, "\n"))
				}
				if !strings.Contains(strings.Join(r.res.Trace, "\n"), "crashed before committing the move to returned") {
					t.Fatalf("the actor did not reach the commit:\n%s", strings.Join(r.res.Trace, "\n"))
				}
				r.script(ctx, t, src+" again", func(a *actor, out *string) (func(context.Context), string) {
					return returnSources[src](r, a, out)
				}, nil)
				b.wantState(ctx, t, "returned")
				res, err := r.finish(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Violations) > 0 {
					t.Fatalf("exactly-once broken:\n%s", res.Report())
				}
			})
		}
	}
}
