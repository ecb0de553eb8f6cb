package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/source"
)

// brokenSource is a broker that never hands a message over: its fetches
// fail with err, or come back empty when err is nil.
type brokenSource struct{ err error }

func (s brokenSource) Kind() string { return "test" }
func (s brokenSource) Fetch(ctx context.Context, _ int) ([]source.Message, error) {
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Millisecond):
	}
	return nil, s.err
}
func (brokenSource) Extend(context.Context, []source.Message) error { return nil }
func (brokenSource) Ack(context.Context, []source.Message) error    { return nil }
func (brokenSource) GiveBack(context.Context, []source.Message, time.Duration) error {
	return nil
}
func (brokenSource) Lag(context.Context) (int64, error)               { return 5, nil }
func (brokenSource) Retention(context.Context) (time.Duration, error) { return time.Hour, nil }
func (brokenSource) Close() error                                     { return nil }

// TestDrainThatStallsFails: a drain whose loop never gets a message fails
// once it has made no progress for drainStall, with how far it got and the
// loop's last warning, instead of waiting for ever (a bench run once hung
// so, with nothing to say which phase or why).
func TestDrainThatStallsFails(t *testing.T) {
	db := dbtest.New(t)
	defer func(d time.Duration) { drainStall = d }(drainStall)
	drainStall = 2 * time.Second
	cfg := Config{Concurrency: 2}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"fetches fail", errors.New("broker unreachable: connection refused"), "broker unreachable: connection refused"},
		{"nothing comes", nil, "last warning: none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			el, err := drain(ctx, cfg, db.URL, "settle-bench-test", 5, func(context.Context) (source.Source, error) {
				return brokenSource{err: tc.err}, nil
			})
			if err == nil {
				t.Fatalf("drain returned after %s with no error", el)
			}
			for _, want := range []string{"made no progress for 2s", "0 of 5 messages acknowledged", "0 of 5 settlements", tc.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
