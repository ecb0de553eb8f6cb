package main

import (
	"os"
	"testing"

	"github.com/settle/settle/internal/testbin"
	"github.com/settle/settle/internal/testdb"
)

// TestMain stops the private PostgreSQL cluster (if a test started one)
// and removes the test binary when the package's tests are done.
func TestMain(m *testing.M) { os.Exit(testdb.Main(m, testbin.Cleanup)) }
