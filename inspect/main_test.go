package inspect

import (
	"os"
	"testing"

	"github.com/settle/settle/internal/testsupport/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }
