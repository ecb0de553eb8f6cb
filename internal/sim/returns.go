package sim

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/statement/importer"
)

// setReturns draws the bank's return profile (none for a quarter of the
// seeds unless cfg.Returns) and carries out a return plant's setup.
func (r *run) setReturns(ctx context.Context) error {
	if err := r.setupPlant(ctx); err != nil {
		return err
	}
	var (
		name string
		rp   Returns
	)
	k := r.rng.IntN(4)
	if k == 0 && r.cfg.Returns {
		k = 1 + r.rng.IntN(3)
	}
	switch k {
	case 0:
		name = "none"
	case 1:
		name, rp = "some", Returns{Rate: 0.3, Partial: 0.15, AfterMax: returnAfterMax}
	case 2:
		// Back within minutes: often before the engine saw the payment
		// settle.
		name, rp = "early", Returns{Rate: 0.6, Partial: 0.2, AfterMax: 10 * time.Minute}
	default:
		name, rp = "most", Returns{Rate: 0.9, Partial: 0.3, AfterMax: time.Duration(r.rng.Int64N(int64(returnAfterMax)))}
	}
	r.bank.SetReturns(rp)
	r.tracef("returns %s %+v (return watch %s)", name, rp, returnWatch)
	return nil
}

// setupPlant prepares the database for a return plant: the engine of
// "second-reversal" writes each reversal twice, and without the UNIQUE
// that refuses the second, only the checker stands between it and the
// ledger.
func (r *run) setupPlant(ctx context.Context) error {
	if r.cfg.Plant != "second-reversal" {
		return nil
	}
	if _, err := r.pool.Exec(ctx, `ALTER TABLE ledger_movements
		DROP CONSTRAINT IF EXISTS ledger_movements_settlement_id_kind_key`); err != nil {
		return fmt.Errorf("error planting second-reversal: %w", err)
	}
	return nil
}

// Returning reports whether the bank returns payments.
func (b *Bank) Returning() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.returns.Rate > 0
}

// webhookFn is a webhook from the bank about settlement idx's payment: a
// hint (its reference, the bank's payment id, our key where the bank knows
// it) that the engine turns into a status check of the settlement it names
// (reconcile.FindByHint, then Resolve), as internal/webhook does.
func (r *run) webhookFn(a *actor, idx int, out *string) (func(context.Context), string) {
	r.res.Stats.Webhooks++
	ref := r.events[idx].orig.SettlementID
	h := bankclient.Hint{Reference: ref}
	for _, p := range r.bank.Payments() {
		if p.Reference == ref {
			h.PaymentID = p.ID
			if r.caps.LookupByKey {
				h.Key = p.IdempotencyKey
			}
		}
	}
	desc := fmt.Sprintf("webhook %s %s", ref, h.PaymentID)
	rs := r.resolver(a)
	return func(ctx context.Context) {
		id, found, err := reconcile.FindByHint(ctx, actorDB{a: a, pool: r.pool}, h)
		switch {
		case err != nil:
			*out = "error: " + err.Error()
			return
		case !found:
			*out = "names no settlement"
			return
		}
		o, err := rs.Resolve(ctx, id, nil)
		if err != nil {
			*out = "error: " + err.Error()
			return
		}
		*out = fmt.Sprintf("%s → %s done=%v lost_race=%v flag=%q", o.Action, o.State, o.Done, o.LostRace, o.Decision.Flag)
	}, desc
}

// statementFn is the import of a statement from the bank: most often a new
// notification of the payouts and returns booked so far (all, or some), now
// and then one imported before, again. A payout line resolves a settlement
// whose answer was lost (Resolver.ApplyPaid); a return line starts the
// return flow. The file is stored in one transaction
// of its own (not interleaved); the returns it reports are then booked
// through Resolver.ApplyReturn by this actor, interleaved with the others.
func (r *run) statementFn(a *actor, out *string) (func(context.Context), string) {
	r.res.Stats.Statements++
	var (
		file []byte
		desc string
	)
	paid, rets := r.bank.PaymentsBooked(), r.bank.ReturnsBooked()
	switch {
	case len(r.statements) > 0 && (len(paid) == 0 || r.rng.IntN(3) == 0):
		n := r.rng.IntN(len(r.statements))
		file, desc = r.statements[n], fmt.Sprintf("statement %d again", n+1)
	case len(paid) == 0:
		return func(context.Context) { *out = "nothing to report" }, "statement (nothing booked yet)"
	default:
		all := r.rng.IntN(2) == 0
		some := func(es []ReturnEntry) []ReturnEntry {
			var out []ReturnEntry
			for _, e := range es {
				if all || r.rng.IntN(3) != 0 {
					out = append(out, e)
				}
			}
			return out
		}
		somePaid, someRets := some(paid), some(rets)
		file = r.statementFile(somePaid, someRets)
		desc = fmt.Sprintf("statement %d of %d payout(s) and %d return(s)", len(r.statements), len(somePaid), len(someRets))
	}
	return r.importFn(a, file, out), desc
}

// statementFile writes paid and rets as the bank's next notification and
// keeps it.
func (r *run) statementFile(paid, rets []ReturnEntry) []byte {
	reversal := make([]bool, len(rets))
	for i := range reversal {
		reversal[i] = r.rng.IntN(2) == 0
	}
	id := fmt.Sprintf("SIM-%d-%d", r.cfg.Seed, len(r.statements)+1)
	file := camt054(id, r.clock.Now(), paid, rets, func(i int) bool { return reversal[i] })
	r.statements = append(r.statements, file)
	return file
}

// importFn imports file through importer.StatementImporter, its returns
// booked by actor a.
func (r *run) importFn(a *actor, file []byte, out *string) func(context.Context) {
	im := &importer.StatementImporter{DB: r.pool, Returns: r.resolver(a), Accounts: []string{simAccount}}
	name := fmt.Sprintf("sim-%d.camt054.xml", len(r.statements))
	return func(ctx context.Context) {
		res, err := im.Import(ctx, name, bytes.NewReader(file))
		if err != nil {
			*out = "error: " + err.Error()
			return
		}
		*out = fmt.Sprintf("imported=%v lines=%d matched=%d returns=%d", res.Imported, res.Lines, res.Matched, res.Returns)
	}
}

// recoverReturns ends the run's returns: the clock moves past the last
// return the bank planned and the bank's end-of-day statement of every
// return is imported, as the operator's daily import does; it is the
// only source of a return the status API never reports (after the return
// watch, a partial return, a bank that reports returns on statements
// only).
func (r *run) recoverReturns(ctx context.Context) error {
	r.clock.Set(r.bank.LastReturnAt())
	rets := r.bank.ReturnsBooked()
	if len(rets) == 0 {
		return nil
	}
	// Returns only: payout lines would also resolve what the schedule
	// left flagged for a human (Resolver.ApplyPaid); the schedule's own
	// statements carry them.
	file := r.statementFile(nil, rets)
	return r.single(ctx, "end of day", func(a *actor, out *string) (func(context.Context), string) {
		return r.importFn(a, file, out), fmt.Sprintf("statement of all %d return(s)", len(rets))
	})
}
