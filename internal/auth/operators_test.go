package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"strings"
	"testing"
)

func sum(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

func TestOperators(t *testing.T) {
	t.Parallel()
	file := "# the night shift\n\nalice:" + sum("alice-token-0123456789") + "\n  bob : " + strings.ToUpper(sum("bob-token-0123456789")) + "  \n"
	o, err := ParseOperators(strings.NewReader(file))
	if err != nil || o.Len() != 2 {
		t.Fatalf("ParseOperators = %v, %v", o, err)
	}
	for _, tc := range []struct {
		user, pass, want string
		ok               bool
	}{
		{"alice", "alice-token-0123456789", "alice", true},
		{"bob", "bob-token-0123456789", "bob", true},
		{"alice", "bob-token-0123456789", "", false},
		{"mallory", "alice-token-0123456789", "", false},
		{"alice", "", "", false},
	} {
		r := httptest.NewRequest("GET", "/console/", nil)
		r.SetBasicAuth(tc.user, tc.pass)
		if name, ok := o.Check(r); name != tc.want || ok != tc.ok {
			t.Errorf("%s/%s: %q %v, want %q %v", tc.user, tc.pass, name, ok, tc.want, tc.ok)
		}
	}
	r := httptest.NewRequest("GET", "/console/", nil)
	r.Header.Set("Authorization", "Bearer alice-token-0123456789")
	if _, ok := o.Check(r); ok {
		t.Error("a Bearer token signed in as an operator")
	}
	for _, bad := range []string{
		"", "# only a comment\n", "alice\n", "alice:abc\n", "alice:alice-token-0123456789\n", ":" + sum("x") + "\n",
		"alice:" + sum("a") + "\nalice:" + sum("b") + "\n", "al\u202eice:" + sum("a") + "\n", strings.Repeat("n", 129) + ":" + sum("a"),
	} {
		if _, err := ParseOperators(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseOperators(%q) took it", bad)
		}
	}
}
