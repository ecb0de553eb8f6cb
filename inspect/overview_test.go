package inspect

import (
	"context"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/reporttest"
	"github.com/settle/settle/settlement"
)

func TestOverviewCountsOldestAndBank(t *testing.T) {
	t.Parallel()
	f := newPageFixture(t, 70)
	ctx := context.Background()
	now := f.base.Add(time.Hour)
	// Bank calls: three in the window (one ambiguous, one unanswered), one
	// long before it.
	if _, err := f.db.Pool.Exec(ctx, `
		INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at, finished_at, outcome, http_status, detail) VALUES
		('p-0001', 'send', 'key-1', $1::timestamptz - interval '1 minute', $1::timestamptz - interval '59 seconds', 'payment', 201, NULL),
		('p-0002', 'send', 'key-2', $1::timestamptz - interval '50 seconds', $1::timestamptz - interval '40 seconds', 'ambiguous', 503, 'bank answered 503'),
		('p-0003', 'status', 'key-3', $1::timestamptz - interval '10 seconds', NULL, NULL, NULL, NULL),
		('p-0004', 'send', 'key-4', $1::timestamptz - interval '1 hour', $1::timestamptz - interval '1 hour', 'ambiguous', 500, 'old')`, now); err != nil {
		t.Fatal(err)
	}
	ov, err := (&Inspector{DB: f.db.Pool, Now: func() time.Time { return now }}).Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ov.States) != len(settlement.States) {
		t.Fatalf("states = %+v", ov.States)
	}
	want := map[settlement.State]int64{}
	for i := range f.n {
		_, st, _, _, _, _ := f.row(i)
		want[st]++
	}
	for k, sc := range ov.States {
		if sc.State != settlement.States[k] || sc.N != want[sc.State] || !sc.Exact {
			t.Errorf("state %d = %+v, want %s %d exact", k, sc, settlement.States[k], want[sc.State])
		}
		switch {
		case sc.State.Terminal() && sc.Oldest != nil:
			t.Errorf("%s has an oldest open: %+v", sc.State, sc.Oldest)
		case !sc.State.Terminal():
			// The first of each open state in the cycle: i = 0, 1, 2.
			i := map[settlement.State]int{settlement.Pending: 0, settlement.Sent: 1, settlement.Uncertain: 2}[sc.State]
			id, _, _, _, created, since := f.row(i)
			if o := sc.Oldest; o == nil || o.SettlementID != id || !o.CreatedAt.Equal(created) || !o.Since.Equal(since) ||
				o.AgeSeconds != now.Sub(created).Seconds() || o.InStateSeconds != now.Sub(since).Seconds() {
				t.Errorf("oldest %s = %+v, want %s", sc.State, sc.Oldest, id)
			}
		}
	}
	if ov.NeedsInvestigation != (Count{N: 7, Exact: true}) || ov.Conflicts != (Count{N: 0, Exact: true}) {
		t.Errorf("needs investigation %+v, conflicts %+v", ov.NeedsInvestigation, ov.Conflicts)
	}
	h := ov.Bank
	if h.Calls != 3 || h.Answered != 2 || h.Errors != 1 || h.ErrorRate != 0.5 || h.LastError != "bank answered 503" ||
		h.LastErrorAt == nil || h.P95 <= time.Second {
		t.Errorf("bank = %+v", h)
	}
	if ov.Statements != nil && len(ov.Statements.Recent) != 0 {
		t.Errorf("statements = %+v", ov.Statements)
	}
}

func TestOverviewEstimatesLargeCounts(t *testing.T) {
	t.Parallel()
	b := reporttest.New(t)
	ctx := context.Background()
	const n = ExactCountLimit + 2000
	if _, err := b.DB.Pool.Exec(ctx, `
		INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
		SELECT 'big-' || i, 'acc', 'bene', 100, 'EUR', CASE WHEN i < 5 THEN 'failed' ELSE 'confirmed' END, 'key-' || i, 'sha256:' || repeat('0', 64)
		FROM generate_series(0, $1::int - 1) i`, n); err != nil {
		t.Fatal(err)
	}
	in := &Inspector{DB: b.DB.Pool}
	// Without statistics: "more than the limit".
	ov, err := in.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byState := func(ov Overview, s settlement.State) Count {
		for _, sc := range ov.States {
			if sc.State == s {
				return sc.Count
			}
		}
		return Count{}
	}
	if c := byState(ov, settlement.Failed); c != (Count{N: 5, Exact: true}) {
		t.Errorf("failed = %+v", c)
	}
	if c := byState(ov, settlement.Confirmed); c.Exact || c.N <= ExactCountLimit {
		t.Errorf("confirmed before ANALYZE = %+v, want an inexact count above the limit", c)
	}
	if _, err := b.DB.Pool.Exec(ctx, `ANALYZE settlements`); err != nil {
		t.Fatal(err)
	}
	if ov, err = in.Overview(ctx); err != nil {
		t.Fatal(err)
	}
	if c := byState(ov, settlement.Confirmed); c.Exact || c.AtLeast || c.N < n*8/10 || c.N > n*12/10 {
		t.Errorf("confirmed after ANALYZE = %+v, want an estimate near %d", c, n)
	}
}

func TestOverviewBankSampleIsBounded(t *testing.T) {
	t.Parallel()
	b := reporttest.New(t)
	b.Seed(t, "s-1", 100, settlement.Sent, false)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	if _, err := b.DB.Pool.Exec(context.Background(), `
		INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at, finished_at, outcome, http_status)
		SELECT 's-1', 'status', 'k', $1::timestamptz - (i * interval '10 ms'), $1::timestamptz - (i * interval '10 ms') + interval '5 ms',
		       CASE WHEN i % 4 = 0 THEN 'ambiguous' ELSE 'payment' END, 200
		FROM generate_series($2::int + 4, 1, -1) i`, now, BankSample); err != nil {
		t.Fatal(err)
	}
	ov, err := (&Inspector{DB: b.DB.Pool, Now: func() time.Time { return now }}).Overview(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h := ov.Bank; !h.Sampled || h.Calls != BankSample || h.Answered != BankSample || h.Errors != BankSample/4 || h.ErrorRate != 0.25 {
		t.Errorf("bank = %+v", h)
	}
}
