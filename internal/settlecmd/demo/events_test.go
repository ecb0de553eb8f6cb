package demo

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/settle/settle/intake"
)

func TestGenerate(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 60, 200, 1000} {
		st := Generate(n, 7, time.Unix(1_700_000_000, 0))
		if st.Total() != n {
			t.Errorf("n=%d: %d events", n, st.Total())
		}
		if st.Conflicts < 1 || st.Redeliveries < 0 || len(st.First)+st.Redeliveries+st.Conflicts != n {
			t.Errorf("n=%d: %d first, %d redeliveries, %d conflicts", n, len(st.First), st.Redeliveries, st.Conflicts)
		}
		// Every redelivery repeats a first delivery's business fields; every
		// conflict changes the amount of a known settlement.
		conflicts, redeliveries := 0, 0
		for _, line := range st.Again {
			var e intake.Event
			if err := json.Unmarshal(line, &e); err != nil {
				t.Fatalf("n=%d: %v: %s", n, err, line)
			}
			want, ok := st.Amounts[e.SettlementID]
			switch {
			case !ok:
				t.Errorf("n=%d: unknown settlement %s", n, e.SettlementID)
			case e.AmountCents == want:
				redeliveries++
			default:
				conflicts++
			}
		}
		if conflicts != st.Conflicts || redeliveries != st.Redeliveries {
			t.Errorf("n=%d: %d conflicts, %d redeliveries in Again; want %d, %d", n, conflicts, redeliveries, st.Conflicts, st.Redeliveries)
		}
	}
	a, b := Generate(50, 1, time.Unix(0, 0)), Generate(50, 1, time.Unix(0, 0))
	if string(NDJSON(a.Again)) != string(NDJSON(b.Again)) {
		t.Error("the same seed gave another stream")
	}
}
