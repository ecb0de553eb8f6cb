package console

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"strings"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/database/dberr"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
)

// CallbackPath is the redirect endpoint of the account holders'
// authorisations (UK Open Banking's authorization code grant): their bank
// sends their browser here with a code and the link's state. It is the one
// page of the console that takes no operator credentials: the state, which
// only the link carries, is what authenticates it, and a redirect only
// stores the account holder's token and has the settlement checked.
const CallbackPath = Prefix + "authorise/callback"

// authorisationRow is one authorisation awaited, with its link.
type authorisationRow struct {
	reconcile.Authorisation
	Link, LinkError string
}

type authorisationsPage struct {
	Rows []authorisationRow
}

func (authorisationsPage) title() string { return "Authorisations" }
func (authorisationsPage) nav() string   { return "authorisations" }

// redirectURI is the callback's URL as the account holder's browser
// reaches it: PublicURL, else the address r came to.
func (c *Console) redirectURI(r *http.Request) string {
	if c.cfg.PublicURL != "" {
		return strings.TrimSuffix(c.cfg.PublicURL, "/") + CallbackPath
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + CallbackPath
}

// resolverOfBank is the Resolver of bank, or the worker's first.
func (c *Console) resolverOfBank(bank string) *reconcile.Resolver {
	if r := c.cfg.Resolvers[bank]; r != nil {
		return r
	}
	return c.cfg.Resolver
}

func (c *Console) authorisations(w http.ResponseWriter, r *http.Request) {
	as, err := reconcile.AwaitingAuthorisations(r.Context(), c.cfg.DB, PageSize)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	redirect := c.redirectURI(r)
	p := authorisationsPage{Rows: make([]authorisationRow, len(as))}
	for i, a := range as {
		p.Rows[i].Authorisation = a
		link, err := c.resolverOfBank(a.Bank).AuthorisationLink(a, redirect)
		if err != nil {
			p.Rows[i].LinkError = "no link: " + err.Error()
			continue
		}
		p.Rows[i].Link = link
	}
	c.render(w, r, http.StatusOK, "authorisations", sessionOf(r), p)
}

// callbackView is what the account holder reads once back.
type callbackView struct {
	Title, Message string
}

// callbackPage is the page the account holder lands on: on its own, with
// nothing of the console's.
var callbackPage = template.Must(template.New("callback").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><title>{{.Title}}</title></head>
<body><h1 id="title">{{.Title}}</h1><p id="message">{{.Message}}</p></body></html>
`))

func (c *Console) callbackAnswer(w http.ResponseWriter, status int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = callbackPage.Execute(w, callbackView{Title: title, Message: msg})
}

// callback is the account holder's return from their bank (RFC 6749
// section 4.1.2): code and state, or error and state.
func (c *Console) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	ctx, cancel := context.WithTimeout(r.Context(), ResolveTimeout)
	defer cancel()
	bank, err := reconcile.AuthorisationBank(ctx, c.cfg.DB, state)
	switch {
	case errors.Is(err, reconcile.ErrUnknownAuthorisation):
		c.log.Warn("console: redirect with a state settle never issued", "remote", r.RemoteAddr)
		c.callbackAnswer(w, http.StatusBadRequest, "Unknown authorisation", "This page does not belong to an authorisation we asked for. Nothing was done.")
		return
	case err != nil:
		c.callbackFailed(w, err, "console: error reading an authorisation")
		return
	}
	res := c.resolverOfBank(bank)
	var rd reconcile.Redirect
	if e := q.Get("error"); e != "" {
		rd, err = res.RefuseAuthorisation(ctx, state, e, q.Get("error_description"))
		if err == nil {
			c.checkSoon(ctx, res, rd.SettlementID)
			if rd.Replayed {
				c.callbackAnswer(w, http.StatusOK, "Already authorised", "You had authorised this payment already. You can close this window.")
				return
			}
			c.callbackAnswer(w, http.StatusOK, "Payment not authorised", "You did not authorise the payment, so it will not be made. You can close this window.")
			return
		}
	} else if code := q.Get("code"); code == "" {
		c.callbackAnswer(w, http.StatusBadRequest, "Incomplete answer", "Your bank's answer carried no authorisation. Open the link you were sent again.")
		return
	} else {
		rd, err = res.CompleteAuthorisation(ctx, state, code, c.redirectURI(r))
		if err == nil {
			if !rd.Replayed {
				c.checkSoon(ctx, res, rd.SettlementID)
			}
			c.callbackAnswer(w, http.StatusOK, "Payment authorised", "Thank you: you authorised the payment. You can close this window.")
			return
		}
	}
	var wrong *reconcile.WrongBankError
	switch {
	case bankclient.IsRejected(err):
		c.callbackAnswer(w, http.StatusBadRequest, "Not accepted", "Your bank did not accept this authorisation (it may have been used already, or be out of date). Open the link you were sent again.")
	case bankclient.IsAmbiguous(err):
		c.callbackAnswer(w, http.StatusBadGateway, "Please try again", "Your bank did not answer in time. Open the link you were sent again in a minute.")
	case errors.As(err, &wrong):
		c.callbackAnswer(w, http.StatusBadRequest, "Wrong address", "This authorisation belongs to another of our servers. Nothing was done.")
	default:
		c.callbackFailed(w, err, "console: error completing an authorisation", "settlement_id", rd.SettlementID)
	}
}

// callbackFailed answers a return that failed on our side, logged once
// here with msg and args: 503 when the database is unavailable now
// (dberr.Unavailable: the account holder opens the link again in a
// minute), 500 for anything else, which trying again would not mend.
func (c *Console) callbackFailed(w http.ResponseWriter, err error, msg string, args ...any) {
	c.log.Error(msg, append(args, "error", err)...)
	if dberr.Unavailable(err) {
		c.callbackAnswer(w, http.StatusServiceUnavailable, "Please try again", "We could not record your answer just now. Open the link you were sent again in a minute.")
		return
	}
	c.callbackAnswer(w, http.StatusInternalServerError, "Not recorded", "We could not record your answer because of an error on our side, which we have logged. Please tell whoever asked you for the payment.")
}

// checkSoon has settlement id checked now that its authorisation came
// back: CheckNow, or else resolved here.
func (c *Console) checkSoon(ctx context.Context, res *reconcile.Resolver, id string) {
	var err error
	if c.cfg.CheckNow != nil {
		err = c.cfg.CheckNow(ctx, id)
	} else {
		_, err = res.Resolve(reconcile.WithSource(ctx, settlement.SourceRedirect), id, nil)
	}
	if err != nil {
		// The sweep checks it all the same.
		c.log.Warn("console: error having an authorised settlement checked", "settlement_id", id, "error", err)
	}
}
