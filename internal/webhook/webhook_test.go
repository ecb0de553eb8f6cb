package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/metrics"
)

// TestFailureStatus: a hint whose settlement cannot be found or checked
// because the database cannot answer now is 503 with Retry-After (the bank
// pushes it again); any other error is a bug, 500, never a 503 that hides
// it behind the bank's retries.
func TestFailureStatus(t *testing.T) {
	t.Parallel()
	down := fmt.Errorf("error finding the settlement: %w", &pgconn.PgError{Code: pgerrcode.AdminShutdown})
	bug := errors.New("can't scan into dest[0]")
	for _, tc := range []struct {
		name       string
		find, chk  error
		wantStatus int
	}{
		{"find unavailable", down, nil, http.StatusServiceUnavailable},
		{"find bug", bug, nil, http.StatusInternalServerError},
		{"check unavailable", nil, down, http.StatusServiceUnavailable},
		{"check bug", nil, bug, http.StatusInternalServerError},
		{"checked", nil, nil, http.StatusAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &Handler{
				Connector: bankclient.Connector{Name: "settle",
					VerifyWebhook: func(http.Header, []byte, string, time.Time) (bankclient.Hint, error) {
						return bankclient.Hint{Reference: "s-1"}, nil
					}},
				Secret: "secret",
				Find: func(context.Context, bankclient.Hint) (string, bool, error) {
					return "s-1", tc.find == nil, tc.find
				},
				Check:   func(context.Context, string) error { return tc.chk },
				Metrics: metrics.New(prometheus.NewRegistry()),
				Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
				Now:     time.Now,
			}
			mux := http.NewServeMux()
			mux.Handle("POST /v1/bank/webhooks/{connector}", h)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/bank/webhooks/settle", strings.NewReader("{}")))
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d (%s)", rec.Code, tc.wantStatus, rec.Body)
			}
			if retry := rec.Header().Get("Retry-After"); (tc.wantStatus == http.StatusServiceUnavailable) != (retry != "") {
				t.Fatalf("Retry-After %q with status %d", retry, rec.Code)
			}
		})
	}
}
