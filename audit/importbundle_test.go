package audit

import (
	"bytes"
	"context"
	"testing"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/reporttest"
	"github.com/settle/settle/statement/importer"
)

// importBundle is one test's private database with an importer.
type importBundle struct {
	*reportBundle
	im *importer.StatementImporter
}

func setupImport(t *testing.T) *importBundle {
	t.Helper()
	db := dbtest.New(t)
	return &importBundle{reportBundle: &reportBundle{&reporttest.Bundle{DB: db}}, im: &importer.StatementImporter{DB: db.Pool, Accounts: testAccounts}}
}

// testAccounts are the accounts the test files' statements are for: the
// files written here (acc-1, acc-2) and the statement package's test data.
var testAccounts = []string{"acc-1", "acc-2", "NL91 ABNA 0417 1643 00", "DE89370400440532013000", "1001", "2002", "3003"}

// importBytes imports data under name and fails the test on an error.
func (b *importBundle) importBytes(t *testing.T, name string, data []byte) importer.ImportResult {
	t.Helper()
	res, err := b.im.Import(context.Background(), name, bytes.NewReader(data))
	if err != nil {
		t.Fatalf("import %s: %v", name, err)
	}
	return res
}
