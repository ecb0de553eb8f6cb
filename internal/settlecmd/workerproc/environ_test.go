package workerproc

import (
	"slices"
	"testing"
)

func TestEnviron(t *testing.T) {
	t.Parallel()
	base := []string{"PATH=/bin", "DATABASE_URL=postgres://mine", "SETTLE_CRASH_AT=x", "SETTLE_HOME=/h", "SETTLE_PG_BINDIR=/pg", "HOME=/root"}
	got := environ(base, []string{"SETTLE_HOME", "SETTLE_PG_BINDIR"}, "postgres://test", []string{"SETTLE_API_TOKEN=tok"})
	want := []string{"PATH=/bin", "SETTLE_HOME=/h", "SETTLE_PG_BINDIR=/pg", "HOME=/root", "DATABASE_URL=postgres://test", "SETTLE_API_TOKEN=tok"}
	if !slices.Equal(got, want) {
		t.Errorf("environ with keep:\n got %q\nwant %q", got, want)
	}
	got = environ(base, nil, "postgres://test", nil)
	want = []string{"PATH=/bin", "HOME=/root", "DATABASE_URL=postgres://test"}
	if !slices.Equal(got, want) {
		t.Errorf("environ without keep:\n got %q\nwant %q", got, want)
	}
}
