package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/resolvertest"
	"github.com/settle/settle/settlement"
)

// watchBundle is n settlements confirmed at a fakebank by a Resolver that
// watches for returns in rounds (WatchInBulk) for an hour; bank is the
// client the rounds ask (front, when not nil, stands between it and the
// fakebank).
func watchBundle(t *testing.T, n int, front func(http.Handler) http.Handler) (*resolverBundle, []string, map[string]string) {
	t.Helper()
	b := setupResolver(t, fakebank.Faults{})
	b.r.ReturnWatch, b.r.WatchInBulk = time.Hour, true
	ids, pays := make([]string, n), map[string]string{}
	for i := range ids {
		ids[i] = fmt.Sprintf("watch-%02d", i)
		resolvertest.InsertSettlement(t, b.db, ids[i], int64(1000+i))
		out, err := b.r.Send(context.Background(), ids[i], nil)
		if err != nil || out.State != settlement.Confirmed || !out.Done {
			t.Fatalf("send %s: %+v, %v; want confirmed at once, nothing scheduled", ids[i], out, err)
		}
		row := resolvertest.ReadRow(t, b.db, ids[i])
		if row.NextCheck != nil || row.PaymentID == nil {
			t.Fatalf("%s confirmed with a check of its own or without its payment: %+v", ids[i], row)
		}
		pays[ids[i]] = *row.PaymentID
	}
	if front != nil {
		srv := httptest.NewServer(front(b.bank.Handler()))
		t.Cleanup(srv.Close)
		client, err := settle.New(srv.URL, bankclient.Options{Timeout: 2 * time.Second, Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		b.r.Bank = client
	}
	return b, ids, pays
}

// watchWrites is each settlement's row version (xmin) and the number of
// bank_attempts and transitions rows: a round that writes nothing leaves
// all three as they were.
func watchWrites(t *testing.T, b *resolverBundle) (map[string]string, int, int) {
	t.Helper()
	ctx := context.Background()
	rows, err := b.db.Pool.Query(ctx, `SELECT settlement_id, xmin::text FROM settlements`)
	if err != nil {
		t.Fatal(err)
	}
	xmin := map[string]string{}
	for rows.Next() {
		var id, x string
		if err := rows.Scan(&id, &x); err != nil {
			t.Fatal(err)
		}
		xmin[id] = x
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var attempts, transitions int
	if err := b.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM bank_attempts), (SELECT count(*) FROM settlement_transitions)`).Scan(&attempts, &transitions); err != nil {
		t.Fatal(err)
	}
	return xmin, attempts, transitions
}

// rewritten lists the settlements whose row changed between two
// watchWrites.
func rewritten(before, after map[string]string) []string {
	var ids []string
	for id, x := range after {
		if before[id] != x {
			ids = append(ids, id)
		}
	}
	return ids
}

// checkReturned fails unless exactly the settlements of returned are
// returned, each with one payout and one reversal, and every other one is
// confirmed with its payout alone.
func checkReturned(t *testing.T, b *resolverBundle, ids []string, returned map[string]bool) {
	t.Helper()
	for _, id := range ids {
		row := resolvertest.ReadRow(t, b.db, id)
		got := bookedMovements(t, b, id)
		switch {
		case returned[id] && (row.State != settlement.Returned || got["payout"] != 1 || got["reversal"] != 1):
			t.Errorf("%s: %s with movements %v, want returned with one payout and one reversal", id, row.State, got)
		case !returned[id] && (row.State != settlement.Confirmed || got["payout"] != 1 || got["reversal"] != 0):
			t.Errorf("%s: %s with movements %v, want confirmed with its payout alone", id, row.State, got)
		}
	}
	resolvertest.CheckAgainst(t, b.db, b.r.Bank)
}

// TestWatchByList: a round of the return watch at a bank that lists its
// returns asks one list for all twenty watched settlements and writes
// nothing when nothing came back; returns made at the bank are each
// booked once (returned with one reversal) by the next round, and a round
// after that finds nothing left to do. Bank calls and writes per round are
// counted at the fakebank and in SQL.
func TestWatchByList(t *testing.T) {
	t.Parallel()
	b, ids, pays := watchBundle(t, 20, nil)
	ctx := context.Background()

	round := func(wantChanged int) WatchResult {
		t.Helper()
		before, attBefore, trBefore := watchWrites(t, b)
		reqs := b.bank.Traffic().Requests
		res, err := b.r.Watch(ctx, time.Minute)
		if err != nil || !res.Listed || res.Checked != 0 || res.Changed != wantChanged {
			t.Fatalf("round: %+v, %v; want listed, no one-by-one check, %d changed", res, err, wantChanged)
		}
		if calls := b.bank.Traffic().Requests - reqs; calls != 1 || res.ListCalls != 1 {
			t.Errorf("round asked the bank %d times (%d list pages), want one list call", calls, res.ListCalls)
		}
		after, attAfter, trAfter := watchWrites(t, b)
		if got := rewritten(before, after); len(got) != wantChanged || attAfter-attBefore != wantChanged || trAfter-trBefore != wantChanged {
			t.Errorf("round rewrote %v, added %d bank attempts and %d transitions; want %d of each",
				got, attAfter-attBefore, trAfter-trBefore, wantChanged)
		}
		return res
	}
	if res := round(0); res.Watched != 20 {
		t.Fatalf("watched %d, want 20", res.Watched)
	}
	returned := map[string]bool{ids[3]: true, ids[11]: true, ids[19]: true}
	for id := range returned {
		if err := b.bank.Return(pays[id], "AC04"); err != nil {
			t.Fatal(err)
		}
	}
	round(len(returned))
	if res := round(0); res.Watched != 17 {
		t.Errorf("watched %d after three returns, want 17", res.Watched)
	}
	checkReturned(t, b, ids, returned)
}

// TestWatchByListRacesItsCheck: a return the list reports while the
// settlement's own check (a webhook's hint) and a statement report it too
// is booked exactly once.
func TestWatchByListRacesItsCheck(t *testing.T) {
	t.Parallel()
	b, ids, pays := watchBundle(t, 4, nil)
	ctx := context.Background()
	for _, id := range ids {
		if err := b.bank.Return(pays[id], "AC04"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	changed := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			res, err := b.r.Watch(ctx, time.Minute)
			if err != nil {
				t.Errorf("round: %v", err)
			}
			changed <- res.Changed
		})
	}
	for _, id := range ids {
		wg.Go(func() {
			if _, err := b.r.Resolve(ctx, id, nil); err != nil {
				t.Errorf("check of %s: %v", id, err)
			}
		})
		wg.Go(func() {
			amount := int64(0)
			if err := b.db.Pool.QueryRow(ctx, `SELECT amount_cents FROM settlements WHERE settlement_id = $1`, id).Scan(&amount); err != nil {
				t.Error(err)
				return
			}
			if _, err := b.r.ApplyReturn(ctx, id, "statement", LineFacts{Line: "1", AmountMinor: &amount, Currency: "EUR", ReturnReason: "AC04"}); err != nil {
				t.Errorf("statement return of %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	close(changed)
	total := 0
	for n := range changed {
		total += n
	}
	if total > len(ids) {
		t.Errorf("rounds booked %d returns of %d settlements", total, len(ids))
	}
	all := map[string]bool{}
	for _, id := range ids {
		all[id] = true
	}
	checkReturned(t, b, ids, all)
}

// TestWatchFallsBackPaymentByPayment: a bank without the list (404, as
// an implementation of the protocol that does not offer it answers), and
// a list that fails after its first page, are asked payment by payment:
// every return is booked once, and the settlements nothing happened to
// are not written.
func TestWatchFallsBackPaymentByPayment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		front func(http.Handler) http.Handler
		// wantList is what the list error says.
		wantList string
	}{
		{"no list", func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/returns" {
					http.NotFound(w, r)
					return
				}
				h.ServeHTTP(w, r)
			})
		}, bankclient.ErrUnsupported.Error()},
		{"partial list", func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/returns" {
					if r.URL.Query().Get("after") != "" {
						http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
						return
					}
					q := r.URL.Query()
					q.Set("limit", "1") // pages of one: the second fails
					r.URL.RawQuery = q.Encode()
				}
				h.ServeHTTP(w, r)
			})
		}, "503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, ids, pays := watchBundle(t, 8, tc.front)
			ctx := context.Background()
			returned := map[string]bool{ids[1]: true, ids[4]: true, ids[6]: true}
			for id := range returned {
				if err := b.bank.Return(pays[id], "AC04"); err != nil {
					t.Fatal(err)
				}
			}
			before, attBefore, _ := watchWrites(t, b)
			// A period past the watch's end: this is every settlement's
			// last round, so each one is due a check of its own.
			res, err := b.r.Watch(ctx, 2*time.Hour)
			if err != nil || res.Listed || !strings.Contains(res.ListError, tc.wantList) || res.Checked != 8 || res.Unanswered != 0 || res.Changed != 3 {
				t.Fatalf("round: %+v, %v; want the list refused (%s), 8 checks, 3 returns", res, err, tc.wantList)
			}
			after, attAfter, _ := watchWrites(t, b)
			if got := rewritten(before, after); len(got) != 3 || attAfter-attBefore != 3 {
				t.Errorf("round rewrote %v and added %d bank attempts, want the 3 returned and 3", got, attAfter-attBefore)
			}
			checkReturned(t, b, ids, returned)
		})
	}
}

// TestWatchDue: without a list, a round asks a settlement when the check
// its own schedule would have made (10 minutes after confirmation, 20, 40,
// … with a 10-minute --max-check-interval) falls since the last round, and
// in the last round before its watch ends; never after.
func TestWatchDue(t *testing.T) {
	t.Parallel()
	p := Policy{ReturnWatch: 7 * 24 * time.Hour, MaxCheckInterval: 10 * time.Minute, CheckInterval: 2 * time.Second}
	c := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	period := time.Minute
	var due []time.Duration
	for at := c; at.Before(c.Add(8 * 24 * time.Hour)); at = at.Add(period) {
		if p.watchDue(c, at, period) {
			due = append(due, at.Sub(c))
		}
	}
	// 10m·2^k up to the watch's 168h: 10m … 160m … 10240m (≈ 7.1 days is
	// past it), so 10 points, and the last minute of the watch.
	want := []time.Duration{}
	for d := 10 * time.Minute; d < p.ReturnWatch; d *= 2 {
		want = append(want, d)
	}
	want = append(want, p.ReturnWatch-period)
	if fmt.Sprint(due) != fmt.Sprint(want) {
		t.Errorf("due at %v, want %v", due, want)
	}
}

// TestWatchByListStripe: at Stripe a round asks GET /v1/payouts with
// status=failed (each request and answer checked against Stripe's OpenAPI
// document): a payout paid, then failed, is the return of its settlement,
// booked once; the others are not written.
func TestWatchByListStripe(t *testing.T) {
	t.Parallel()
	b, _ := setupStripe(t, fakebank.Faults{})
	b.r.ReturnWatch, b.r.WatchInBulk = time.Hour, true
	ctx := context.Background()
	ids := []string{"stripe-watch-1", "stripe-watch-2", "stripe-watch-3"}
	for _, id := range ids {
		insertStripeSettlement(t, b, id, 2500)
		if out, err := b.r.Send(ctx, id, nil); err != nil || out.State != settlement.Confirmed || !out.Done {
			t.Fatalf("send %s: %+v, %v; want confirmed at once, nothing scheduled", id, out, err)
		}
	}
	payID := resolvertest.ReadRow(t, b.db, ids[1]).PaymentID
	if payID == nil {
		t.Fatal("confirmed without the payout id")
	}
	if err := b.bank.Return(*payID, ""); err != nil {
		t.Fatal(err)
	}
	before, _, _ := watchWrites(t, b)
	res, err := b.r.Watch(ctx, time.Minute)
	if err != nil || !res.Listed || res.ListCalls != 1 || res.Checked != 0 || res.Changed != 1 {
		t.Fatalf("round: %+v, %v; want one list call and one return", res, err)
	}
	after, _, _ := watchWrites(t, b)
	if got := rewritten(before, after); len(got) != 1 || got[0] != ids[1] {
		t.Errorf("round rewrote %v, want %s alone", got, ids[1])
	}
	if res, err := b.r.Watch(ctx, time.Minute); err != nil || res.Changed != 0 || res.Watched != 2 {
		t.Errorf("next round: %+v, %v; want two watched, nothing changed", res, err)
	}
	checkReturned(t, b, ids, map[string]bool{ids[1]: true})
}
