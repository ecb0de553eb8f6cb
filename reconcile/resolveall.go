package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/settlement"
)

// ResolveResult is what resolving one settlement did: one line of
// `settle reconcile resolve`.
type ResolveResult struct {
	SettlementID        string `json:"settlement_id"`
	From                string `json:"from,omitempty"`
	To                  string `json:"to,omitempty"`
	Action              string `json:"action,omitempty"`
	Reason              string `json:"reason,omitempty"`
	NeedsInvestigation  bool   `json:"needs_investigation"`
	InvestigationReason string `json:"investigation_reason,omitempty"`
	// Error says why it could not be resolved ("no such settlement", or
	// the error that stopped the run).
	Error string `json:"error,omitempty"`
}

// ResolveOne resolves settlement id now (Resolve) and reports what it did.
// A settlement that does not exist is a result whose Error says so, with a
// nil error; any other error is returned with the result that records it.
func (r *Resolver) ResolveOne(ctx context.Context, id string) (ResolveResult, error) {
	res := ResolveResult{SettlementID: id}
	out, err := r.Resolve(ctx, id, nil)
	switch {
	case errors.Is(err, settlement.ErrNotFound):
		res.Error = "no such settlement"
		return res, nil
	case err != nil:
		res.Error = err.Error()
		return res, err
	}
	res.From, res.To, res.Action, res.Reason = string(out.From), string(out.State), string(out.Action), out.Decision.Reason
	if out.LostRace && res.Reason == "" {
		res.Reason = "another process moved it first"
	}
	res.NeedsInvestigation, res.InvestigationReason = out.FlagReason != "", out.FlagReason
	return res, nil
}

// openPage is how many open settlements ResolveOpen reads at a time.
const openPage = 200

// ResolveOpen resolves every settlement that is not terminal, one after the
// other in id order, and hands each result to fn. It reads them from db in
// short pages, so no transaction stays open while the bank is asked. It
// reads only the settlements of its bank (BankName, when set). It
// stops at the first error (fn's, or one ResolveOne returns, after handing
// fn that result).
func (r *Resolver) ResolveOpen(ctx context.Context, db Querier, fn func(ResolveResult) error) error {
	after := ""
	for {
		rows, err := db.Query(ctx, `SELECT settlement_id FROM settlements
			WHERE state IN ('pending', 'sent', 'uncertain') AND settlement_id > $1
			  AND ($3 = '' OR bank = $3)
			ORDER BY settlement_id LIMIT $2`, after, openPage, r.BankName)
		if err != nil {
			return fmt.Errorf("error listing open settlements: %w", err)
		}
		page, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("error listing open settlements: %w", err)
		}
		for _, id := range page {
			res, err := r.ResolveOne(ctx, id)
			if ferr := fn(res); ferr != nil {
				return ferr
			}
			if err != nil {
				return err
			}
		}
		if len(page) < openPage {
			return nil
		}
		after = page[len(page)-1]
	}
}
