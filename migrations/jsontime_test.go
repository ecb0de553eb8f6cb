package migrations_test

import (
	"context"
	"testing"

	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestJSONTimeInlined: settle_json_time is STABLE (migration 0022), so the
// planner inlines it into the outcome events' view instead of running it
// as a function of its own at every call, and it formats every time as
// before: RFC 3339 in UTC with microseconds, whatever the session's time
// zone and date style, and JSON null for no time.
func TestJSONTimeInlined(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	var volatility string
	if err := db.Pool.QueryRow(ctx, `SELECT provolatile FROM pg_proc WHERE proname = 'settle_json_time'`).Scan(&volatility); err != nil {
		t.Fatal(err)
	}
	if volatility != "s" {
		t.Errorf("settle_json_time volatility %q, want s (STABLE: inlined)", volatility)
	}
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET TIME ZONE 'America/New_York'; SET DateStyle = 'German, DMY'; SET lc_time = 'C'`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `RESET TIME ZONE; RESET DateStyle; RESET lc_time`) //nolint:errcheck // the connection's settings are put back best effort
	for _, c := range []struct{ in, want string }{
		{"2026-12-06 04:05:06.123456+01", `"2026-12-06T03:05:06.123456Z"`},
		{"2026-01-01 00:00:00+00", `"2026-01-01T00:00:00.000000Z"`},
		{"", "null"},
	} {
		var got string
		if err := conn.QueryRow(ctx, `SELECT settle_json_time(NULLIF($1, '')::timestamptz)::text`, c.in).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("settle_json_time(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}
