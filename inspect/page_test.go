package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/reporttest"
	"github.com/settle/settle/settlement"
)

// pageFixture is n settlements written in one statement, with receipt
// times in groups of three (so the id breaks ties), states in a cycle,
// four accounts, every tenth flagged, and the transition into the current
// state i minutes after the receipt.
type pageFixture struct {
	db   *dbtest.DB
	base time.Time
	n    int
}

var fixtureStates = []settlement.State{settlement.Pending, settlement.Sent, settlement.Uncertain,
	settlement.Confirmed, settlement.Confirmed, settlement.Failed, settlement.Returned}

func newPageFixture(t *testing.T, n int) *pageFixture {
	t.Helper()
	f := &pageFixture{db: dbtest.New(t), base: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), n: n}
	states := make([]string, len(fixtureStates))
	for k, s := range fixtureStates {
		states[k] = string(s)
	}
	ctx := context.Background()
	if _, err := f.db.Pool.Exec(ctx, `
		INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key,
		                         payload_hash, needs_investigation, investigation_reason, created_at, updated_at)
		SELECT 'p-' || lpad(i::text, 4, '0'), 'acc-' || (i % 4), 'bene', 100 + i, 'EUR', ($3::text[])[1 + i % 7],
		       'key-' || i, 'sha256:' || repeat('0', 64), i % 10 = 0, CASE WHEN i % 10 = 0 THEN 'test flag' END,
		       $2::timestamptz + (i / 3) * interval '1 second', $2::timestamptz
		FROM generate_series(0, $1::int - 1) i`, n, f.base, states); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(ctx, `
		INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason, at)
		SELECT settlement_id, NULL, 'pending', 'received', created_at FROM settlements
		UNION ALL
		SELECT settlement_id, 'pending', state, 'test', created_at + (substr(settlement_id, 3)::int) * interval '1 minute'
		FROM settlements WHERE state <> 'pending'`); err != nil {
		t.Fatal(err)
	}
	return f
}

// row is what the fixture wrote for settlement i.
func (f *pageFixture) row(i int) (id string, st settlement.State, account string, flagged bool, created, since time.Time) {
	id = fmt.Sprintf("p-%04d", i)
	st = fixtureStates[i%7]
	created = f.base.Add(time.Duration(i/3) * time.Second)
	since = created
	if st != settlement.Pending {
		since = created.Add(time.Duration(i) * time.Minute)
	}
	return id, st, fmt.Sprintf("acc-%d", i%4), i%10 == 0, created, since
}

// want lists the ids the filter selects, in list order, at clock now.
func (f *pageFixture) want(flt Filter, now time.Time) []string {
	type r struct {
		id      string
		created time.Time
	}
	var rs []r
	for i := range f.n {
		id, st, acc, flagged, created, since := f.row(i)
		if (flt.State != "" && st != flt.State) || (flt.AccountID != "" && acc != flt.AccountID) ||
			(flt.NeedsInvestigation && !flagged) || (flt.OlderThan > 0 && since.After(now.Add(-flt.OlderThan))) {
			continue
		}
		rs = append(rs, r{id, created})
	}
	sort.Slice(rs, func(a, b int) bool {
		if !rs[a].created.Equal(rs[b].created) {
			return rs[a].created.Before(rs[b].created)
		}
		return rs[a].id < rs[b].id
	})
	ids := []string{}
	for _, x := range rs {
		ids = append(ids, x.id)
	}
	return ids
}

// walk reads every page of the filter, through the cursor's string form as
// a browser would, and returns the ids in order.
func walk(t *testing.T, in *Inspector, flt Filter, size int) []string {
	t.Helper()
	ids := []string{}
	var after Cursor
	for pages := 0; ; pages++ {
		p, err := in.Page(context.Background(), flt, after, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Rows) > size {
			t.Fatalf("page of %d rows, asked for %d", len(p.Rows), size)
		}
		for _, r := range p.Rows {
			ids = append(ids, r.SettlementID)
		}
		if p.Next.IsZero() {
			return ids
		}
		if len(p.Rows) != size {
			t.Fatalf("short page (%d rows) with a next page", len(p.Rows))
		}
		if pages > 1000 {
			t.Fatal("pages never end")
		}
		after, err = ParseCursor(p.Next.String())
		if err != nil || !after.CreatedAt.Equal(p.Next.CreatedAt) || after.SettlementID != p.Next.SettlementID {
			t.Fatalf("cursor %q round trip: %v %v", p.Next.String(), after, err)
		}
	}
}

func TestPageWalksEachFilterOnceInOrder(t *testing.T) {
	t.Parallel()
	f := newPageFixture(t, 211)
	now := f.base.Add(3 * time.Hour)
	in := &Inspector{DB: f.db.Pool, Now: func() time.Time { return now }}
	for _, flt := range []Filter{
		{},
		{State: settlement.Confirmed},
		{State: settlement.Pending},
		{State: settlement.Uncertain, OlderThan: 90 * time.Minute},
		{AccountID: "acc-2"},
		{AccountID: "acc-2", State: settlement.Sent},
		{NeedsInvestigation: true},
		{NeedsInvestigation: true, State: settlement.Pending},
		{OlderThan: 2 * time.Hour},
		{AccountID: "nobody"},
	} {
		for _, size := range []int{1, 7, 50, maxPageSize} {
			got := walk(t, in, flt, size)
			if want := f.want(flt, now); !slices.Equal(got, want) {
				t.Errorf("%+v by %d: got %d ids %v\nwant %d %v", flt, size, len(got), got, len(want), want)
			}
		}
	}
}

func TestPageRowsCarryTheirFacts(t *testing.T) {
	t.Parallel()
	f := newPageFixture(t, 30)
	now := f.base.Add(time.Hour)
	in := &Inspector{DB: f.db.Pool, Now: func() time.Time { return now }}
	p, err := in.Page(context.Background(), Filter{State: settlement.Failed}, Cursor{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rows) == 0 {
		t.Fatal("no failed settlement")
	}
	for _, r := range p.Rows {
		var i int
		fmt.Sscanf(r.SettlementID, "p-%d", &i)
		id, st, acc, flagged, created, since := f.row(i)
		if r.SettlementID != id || r.State != string(st) || r.AccountID != acc || r.NeedsInvestigation != flagged ||
			!r.CreatedAt.Equal(created) || !r.Since.Equal(since) || r.AgeSeconds != now.Sub(since).Seconds() {
			t.Errorf("row %+v, want %s %s %s flagged=%v created %v since %v", r, id, st, acc, flagged, created, since)
		}
	}
}

func TestListSharesPageOrder(t *testing.T) {
	t.Parallel()
	f := newPageFixture(t, 60)
	now := f.base.Add(2 * time.Hour)
	in := &Inspector{DB: f.db.Pool, Now: func() time.Time { return now }}
	var got []string
	n, err := in.List(context.Background(), ListOptions{State: settlement.Confirmed, OlderThan: 30 * time.Minute},
		func(r SettlementRow) error { got = append(got, r.SettlementID); return nil })
	want := f.want(Filter{State: settlement.Confirmed, OlderThan: 30 * time.Minute}, now)
	if err != nil || n != len(want) || !slices.Equal(got, want) {
		t.Errorf("List = %d %v %v, want %v", n, got, err, want)
	}
	got = nil
	if n, err := in.List(context.Background(), ListOptions{State: settlement.Confirmed, Limit: 3},
		func(r SettlementRow) error { got = append(got, r.SettlementID); return nil }); err != nil || n != 3 {
		t.Errorf("List with limit 3 = %d %v", n, err)
	}
}

func TestFilterAndCursorRefuseNonsense(t *testing.T) {
	t.Parallel()
	for _, f := range []Filter{{State: "lost"}, {OlderThan: -time.Second}, {AccountID: string(make([]byte, 129))}} {
		if f.Validate() == nil {
			t.Errorf("%+v validated", f)
		}
	}
	for _, s := range []string{"x", "12", "12.", ".id", "x.id"} {
		if c, err := ParseCursor(s); err == nil {
			t.Errorf("ParseCursor(%q) = %+v", s, c)
		}
	}
	c := Cursor{CreatedAt: time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC), SettlementID: "id.with.dots"}
	if got, err := ParseCursor(c.String()); err != nil || !got.CreatedAt.Equal(c.CreatedAt) || got.SettlementID != c.SettlementID {
		t.Errorf("round trip of %+v: %+v %v", c, got, err)
	}
	if c, err := ParseCursor(""); err != nil || !c.IsZero() {
		t.Errorf("empty cursor: %+v %v", c, err)
	}
}

func TestRecordActionIsAppendOnlyAndInTheStory(t *testing.T) {
	t.Parallel()
	b := reporttest.New(t)
	b.Seed(t, "u-1", 100, settlement.Uncertain, false)
	ctx := context.Background()
	at := time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC)
	note, err := RecordAction(ctx, b.DB.Pool, OperatorAction{SettlementID: "u-1", Operator: "alice", Action: OperatorNote,
		Detail: "called the bank", Result: "recorded", OK: true, At: at})
	if err != nil || note.ID == 0 {
		t.Fatalf("note: %+v %v", note, err)
	}
	if _, err := RecordAction(ctx, b.DB.Pool, OperatorAction{SettlementID: "u-1", Operator: "bob", Action: OperatorResolve,
		Detail: "resolve now", Result: "stays uncertain", OK: true, At: at.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []OperatorAction{
		{SettlementID: "u-1", Operator: " ", Action: OperatorNote, Detail: "x"},
		{SettlementID: "u-1", Operator: "alice", Action: OperatorNote, Detail: "  "},
		{SettlementID: "u-1", Operator: "alice", Action: "delete", Detail: "x"},
		{SettlementID: "u-1", Operator: "alice", Action: OperatorNote, Detail: "x", SourceAddr: "not-an-address"},
		{SettlementID: "u-1", Operator: "alice", Action: OperatorNote, Detail: string(make([]rune, maxNoteLen+1))},
	} {
		if _, err := RecordAction(ctx, b.DB.Pool, bad); err == nil {
			t.Errorf("recorded %+v", bad)
		}
	}
	if _, err := RecordAction(ctx, b.DB.Pool, OperatorAction{SettlementID: "nope", Operator: "alice", Action: OperatorNote,
		Detail: "x", Result: "recorded", OK: true, At: at}); !errors.Is(err, settlement.ErrNotFound) {
		t.Errorf("note on an unknown settlement: %v, want ErrNotFound", err)
	}
	for _, q := range []string{`UPDATE operator_actions SET detail = 'changed'`, `DELETE FROM operator_actions`} {
		_, err := b.DB.Pool.Exec(ctx, q)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23001" {
			t.Errorf("%s: %v, want the append-only refusal", q, err)
		}
	}

	st, err := (&Inspector{DB: b.DB.Pool}).Show(ctx, "u-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.OperatorActions) != 2 || st.OperatorActions[0].Operator != "alice" || st.OperatorActions[1].Action != OperatorResolve {
		t.Fatalf("actions = %+v", st.OperatorActions)
	}
	var texts []string
	for _, e := range st.Timeline {
		if e.Kind == "operator" {
			texts = append(texts, e.Text)
		}
	}
	if want := []string{"alice noted: called the bank [name self-asserted]", "bob asked to resolve now: stays uncertain [name self-asserted]"}; !slices.Equal(texts, want) {
		t.Errorf("operator events = %q, want %q", texts, want)
	}
}

func TestStoryShowsEveryMovement(t *testing.T) {
	t.Parallel()
	b := reporttest.New(t)
	b.Seed(t, "r-1", 250, settlement.Returned, true)
	if _, err := b.DB.Pool.Exec(context.Background(), `INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency)
		VALUES ('r-1', 'reversal', 'acc-1', 250, 'EUR')`); err != nil {
		t.Fatal(err)
	}
	st, err := (&Inspector{DB: b.DB.Pool}).Show(context.Background(), "r-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Movements) != 2 || st.Movements[0].Kind != "payout" || st.Movements[1].Kind != "reversal" {
		t.Fatalf("movements = %+v", st.Movements)
	}
	n := 0
	for _, e := range st.Timeline {
		if e.Kind == "movement" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("timeline has %d movements, want 2: %+v", n, st.Timeline)
	}
}

func TestConflictsPageKeyset(t *testing.T) {
	t.Parallel()
	b := reporttest.New(t)
	b.Seed(t, "c-1", 100, settlement.Confirmed, true)
	if _, err := b.DB.Pool.Exec(context.Background(), `
		INSERT INTO receipt_conflicts (settlement_id, stored_hash, incoming_hash, incoming)
		SELECT 'c-1', 'sha256:' || repeat('0', 64), 'sha256:' || repeat('1', 63) || i, '{"amount_cents": 999}'
		FROM generate_series(0, 6) i`); err != nil {
		t.Fatal(err)
	}
	in := &Inspector{DB: b.DB.Pool}
	var ids []int64
	var after int64
	for {
		p, err := in.ConflictsPage(context.Background(), after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Conflicts {
			ids = append(ids, c.ID)
			if len(c.Differences) != 1 || c.Differences[0].Field != "amount_cents" {
				t.Errorf("differences = %+v", c.Differences)
			}
		}
		if p.Next == 0 {
			break
		}
		after = p.Next
	}
	if len(ids) != 7 || !slices.IsSorted(ids) {
		t.Errorf("ids = %v, want 7 in order", ids)
	}
}
