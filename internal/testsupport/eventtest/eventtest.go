// Package eventtest checks outcome events (DESIGN.md section 19) as the
// tests of their writers need: each written once, in its final form, with
// the settlement as GET /v1/settlements/{id} shows it at the commit of its
// transaction. It reads; it never writes.
package eventtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/inspect"
)

// Row is one event of a settlement as a transaction sees it.
type Row struct {
	N int
	// Ctid is the place of the row's version: an event rewritten (as the
	// fill at commit rewrites one) moves to another.
	Ctid string
	// Final reports whether the payload holds the settlement already.
	Final bool
	// Current reports whether the payload, its own keys taken away, is the
	// settlement's view as q sees it (settle_settlement_view).
	Current bool
}

// eventKeys are the keys an event adds to the settlement's view.
var eventKeys = []string{"event_id", "reason", "at", "from_state", "stored_hash", "incoming_hash", "incoming_event_id"}

// Rows reads the events of settlement id as q sees them (a transaction
// sees its own), in order.
func Rows(ctx context.Context, q inspect.Querier, id string) ([]Row, error) {
	rows, err := q.Query(ctx, `
		SELECT n, ctid::text, payload ? 'settlement', (payload - $2::text[]) = settle_settlement_view(settlement_id)
		FROM settlement_events WHERE settlement_id = $1 ORDER BY n`, id, eventKeys)
	if err != nil {
		return nil, fmt.Errorf("error reading the events of %s: %w", id, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Row, error) {
		var r Row
		return r, row.Scan(&r.N, &r.Ctid, &r.Final, &r.Current)
	})
}

// InTx reads the events of id inside the transaction that writes them,
// once it wrote them, and returns a check to run after its commit: the
// events numbered ns were final before the commit, were not rewritten by
// it, and are the settlement as GET shows it after it.
func InTx(t *testing.T, ctx context.Context, tx inspect.Querier, id string, ns ...int) (afterCommit func(ctx context.Context, q inspect.Querier)) {
	t.Helper()
	before, err := Rows(ctx, tx, id)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, q inspect.Querier) {
		t.Helper()
		after, err := Rows(ctx, q, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			b, okb := find(before, n)
			a, oka := find(after, n)
			if !okb || !oka {
				t.Errorf("%s:%d: written before the commit %v, there after it %v", id, n, okb, oka)
				continue
			}
			if !b.Final || b.Ctid != a.Ctid {
				t.Errorf("%s:%d not written once in its final form: final before the commit %v, row %s then %s", id, n, b.Final, b.Ctid, a.Ctid)
			}
			if !a.Current {
				t.Errorf("%s:%d: payload is not the settlement as GET shows it at the commit", id, n)
			}
		}
	}
}

func find(rows []Row, n int) (Row, bool) {
	for _, r := range rows {
		if r.N == n {
			return r, true
		}
	}
	return Row{}, false
}
