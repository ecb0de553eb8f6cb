package audit

import (
	"testing"

	"github.com/settle/settle/internal/testsupport/reporttest"
)

// reportBundle is one test's ledger and bank (reporttest.Bundle) with the
// reports of this package.
type reportBundle struct{ *reporttest.Bundle }

func setupReport(t *testing.T) *reportBundle { return &reportBundle{reporttest.New(t)} }
