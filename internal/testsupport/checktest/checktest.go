// Package checktest fails a test on any broken exactly-once invariant: it
// runs the one checker, audit.CheckInvariants, with the bank's
// statement read for it. Nothing in settle's binaries may import it.
package checktest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/inspect"
)

// CheckInvariants runs the one exactly-once checker
// (audit.CheckInvariants) and fails t with every violation. When
// bankURL is not empty it reads that bank's statement first and checks the
// ledger against it (e.CheckBank, e.Payments).
func CheckInvariants(t testing.TB, db inspect.Querier, bankURL string, e audit.Expect) {
	t.Helper()
	var client bankclient.Bank
	if bankURL != "" {
		c, err := settle.New(bankURL, bankclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		client = c
	}
	CheckInvariantsAt(t, db, client, e)
}

// CheckInvariantsAt is CheckInvariants reading the statement through
// client, a connector's Bank (nil: the ledger alone).
func CheckInvariantsAt(t testing.TB, db inspect.Querier, client bankclient.Bank, e audit.Expect) {
	t.Helper()
	ctx := context.Background()
	if client != nil {
		var err error
		if e.Payments, err = readBooks(ctx, client); err != nil {
			t.Fatalf("error reading the bank's statement: %v", err)
		}
		e.CheckBank = true
	}
	v, err := audit.CheckInvariants(ctx, db, e)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) > 0 {
		t.Errorf("%d invariant violation(s):\n  %s", len(v), strings.Join(v, "\n  "))
	}
}

// readBooks reads the bank's statement, asking again while the bank gives
// no definitive answer: a test's bank answers 5xx on purpose (its status
// and list calls too), and one read of many pages, each tried three times,
// fails now and then. The read asks nothing to be done, so it is asked
// again, for up to two minutes.
func readBooks(ctx context.Context, client bankclient.Bank) ([]bankclient.Payment, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ps, err := bankclient.AllPayments(ctx, client)
		var ae *bankclient.AmbiguousError
		if err == nil || !errors.As(err, &ae) || time.Now().After(deadline) {
			return ps, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Amounts returns the expectation that each settlement of acked exists and
// holds that amount (the amount it was acknowledged with).
func Amounts(acked map[string]int64) map[string]audit.Payload {
	first := make(map[string]audit.Payload, len(acked))
	for id, amount := range acked {
		first[id] = audit.Payload{AmountCents: amount}
	}
	return first
}
