package childenv

import (
	"slices"
	"testing"
)

func TestMinimal(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"PATH": "/opt/pg/bin:/usr/bin", "TZ": "UTC", "SETTLE_API_TOKEN": "secret-0123456789",
		"SETTLE_BANK_TOKEN": "sk_live", "DATABASE_URL": "postgres://u:p@h/db", "HOME": "/root", "LANG": "de_DE.UTF-8",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	got := minimal(lookup, "HOME=/var/lib/cluster")
	want := []string{"PATH=/opt/pg/bin:/usr/bin", "TZ=UTC", "LANG=C", "LC_ALL=C", "HOME=/var/lib/cluster"}
	if !slices.Equal(got, want) {
		t.Fatalf("Minimal = %q, want %q", got, want)
	}
	if got := minimal(func(string) (string, bool) { return "", false }); !slices.Contains(got, "PATH=/usr/local/bin:/usr/bin:/bin") {
		t.Fatalf("no default PATH: %q", got)
	}
}
