package inspect

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/reporttest"
	"github.com/settle/settle/settlement"
)

func TestInspectSummaryEmptyHasEveryState(t *testing.T) {
	t.Parallel()
	b := reporttest.New(t)
	sum, err := (&Inspector{DB: b.DB.Pool}).Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.ByState) != len(settlement.States) {
		t.Fatalf("by_state = %v, want every state", sum.ByState)
	}
	for _, st := range settlement.States {
		if n, ok := sum.ByState[st]; !ok || n != 0 {
			t.Errorf("%s = %d, %v", st, n, ok)
		}
	}
	if sum.OldestUncertainAgeSeconds != 0 || sum.Findings() {
		t.Errorf("empty summary = %+v", sum)
	}
}

func TestInspectAgesFollowTheClock(t *testing.T) {
	t.Parallel()
	b := reporttest.New(t)
	b.Seed(t, "u-1", 100, settlement.Uncertain, false)
	b.Seed(t, "c-1", 100, settlement.Confirmed, true)
	later := time.Now().Add(time.Hour)
	in := &Inspector{DB: b.DB.Pool, Now: func() time.Time { return later }}
	ctx := context.Background()

	sum, err := in.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.OldestUncertainID != "u-1" || sum.OldestUncertainAgeSeconds < 3500 || sum.ByState[settlement.Uncertain] != 1 || sum.Movements != 1 {
		t.Errorf("summary = %+v", sum)
	}
	var ids []string
	collect := func(r SettlementRow) error { ids = append(ids, r.SettlementID); return nil }
	if n, err := in.List(ctx, ListOptions{State: settlement.Uncertain, OlderThan: 30 * time.Minute}, collect); err != nil || n != 1 || ids[0] != "u-1" {
		t.Errorf("older than 30m: %d %v %v", n, ids, err)
	}
	if n, err := in.List(ctx, ListOptions{State: settlement.Uncertain, OlderThan: 2 * time.Hour}, collect); err != nil || n != 0 {
		t.Errorf("older than 2h: %d %v", n, err)
	}
	if _, err := in.List(ctx, ListOptions{State: "lost"}, collect); err == nil {
		t.Error("listing an unknown state succeeded")
	}
}

func TestInspectShowTellsTheStoryInOrder(t *testing.T) {
	t.Parallel()
	b := reporttest.New(t)
	b.Seed(t, "c-1", 100, settlement.Confirmed, true)
	in := &Inspector{DB: b.DB.Pool}
	ctx := context.Background()
	st, err := in.Show(ctx, "c-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Movement == nil || len(st.Transitions) != 2 || st.Conflicts == nil {
		t.Fatalf("story = %+v", st)
	}
	for i := 1; i < len(st.Timeline); i++ {
		if st.Timeline[i].At.Before(st.Timeline[i-1].At) {
			t.Errorf("timeline out of order at %d: %+v", i, st.Timeline)
		}
	}
	if _, err := in.Show(ctx, "nope"); !errors.Is(err, settlement.ErrNotFound) {
		t.Errorf("show unknown: %v, want settlement.ErrNotFound", err)
	}
}
