// Package workertest runs `settle worker` as a subprocess for tests: StartT
// builds the binary (internal/testsupport/bintest), starts a worker through
// internal/settlecmd/workerproc, kills it when the test ends and shows the end of its
// log if the test failed.
//
// It owns only these test conveniences; the process handling is
// workerproc's. It must never be imported by non-test code.
package workertest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/bintest"
)

// Worker is one `settle worker` subprocess.
type Worker = workerproc.Proc

// StartT starts `settle worker args…` for t with the settle binary of
// bintest, DATABASE_URL=dbURL and the extra environment env (none of our
// SETTLE_* variables), its log in t's temporary directory. It fails t if
// the worker does not listen, kills it when t ends, and shows the end of
// its log if t failed.
func StartT(t testing.TB, name, dbURL string, env []string, args ...string) *Worker {
	t.Helper()
	w, err := workerproc.Start(context.Background(), workerproc.Options{
		Executable:  bintest.Build(t),
		Name:        name,
		DatabaseURL: dbURL,
		LogPath:     filepath.Join(t.TempDir(), name+".log"),
		Env:         env,
		Args:        args,
		// A test binary killed by its timeout (or by hand) runs no
		// cleanup: the kernel ends the worker instead.
		DieWithParent: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Kill()
		if t.Failed() {
			t.Logf("%s log tail:\n%s", name, workerproc.Tail(w.LogPath(), 30))
		}
	})
	return w
}
