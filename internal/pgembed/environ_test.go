package pgembed_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/settle/settle/internal/pgembed"
)

// TestServerEnvironmentHasNoSecrets starts the cluster from a process whose
// environment holds settle's secrets, as `settle worker` has them, and
// reads the environment of the postmaster that process left behind (it
// outlives the worker and belongs to another user): none of the secrets,
// and nothing else of ours beyond an allow-listed minimum (issue 32,
// item 8).
func TestServerEnvironmentHasNoSecrets(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	secrets := map[string]string{
		"SETTLE_API_TOKEN":           "api-token-0123456789abcdef",
		"SETTLE_BANK_TOKEN":          "sk_live_bank_token_0123456789",
		"SETTLE_BANK_WEBHOOK_SECRET": "whsec_webhook_0123456789",
		"SETTLE_EVENTS_SECRET":       "whsec_ZXZlbnRzLXNlY3JldC0wMTIzNDU2Nzg5",
		"DATABASE_URL":               "postgres://settle:db-password-0123456789@db.example/settle",
		"SOME_UNRELATED_SECRET":      "unrelated-0123456789",
	}
	var env []string
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	release := startHolderEnv(t, home, env...)
	defer release()
	c, ok, err := pgembed.Find(home)
	if err != nil || !ok {
		t.Fatalf("Find: running %v, %v", ok, err)
	}
	t.Cleanup(func() { _ = c.Stop(t.Context()) })
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.PID))
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "LC_ALL": true, "TZ": true, "TMPDIR": true,
		"LD_LIBRARY_PATH": true, "GOCOVERDIR": true,
		// pg_ctl sets these itself (and the shell it starts the server with, PWD).
		"PGDATA": true, "PGLOCALEDIR": true, "PGSYSCONFDIR": true, "PG_GRANDPARENT_PID": true, "PWD": true, "SHLVL": true, "_": true}
	for _, kv := range bytes.Split(raw, []byte{0}) {
		if len(kv) == 0 {
			continue
		}
		name, value, _ := strings.Cut(string(kv), "=")
		for k, v := range secrets {
			if strings.Contains(value, v) {
				t.Errorf("postmaster %d has %s's value in %s", c.PID, k, name)
			}
		}
		if !allowed[name] {
			t.Errorf("postmaster %d has %s in its environment, beyond the minimum", c.PID, name)
		}
	}
}
