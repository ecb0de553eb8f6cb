package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
)

// minReturns is how many settled payments the demo's bank returns at least:
// beyond those its profile returns by chance, it returns the first
// confirmed ones (by settlement id) itself, as a bank's back office does.
const minReturns = 3

// returns lets the bank's returns happen and waits until settle has booked
// every one: each payment the profile returns comes back ReturnAfterMS
// after it settled; when fewer than minReturns did, the bank returns more
// settled payments now. Then every settlement whose payment came back must
// leave confirmed (returned with its reversal).
//
// A bank that reports returns only on its statements (watched false) is
// not waited for: its statement, imported next, books them.
func (o Options) returns(ctx context.Context, pool *pgxpool.Pool, bank *bankServer, client bankclient.Bank, f fakebank.Faults, watched bool) error {
	window := time.Duration(f.SettleDelayMS+f.ReturnAfterMS)*time.Millisecond + time.Second
	var back []string
	err := o.poll(ctx, "the bank's returns", func() (bool, string, error) {
		ps, err := bankclient.AllPayments(ctx, client)
		if err != nil {
			return false, "", err
		}
		young := 0
		for _, p := range ps {
			if time.Since(p.CreatedAt) < window {
				young++
			}
		}
		back = backAtBank(ps)
		return young == 0, fmt.Sprintf("%d payments younger than %s", young, window), nil
	})
	if err != nil {
		return err
	}
	if len(back) < minReturns {
		// Not one the bank returned already (its settlement may still be
		// confirmed until the return watch asks).
		rows, err := pool.Query(ctx, `SELECT bank_payment_id FROM settlements
			WHERE state = 'confirmed' AND bank_payment_id IS NOT NULL AND coalesce(bank_reference, settlement_id) <> ALL($2)
			ORDER BY settlement_id LIMIT $1`, minReturns-len(back), back)
		if err != nil {
			return fmt.Errorf("error choosing payments to return: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("error choosing payments to return: %w", err)
		}
		for _, id := range ids {
			if err := bank.bank.Return(id, fakebank.DefaultReturnReason); err != nil {
				return fmt.Errorf("error returning payment %s at the bank: %w", id, err)
			}
		}
	}
	if !watched {
		return nil
	}
	return o.poll(ctx, "every return booked", func() (bool, string, error) {
		ps, err := bankclient.AllPayments(ctx, client)
		if err != nil {
			return false, "", err
		}
		var open int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM settlements
			WHERE state = 'confirmed' AND coalesce(bank_reference, settlement_id) = ANY($1)`, backAtBank(ps)).Scan(&open); err != nil {
			return false, "", err
		}
		return open == 0, fmt.Sprintf("%d returns not booked yet", open), nil
	})
}

// poll calls done every 200 ms until it reports true, for at most
// o.Timeout (then errTimeout, saying what was awaited and how far it got).
func (o Options) poll(ctx context.Context, what string, done func() (bool, string, error)) error {
	deadline := time.NewTimer(o.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, state, err := done()
		if err != nil {
			return fmt.Errorf("error waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%w: waiting for %s after %s: %s", errTimeout, what, o.Timeout, state)
		case <-tick.C:
		}
	}
}

// backAtBank returns the references of the payments that came back after
// they settled: returned, or (Stripe) failed with the return's reason,
// which is how that bank reports a paid payout coming back.
func backAtBank(ps []bankclient.Payment) []string {
	refs := []string{}
	for _, p := range ps {
		if p.Status == bankclient.StatusReturned || (p.Status == bankclient.StatusFailed && strings.Contains(p.FailureReason, "returned")) {
			refs = append(refs, p.Reference)
		}
	}
	return refs
}

// printReturns explains what became of the payments that came back.
func (r Report) printReturns(p func(string, ...any)) {
	returned := r.ReturnedByStatus + r.ReturnedByStatement
	if r.Returns == 0 {
		return
	}
	p("  - %d paid payments came back afterwards (a return, as ACH and SEPA returns come days later). settle", r.Returns)
	how := "during the return watch"
	if r.BankWebhooks.Events > 0 {
		how = "(at its webhook, or in the return watch)"
	}
	p("    found %d by asking the bank again %s and %d in the imported statement: each of",
		r.ReturnedByStatus, how, r.ReturnedByStatement)
	p("    those %d settlements moved confirmed → returned, with one reversal movement of the same amount written", returned)
	p("    in the same transaction as the move (%d reversals; settle reconcile show ID tells each story).", r.Reversals)
	if r.FailedReturned > 0 {
		p("    %d came back before settle had seen them settle: failed, with nothing to reverse.", r.FailedReturned)
	}
}

// printBankWebhooks explains the bank's pushes.
func (r Report) printBankWebhooks(p func(string, ...any)) {
	w := r.BankWebhooks
	if w.Events == 0 {
		return
	}
	p("  - The bank pushed each of its %d status changes to the worker as a signed webhook (%d sent twice, some late", w.Events, w.Duplicated)
	p("    and out of order, %d never sent, %d attempts for %d deliveries). A push is a hint, never a fact: settle", w.Lost, w.Attempts, w.Delivered)
	p("    verified its signature and asked the bank at once, so payments settled and returns were booked without")
	p("    waiting for the next scheduled check; a lost or repeated push changes nothing but when settle asks.")
}
