package reconcile

import (
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/resolvertest"
)

type resolverBundle struct {
	db   *dbtest.DB
	bank *fakebank.Bank
	url  string
	r    *Resolver
}

func setupResolver(t *testing.T, faults fakebank.Faults) *resolverBundle {
	t.Helper()
	return setupResolverOpts(t, fakebank.Options{Seed: 7, Faults: faults})
}

func setupResolverOpts(t *testing.T, opts fakebank.Options) *resolverBundle {
	t.Helper()
	db, bank, url, client := resolvertest.Setup(t, opts)
	return &resolverBundle{db: db, bank: bank, url: url, r: &Resolver{
		DB: db.Pool, Bank: client, KeyTTL: time.Hour,
		CheckInterval: 50 * time.Millisecond, MaxCheckInterval: time.Second, Lease: 5 * time.Second,
		Metrics: metrics.NewUnregistered(),
	}}
}
