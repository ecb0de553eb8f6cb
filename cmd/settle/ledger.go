package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/ledger"
	"github.com/settle/settle/settlement"
)

const ledgerDescription = `
The double-entry ledger (DESIGN.md section 20): accounts, postings and the
holds of payouts in flight, in integer minor units. A payout holds its
amount at intake, posts it when the bank confirms it (the account to the
bank's clearing account, settle:clearing:BANK), releases the hold when it
fails, and posts it back when it is returned. With settle worker
--funds-check a payout its account's available balance (posted minus held)
does not cover is refused.

  settle ledger credit ACCOUNT AMOUNT CURRENCY --ref REF
      bring AMOUNT minor units of CURRENCY into ACCOUNT (from
      settle:funding), once per REF: the same REF again is a no-op, with
      another account, amount or currency it is refused (exit 1)
  settle ledger balance [ACCOUNT] [--json]
      posted, held and available balance of every account, or of one
  settle ledger postings [--account A] [--settlement ID] [--currency C]
                         [--after ID] [--limit N] [--json]
      the postings, in the order they were written`

func cmdLedger(ctx context.Context, args []string, s Stdio) int {
	return (&ledgerCmd{s: s}).run(ctx, args)
}

// ledgerCmd carries what the forms share. dbURL, when set, is used
// instead of DATABASE_URL or the embedded default (tests set it).
type ledgerCmd struct {
	s     Stdio
	dbURL string
}

func (c *ledgerCmd) run(ctx context.Context, args []string) int {
	return runForms(ctx, c.s, "ledger", ledgerDescription, args, []subForm{
		{"credit", c.credit}, {"balance", c.balance}, {"postings", c.postings},
	})
}

func (c *ledgerCmd) open(ctx context.Context, form string) *pgxpool.Pool {
	pool, err := connect(ctx, c.s, c.dbURL, database.PoolOptions{MaxConns: 2, ApplicationName: "settle ledger"})
	if err != nil {
		fmt.Fprintf(c.s.Err, "settle ledger %s: %v\n", form, err)
	}
	return pool
}

func (c *ledgerCmd) credit(ctx context.Context, args []string) int {
	s := c.s
	fs := newFlagSet("ledger credit", "ACCOUNT AMOUNT CURRENCY --ref REF [--json]", `
Brings AMOUNT (an integer number of CURRENCY's minor units: 1050 EUR is
10.50 EUR) into ACCOUNT, posted from settle:funding, once per REF (the
reference of the money's arrival, such as the bank's entry reference). The
same REF again changes nothing (exit 0, "already credited"); the same REF
with another account, amount or currency is refused and nothing is posted
(exit 1). Exit 2 when it could not run.`, s)
	ref := fs.String("ref", "", "the credit's reference (required): it is posted once")
	asJSON := fs.Bool("json", false, `print {"posting":{"id","kind","ref","debit_account","credit_account","amount_minor","currency","created_at"},"replayed":bool}`)
	pos, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(pos) != 3 {
		fmt.Fprintf(s.Err, "settle ledger credit: want ACCOUNT AMOUNT CURRENCY, got %q (see settle ledger credit --help)\n", pos)
		return exitError
	}
	amount, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || amount <= 0 {
		fmt.Fprintf(s.Err, "settle ledger credit: AMOUNT %q is not a positive integer number of minor units\n", pos[1])
		return exitError
	}
	if *ref == "" {
		fmt.Fprintln(s.Err, "settle ledger credit: --ref is required: a credit is posted once per reference")
		return exitError
	}
	pool := c.open(ctx, "credit")
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	res, err := ledger.Credit(ctx, pool, ledger.CreditRequest{AccountID: pos[0], AmountMinor: amount, Currency: pos[2], Ref: *ref})
	switch {
	case errors.Is(err, ledger.ErrRefMismatch):
		fmt.Fprintf(s.Err, "settle ledger credit: refused, nothing posted: %v\n", err)
		return exitFindings
	case err != nil:
		fmt.Fprintf(s.Err, "settle ledger credit: %v\n", err)
		return exitError
	}
	if *asJSON {
		return c.writeJSON("credit", map[string]any{"posting": res.Posting, "replayed": res.Replayed})
	}
	p := res.Posting
	if res.Replayed {
		fmt.Fprintf(s.Out, "already credited: ref %s, %s to %s (posting %d, %s)\n", p.Ref, money(p.AmountMinor, p.Currency),
			p.CreditAccount, p.ID, p.CreatedAt.UTC().Format(time.RFC3339))
		return exitOK
	}
	fmt.Fprintf(s.Out, "credited %s to %s: ref %s, posting %d\n", money(p.AmountMinor, p.Currency), p.CreditAccount, p.Ref, p.ID)
	return exitOK
}

func (c *ledgerCmd) balance(ctx context.Context, args []string) int {
	s := c.s
	fs := newFlagSet("ledger balance", "[ACCOUNT] [--json]", `
Prints the balance of every account in every currency, or of ACCOUNT:
posted (the sum of its postings, credits minus debits), held (the amounts
of its payouts in flight) and available (posted minus held), in minor units.
The system accounts are settle:funding (where credits come from) and
settle:clearing:BANK (where confirmed payouts go); in each currency the
balances of all accounts sum to zero. Exit 0 when it ran.`, s)
	asJSON := fs.Bool("json", false, `print {"accounts":[{"account_id","currency","kind","posted_minor","held_minor","available_minor"}]}`)
	pos, code, done := parseAtMost(fs, args, 1)
	if done {
		return code
	}
	account := ""
	if len(pos) == 1 {
		account = pos[0]
	}
	bs, ok := query(ctx, fs, c.open, func(pool *pgxpool.Pool) ([]ledger.Balance, error) { return ledger.Balances(ctx, pool, account) })
	if !ok {
		return exitError
	}
	if bs == nil {
		bs = []ledger.Balance{}
	}
	if *asJSON {
		return c.writeJSON("balance", map[string]any{"accounts": bs})
	}
	out := bufio.NewWriter(s.Out)
	defer out.Flush()
	tb := newBlockTable(out, "ACCOUNT\tCURRENCY\tPOSTED\tHELD\tAVAILABLE")
	for _, b := range bs {
		_ = tb.row("%s\t%s\t%s\t%s\t%s\n", b.AccountID, b.Currency, amountOf(b.Posted, b.Currency), amountOf(b.Held, b.Currency), amountOf(b.Available, b.Currency))
	}
	if err := tb.flush(); err != nil {
		fmt.Fprintf(s.Err, "settle ledger balance: %v\n", err)
		return exitError
	}
	if len(bs) == 0 && account != "" {
		fmt.Fprintf(out, "no account %s\n", account)
	}
	return exitOK
}

func (c *ledgerCmd) postings(ctx context.Context, args []string) int {
	s := c.s
	fs := newFlagSet("ledger postings", "[flags]", `
Lists the postings in the order they were written: each moves an amount
from its debit account to its credit account. A payout's is written when
the bank confirms it, its reversal when the bank returns it, a credit by
settle ledger credit. Page with --after (the last id printed). Exit 0 when
it ran.`, s)
	var f ledger.PostingFilter
	fs.StringVar(&f.AccountID, "account", "", "only postings debiting or crediting this account")
	fs.StringVar(&f.SettlementID, "settlement", "", "only this settlement's postings")
	fs.StringVar(&f.Currency, "currency", "", "only postings in this currency")
	fs.Int64Var(&f.AfterID, "after", 0, "only postings with a greater id (the next page)")
	fs.IntVar(&f.Limit, "limit", ledger.DefaultPostingLimit, "at most this many postings")
	asJSON := fs.Bool("json", false, `print {"postings":[{"id","settlement_id","kind","ref","debit_account","credit_account","amount_minor","currency","created_at"}],"count":n}`)
	_, code, done := parseAtMost(fs, args, 0)
	if done {
		return code
	}
	ps, ok := query(ctx, fs, c.open, func(pool *pgxpool.Pool) ([]ledger.Posting, error) { return ledger.Postings(ctx, pool, f) })
	if !ok {
		return exitError
	}
	if ps == nil {
		ps = []ledger.Posting{}
	}
	if *asJSON {
		return c.writeJSON("postings", map[string]any{"postings": ps, "count": len(ps)})
	}
	out := bufio.NewWriter(s.Out)
	defer out.Flush()
	tb := newBlockTable(out, "ID\tCREATED\tKIND\tSETTLEMENT/REF\tDEBIT\tCREDIT\tAMOUNT")
	for _, p := range ps {
		what := p.SettlementID
		if what == "" {
			what = p.Ref
		}
		_ = tb.row("%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.CreatedAt.UTC().Format(time.RFC3339), p.Kind, what,
			p.DebitAccount, p.CreditAccount, money(p.AmountMinor, p.Currency))
	}
	if err := tb.flush(); err != nil {
		fmt.Fprintf(s.Err, "settle ledger postings: %v\n", err)
		return exitError
	}
	fmt.Fprintf(out, "%d posting(s)\n", len(ps))
	return exitOK
}

func (c *ledgerCmd) writeJSON(form string, v any) int {
	if err := json.NewEncoder(c.s.Out).Encode(v); err != nil {
		fmt.Fprintf(c.s.Err, "settle ledger %s: %v\n", form, err)
		return exitError
	}
	return exitOK
}

// amountOf writes minor units in the currency's major units (ISO 4217
// exponent), with integer arithmetic only: 123456 EUR is "1234.56". An
// unknown currency is written in minor units.
func amountOf(minor int64, currency string) string {
	c, err := settlement.LookupCurrency(currency)
	if err != nil || c.Exponent == 0 {
		return strconv.FormatInt(minor, 10)
	}
	sign := ""
	u := uint64(minor)
	if minor < 0 {
		sign, u = "-", uint64(-minor) // -MinInt64 wraps to its own magnitude as uint64
	}
	unit := uint64(1)
	for range c.Exponent {
		unit *= 10
	}
	return fmt.Sprintf("%s%d.%0*d", sign, u/unit, c.Exponent, u%unit)
}

// money is an amount with its currency.
func money(minor int64, currency string) string { return amountOf(minor, currency) + " " + currency }
