package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/statement/importer"
)

// statementAccounts are the accounts the demo's bank statements are for,
// the statement accounts the demo declares when it imports them: the
// settle profile books each payout on the event's account, the stripe
// profile on the platform's balance, the obie profile on the customer's
// account.
var statementAccounts = append(append([]string{}, Accounts...), fakebank.StripeBalanceAccount, fakebank.OBIEDebtorAccount)

// maxStatementBytes bounds a statement file the demo reads from its bank.
const maxStatementBytes = 256 << 20

// importStatements ends the demo as a bank's day ends: it fetches the
// bank's camt.053 of every day the demo ran through (usually one) from the
// in-process fakebank over HTTP, imports each (settle statement import),
// and reconciles the ledger against the imported statements (settle
// reconcile bank --statements).
func (r *Report) importStatements(ctx context.Context, pool *pgxpool.Pool, bankURL string, start time.Time) error {
	client := &http.Client{Timeout: time.Minute}
	im := &importer.StatementImporter{DB: pool, Returns: &reconcile.Resolver{DB: pool}, Accounts: statementAccounts}
	end := time.Now().UTC()
	for day := start.UTC().Truncate(24 * time.Hour); !day.After(end); day = day.AddDate(0, 0, 1) {
		date := day.Format(time.DateOnly)
		body, found, err := fetchStatement(ctx, client, bankURL+"/v1/statements/"+date)
		if err != nil {
			return err
		}
		if !found {
			continue // no booking by that day: nothing was paid
		}
		res, err := im.Import(ctx, fmt.Sprintf("fakebank-%s.camt.053.xml", date), bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("error importing the bank's statement of %s: %w", date, err)
		}
		r.StatementDays = append(r.StatementDays, date)
		r.Imports = append(r.Imports, res)
	}
	var rep audit.BankReport
	counts, err := (&audit.StatementReporter{DB: pool}).Run(ctx, &rep)
	switch {
	case errors.Is(err, audit.ErrNoStatements):
		return nil // check says whether that is right
	case err != nil:
		return fmt.Errorf("error reconciling with the bank's statements: %w", err)
	}
	r.StatementBank = counts
	return nil
}

// fetchStatement GETs one statement file as camt.053; found is false on 404.
func fetchStatement(ctx context.Context, client *http.Client, url string) (body []byte, found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Accept", fakebank.FormatCamt053.MediaType())
	res, err := client.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("error fetching the bank's statement: %w", err)
	}
	defer res.Body.Close()
	body, err = io.ReadAll(io.LimitReader(res.Body, maxStatementBytes))
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("error reading the bank's statement: %w", err)
	case res.StatusCode == http.StatusNotFound:
		return nil, false, nil
	case res.StatusCode != http.StatusOK:
		return nil, false, fmt.Errorf("the bank answered %s to GET %s: %s", res.Status, url, bytes.TrimSpace(body))
	}
	return body, true, nil
}

// checkStatements adds the violations of the statement reconciliation:
// every confirmed settlement on a statement, matched, every returned one
// returned there too, nothing else.
func (r *Report) checkStatements(confirmed, returned int64) {
	fail := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	if len(r.Imports) == 0 {
		if confirmed > 0 {
			fail("the bank has no statement for the %d confirmed settlements", confirmed)
		}
		return
	}
	for _, im := range r.Imports {
		if !im.Imported {
			fail("%s was imported before the demo (its database is fresh)", im.File)
		}
	}
	c := r.StatementBank
	if n := c.Discrepancies(); n != 0 {
		fail("the ledger and the bank's statements disagree on %d items (run settle reconcile bank --statements)", n)
	}
	if m := c.ByClass[audit.ClassMatched]; m != confirmed {
		fail("%d settlements matched on the bank's statements, %d confirmed", m, confirmed)
	}
	if m := c.ByClass[audit.ClassReturnedAgreed]; m != returned {
		fail("%d settlements returned on the bank's statements, %d returned here", m, returned)
	}
	if n := c.ByClass[audit.ClassUnresolved]; n != 0 {
		fail("%d settlements unresolved at the statement reconciliation", n)
	}
}

// printStatements writes the statement import and its reconciliation.
func (r Report) printStatements(p func(string, ...any)) {
	if len(r.Imports) == 0 {
		return
	}
	p("settle statement import (the bank's camt.053 of %s, fetched from GET /v1/statements/{date})", strings.Join(r.StatementDays, ", "))
	for _, im := range r.Imports {
		what := "imported"
		if !im.Imported {
			what = "already imported"
		}
		p("  %s: %s, %d statements, %d entries, %d lines: %d matched, %d unmatched, %d returns, %d statements that do not balance",
			im.File, what, im.Statements, im.Entries, im.Lines, im.Matched, im.Unmatched, im.Returns, im.Unbalanced)
	}
	c := r.StatementBank
	p("settle reconcile bank --statements (ledger vs the imported statements, %d lines)", c.StatementLines)
	var parts []string
	for _, cl := range append([]audit.Class{audit.ClassMatched, audit.ClassFailedAgreed, audit.ClassReturnedAgreed},
		audit.StatementBreakClasses...) {
		parts = append(parts, fmt.Sprintf("%s %d", cl, c.ByClass[cl]))
	}
	parts = append(parts, fmt.Sprintf("%s %d", audit.ClassUnmatchedEntries, c.ByClass[audit.ClassUnmatchedEntries]),
		fmt.Sprintf("%s %d", audit.ClassBalanceBreaks, c.ByClass[audit.ClassBalanceBreaks]))
	p("  %s", strings.Join(parts[:3], "  "))
	p("  %s", strings.Join(parts[3:], "  "))
	p("")
}
