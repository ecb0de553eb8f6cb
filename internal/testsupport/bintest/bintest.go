// Package bintest builds the settle binary for tests that run it as a
// subprocess. It builds once per test process and hands every caller the
// same path.
//
// It owns only that build. It must never be imported by non-test code, and
// it never starts the binary: callers start it and must kill what they start
// in t.Cleanup.
package bintest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// EnvBinary names an environment variable that, when set, points at a
// prebuilt settle binary to use instead of building one.
const EnvBinary = "SETTLE_TESTBIN"

var (
	once sync.Once
	path string
	err  error
)

// Build returns the path of a settle binary built from ./cmd/settle of the
// module under test, building it on the first call of the test process. The
// binary lives in a directory under os.TempDir() (removed by Cleanup). A
// failed build fails every caller's test with the compiler's output.
func Build(t testing.TB) string {
	t.Helper()
	once.Do(func() { path, err = build() })
	if err != nil {
		t.Fatalf("bintest: %v", err)
	}
	return path
}

// Cleanup removes the binary built by Build, if any. Call it from TestMain
// after m.Run; without it the binary stays in the temporary directory.
func Cleanup() {
	if path != "" && os.Getenv(EnvBinary) == "" {
		_ = os.RemoveAll(filepath.Dir(path))
	}
}

func build() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil { //nolint:gosec // G703: the developer names the binary to test
			return "", fmt.Errorf("error using %s: %w", EnvBinary, err)
		}
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(os.TempDir(), "settle-bintest-")
	if err != nil {
		return "", fmt.Errorf("error creating build directory: %w", err)
	}
	bin := filepath.Join(dir, "settle")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/settle")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("error building ./cmd/settle: %w\n%s", err, out.String())
	}
	return bin, nil
}

// moduleRoot returns the directory of the go.mod of the module under test.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("error running go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("error finding the module root: not inside a module")
	}
	return filepath.Dir(gomod), nil
}
