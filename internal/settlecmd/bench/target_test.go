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
