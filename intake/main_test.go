package intake_test

import (
	"os"
	"testing"

	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, bintest.Cleanup)) }
