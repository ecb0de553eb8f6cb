package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/settle/settle/console"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/reconcile"
)

// TestDatabaseErrorsAtTheEdge: the console decides its answer to a
// database error with the one classifier (dberr): a database it cannot
// reach now answers 503, anything else (here a table gone, which no retry
// mends) 500, on a page as on an account holder's return from their bank,
// and each failure is logged once.
func TestDatabaseErrorsAtTheEdge(t *testing.T) {
	t.Parallel()
	paths := map[string]string{
		"a page":                  console.Prefix,
		"an authorisation return": console.CallbackPath + "?state=s-1&code=c-1",
	}
	for _, tc := range []struct {
		name string
		want int
	}{
		{"unavailable", http.StatusServiceUnavailable},
		{"unknown", http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			pool, err := database.Connect(context.Background(), db.URL, database.PoolOptions{MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			logs := &settletest.Buffer{}
			c, err := console.New(console.Config{DB: pool, Resolver: &reconcile.Resolver{DB: pool}, Logger: slogJSON(logs)})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == http.StatusServiceUnavailable {
				// A closed pool: the database cannot be reached.
				pool.Close()
			} else if _, err := db.Pool.Exec(context.Background(), `ALTER TABLE settlements RENAME TO settlements_gone`); err != nil {
				t.Fatal(err)
			}
			for what, path := range paths {
				before := strings.Count(logs.String(), `"level":"ERROR"`)
				rec := httptest.NewRecorder()
				c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != tc.want {
					t.Errorf("%s (%s): %d, want %d: %s", what, path, rec.Code, tc.want, rec.Body)
				}
				if n := strings.Count(logs.String(), `"level":"ERROR"`) - before; n != 1 {
					t.Errorf("%s: %d error lines logged, want 1:\n%s", what, n, logs)
				}
			}
		})
	}
}
