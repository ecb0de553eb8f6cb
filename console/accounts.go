package console

import (
	"net/http"
	"strconv"

	"github.com/settle/settle/ledger"
)

// ---- ledger accounts ----

// accountsPage is the ledger's accounts (DESIGN.md section 20) and, with
// Account set, that account's open holds and postings.
type accountsPage struct {
	Balances []ledger.Balance
	// Account is the account shown ("" for the list of all).
	Account  string
	Holds    []ledger.Hold
	Postings []ledger.Posting
	// After and Next page the account's postings.
	After, Next int64
}

func (accountsPage) title() string { return "Accounts" }
func (accountsPage) nav() string   { return "accounts" }

// Debit reports whether posting p takes money from the account shown.
func (a accountsPage) Debit(p ledger.Posting) bool { return p.DebitAccount == a.Account }

func (c *Console) accounts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := accountsPage{Account: q.Get("account")}
	if s := q.Get("after"); s != "" {
		var err error
		if p.After, err = strconv.ParseInt(s, 10, 64); err != nil || p.After < 0 {
			c.render(w, r, http.StatusBadRequest, "error", sessionOf(r), errorPage{Title: "Bad address", Message: "The page cursor is not a number."})
			return
		}
	}
	ctx := r.Context()
	var err error
	if p.Balances, err = ledger.Balances(ctx, c.cfg.DB, p.Account); err != nil {
		c.fail(w, r, err)
		return
	}
	if p.Account != "" {
		if len(p.Balances) == 0 {
			c.render(w, r, http.StatusNotFound, "error", sessionOf(r), errorPage{Title: "No such account", Message: "The ledger has no account " + p.Account + "."})
			return
		}
		if p.Holds, err = ledger.OpenHolds(ctx, c.cfg.DB, p.Account, PageSize); err != nil {
			c.fail(w, r, err)
			return
		}
		if p.Postings, err = ledger.Postings(ctx, c.cfg.DB, ledger.PostingFilter{AccountID: p.Account, AfterID: p.After, Limit: PageSize + 1}); err != nil {
			c.fail(w, r, err)
			return
		}
		if len(p.Postings) > PageSize {
			p.Postings = p.Postings[:PageSize]
			p.Next = p.Postings[PageSize-1].ID
		}
	}
	c.render(w, r, http.StatusOK, "accounts", sessionOf(r), p)
}
