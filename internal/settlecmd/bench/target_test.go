package bench

import "testing"

// TestTargetNotMeasuredIsAMiss: a ratio that was not measured (0) misses
// its target whichever way the target points; a measured one is judged by
// its bound.
func TestTargetNotMeasuredIsAMiss(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ratio float64
		op    string
		pass  bool
	}{
		{0, "<=", false}, {0, ">=", false},
		{1.02, "<=", true}, {1.4, "<=", false},
		{1.4, ">=", true}, {1.02, ">=", false},
	} {
		if got := target("t", "f", c.ratio, c.op, 1.3); got.Pass != c.pass {
			t.Errorf("ratio %g %s 1.3: pass %v, want %v", c.ratio, c.op, got.Pass, c.pass)
		}
	}
}

// TestInTurn: two stages taking turns on one resource go at 1/(1/a+1/b);
// a stage not measured makes the bound unmeasured (0), so the target it
// divides misses.
func TestInTurn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ a, b, want float64 }{
		{10000, 10000, 5000}, {9000, 18000, 6000}, {0, 5000, 0}, {5000, 0, 0},
	} {
		if got := inTurn(c.a, c.b); got != c.want {
			t.Errorf("inTurn(%g, %g) = %g, want %g", c.a, c.b, got, c.want)
		}
	}
	r := Result{SourceNATSPerS: 4000, IntakeBatchPerS: 10000}
	r.computeTargets()
	for _, tg := range r.Targets {
		if tg.Name == "source_nats_reachable" && tg.Pass {
			t.Errorf("source_nats_reachable passed without a broker baseline: %+v", tg)
		}
	}
}
