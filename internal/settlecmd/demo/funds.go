package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/ledger"
)

// overdraftID is the settlement the funds check refuses.
const overdraftID = "demo-overdraft"

// FundsReport is what the funds check did (Options.FundsCheck): the
// credits that funded each account with exactly its payouts, and the one
// payout the demo sends over its account's balance, refused.
type FundsReport struct {
	On bool
	// Credits is the number of accounts credited, Credited their sum.
	Credits  int
	Credited map[string]int64 // by currency
	// The overdraft: its account, amount and currency, the balance it was
	// refused against, and the answers to it and to its redelivery.
	Account, Currency, Beneficiary string
	Amount, Available, Holds       int64
	Status, ReplayStatus           int
	ProblemType, ReplayProblem     string
}

// fund credits every account of the stream, in each currency, with the sum
// of its first deliveries' amounts: enough for all of them, not a unit
// more. The overdraft is sent later from the first account.
func (r *Report) fund(ctx context.Context, pool *pgxpool.Pool, st Stream) error {
	type key struct{ account, currency string }
	sums := map[key]int64{}
	beneficiary := map[key]string{}
	for _, line := range st.First {
		var ev intake.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("error reading the demo's events: %w", err)
		}
		k := key{ev.AccountID, ev.Currency}
		sums[k] += ev.AmountCents
		if _, ok := beneficiary[k]; !ok {
			beneficiary[k] = ev.Beneficiary
		}
	}
	keys := make([]key, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].account < keys[j].account || keys[i].account == keys[j].account && keys[i].currency < keys[j].currency
	})
	r.Funds = FundsReport{On: true, Credited: map[string]int64{}}
	for _, k := range keys {
		ref := "demo-funding:" + k.account + ":" + k.currency
		if _, err := ledger.Credit(ctx, pool, ledger.CreditRequest{AccountID: k.account, AmountMinor: sums[k], Currency: k.currency, Ref: ref}); err != nil {
			return fmt.Errorf("error funding account %s: %w", k.account, err)
		}
		r.Funds.Credits++
		r.Funds.Credited[k.currency] += sums[k]
	}
	if len(keys) > 0 {
		// More than the account was ever credited: whatever its payouts
		// did, its available balance cannot cover it.
		r.Funds.Account, r.Funds.Currency, r.Funds.Amount = keys[0].account, keys[0].currency, sums[keys[0]]+1
		r.Funds.Beneficiary = beneficiary[keys[0]]
	}
	return nil
}

// overdraft sends the payout over its account's balance, and again: both
// must be refused 422 insufficient-funds, the second from the receipt.
func (r *Report) overdraft(ctx context.Context, pool *pgxpool.Pool, workerURL, token string) error {
	f := &r.Funds
	if f.Account == "" {
		return nil
	}
	bs, err := ledger.Balances(ctx, pool, f.Account)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if b.Currency == f.Currency {
			f.Available, f.Holds = b.Available, b.Held
		}
	}
	ev := intake.Event{SettlementID: overdraftID, AccountID: f.Account, AmountCents: f.Amount, Currency: f.Currency,
		Beneficiary: f.Beneficiary, EventID: "overdraft-1", OccurredAt: time.Now()}
	if f.Status, f.ProblemType, err = postEvent(ctx, workerURL, token, ev); err != nil {
		return err
	}
	ev.EventID = "overdraft-2"
	f.ReplayStatus, f.ReplayProblem, err = postEvent(ctx, workerURL, token, ev)
	return err
}

// postEvent posts ev to the worker's API and returns the status and the
// problem type of the answer.
func postEvent(ctx context.Context, url, token string, ev intake.Event) (int, string, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/settlements", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("error sending the overdraft: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return 0, "", fmt.Errorf("error reading the answer to the overdraft: %w", err)
	}
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &p)
	return resp.StatusCode, p.Type, nil
}

// checkFunds adds the funds check's violations: the overdraft and its
// redelivery must both have been refused for want of funds.
func (r *Report) checkFunds() {
	f := r.Funds
	if !f.On || f.Account == "" {
		return
	}
	refused := func(status int, typ string) bool {
		return status == http.StatusUnprocessableEntity && strings.HasSuffix(typ, "insufficient-funds")
	}
	if !refused(f.Status, f.ProblemType) || !refused(f.ReplayStatus, f.ReplayProblem) {
		r.Violations = append(r.Violations, fmt.Sprintf("the overdraft %s was answered %d %s and again %d %s; want 422 insufficient-funds twice",
			overdraftID, f.Status, f.ProblemType, f.ReplayStatus, f.ReplayProblem))
	}
}

// printFunds prints what the funds check did.
func (r Report) printFunds(p func(string, ...any)) {
	f := r.Funds
	if !f.On {
		return
	}
	p("Funds check (settle worker --funds-check)")
	currencies := make([]string, 0, len(f.Credited))
	for c := range f.Credited {
		currencies = append(currencies, c)
	}
	sort.Strings(currencies)
	var sums []string
	for _, c := range currencies {
		sums = append(sums, fmt.Sprintf("%d %s", f.Credited[c], c))
	}
	p("  %d accounts were credited with exactly their payouts first (settle ledger credit; %s in minor units);", f.Credits, strings.Join(sums, ", "))
	p("  every payout was held at intake, posted when the bank confirmed it, released when it failed.")
	if f.Account != "" {
		p("  Then a payout of %d %s from %s, more than it was ever credited (available %d, held %d):",
			f.Amount, f.Currency, f.Account, f.Available, f.Holds)
		p("    answered %d %s, nothing held; its redelivery: %d %s (the refusal is its receipt's outcome)",
			f.Status, f.ProblemType, f.ReplayStatus, f.ReplayProblem)
	}
	p("  settle ledger balance shows every account; the ledger balances: %v, %d mismatch(es).",
		r.Summary.Ledger.Balanced, len(r.Summary.Ledger.Mismatches))
	p("")
}
