// Package childenv builds the environment of the long-lived processes settle
// starts and leaves running: the embedded PostgreSQL (initdb, pg_ctl and the
// postmaster they start) and the embedded JetStream server. Such a process
// outlives the settle command that started it and is readable as
// /proc/PID/environ by its user (for PostgreSQL, another user: postgres), so
// it must never inherit that command's secrets (SETTLE_API_TOKEN,
// SETTLE_BANK_TOKEN, SETTLE_BANK_WEBHOOK_SECRET, SETTLE_EVENTS_SECRET,
// DATABASE_URL, …).
//
// Minimal keeps an allow-list of harmless variables and nothing else: what
// is not on the list is dropped, so a secret added later cannot leak by
// being forgotten.
package childenv

import (
	"os"
	"strings"
)

// kept are the variables a child keeps from the starting process when they
// are set: the search path, time zone (initdb records the server's zone from
// TZ), the temporary directory, the dynamic linker's path (server binaries
// built into a private prefix) and the coverage directory of instrumented
// test binaries.
var kept = []string{"PATH", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "GOCOVERDIR"}

// Minimal returns the environment of a child process: the allow-listed
// variables of this process, the C locale (LANG and LC_ALL), and extra
// ("NAME=value" entries, which win over the kept ones). PATH defaults to
// /usr/local/bin:/usr/bin:/bin when unset.
func Minimal(extra ...string) []string {
	return minimal(os.LookupEnv, extra...)
}

func minimal(lookup func(string) (string, bool), extra ...string) []string {
	override := map[string]bool{}
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		override[name] = true
	}
	var env []string
	for _, name := range kept {
		if override[name] {
			continue
		}
		v, ok := lookup(name)
		if !ok && name == "PATH" {
			v, ok = "/usr/local/bin:/usr/bin:/bin", true
		}
		if ok {
			env = append(env, name+"="+v)
		}
	}
	for _, name := range []string{"LANG", "LC_ALL"} {
		if !override[name] {
			env = append(env, name+"=C")
		}
	}
	return append(env, extra...)
}
