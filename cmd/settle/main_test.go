package main

import (
	"os"
	"testing"

	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestMain stops the private PostgreSQL cluster (if a test started one)
// and removes the test binary when the package's tests are done.
func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, bintest.Cleanup)) }
