package intake_test

import (
	"os"
	"testing"

	"github.com/settle/settle/internal/testbin"
	"github.com/settle/settle/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m, testbin.Cleanup)) }
