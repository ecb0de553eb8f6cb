package bankclient

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReference(t *testing.T) {
	t.Parallel()
	obie := Capabilities{RefMaxLen: 31, RefASCIIOnly: true, RefAllowed: "-._"}
	// kind takes references as settle's own protocol does (bankclient/settle).
	kind := Capabilities{LookupByKey: true, Search: true, Replay: ReplayStored, RefMaxLen: 256, MaxAmount: 1<<53 - 1}
	long := strings.Repeat("ü", 64) // 128 bytes, non-ASCII
	for _, tc := range []struct {
		name string
		caps Capabilities
		id   string
		same bool
	}{
		{"fits anywhere", kind, "order-42", true},
		{"fits the strict rules", obie, "order-42.a_b", true},
		{"too long", obie, strings.Repeat("x", 32), false},
		{"not ASCII", obie, "ordre-été", false},
		{"a space", obie, "order 42", false},
		{"long and non-ASCII", obie, long, false},
		{"long at the kind bank", kind, strings.Repeat("y", 300), false},
	} {
		ref := tc.caps.Reference(tc.id)
		if (ref == tc.id) != tc.same {
			t.Errorf("%s: Reference(%q) = %q, same = %v", tc.name, tc.id, ref, ref == tc.id)
		}
		if !tc.caps.fits(ref) {
			t.Errorf("%s: Reference(%q) = %q does not fit the rules it was made for", tc.name, tc.id, ref)
		}
		if again := tc.caps.Reference(tc.id); again != ref {
			t.Errorf("%s: Reference is not stable: %q then %q", tc.name, ref, again)
		}
		if !utf8.ValidString(ref) {
			t.Errorf("%s: %q is not UTF-8", tc.name, ref)
		}
	}
	if a, b := obie.Reference(long), obie.Reference(long+"x"); a == b {
		t.Errorf("two ids share the short reference %q", a)
	}
}

func TestSanitize(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"insufficient funds", "insufficient funds"},
		{"a\x00b\nc\x1b[31m", "abc[31m"},
		{"bad \xff utf8", "bad  utf8"},
		{strings.Repeat("é", 200), strings.Repeat("é", 128) + "…"},
	}
	for _, tt := range tests {
		if got := Sanitize(tt.in); got != tt.want {
			t.Errorf("Sanitize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
