package settletest

import (
	"fmt"
	"os"
	"path/filepath"
)

// SpecPath is where the other party's document name is kept: in
// ../shared/specs beside the repository, the repository being the
// directory of go.mod above the working directory. It does not check that
// the document is there; what a missing one means (a skip, or a failure
// under CI=true) is the caller's to say.
func SpecPath(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "specs", name), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}
