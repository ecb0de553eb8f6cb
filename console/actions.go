package console

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/database/dberr"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/settlement"
)

// maxFormBytes bounds an action's form: a note and a few fields.
const maxFormBytes = 64 << 10

// action is a checked action request: who asks, about which settlement.
type action struct {
	operator string
	// verified: the operator's name was checked (--operators-file).
	verified bool
	// source is the IP address the request came from.
	source string
	id     string
	form   url.Values
}

// checkAction admits an action only when it comes from a console page: not
// cross-site by the browser's own account (Sec-Fetch-Site, Origin), with
// the session's form token, from a named operator. It writes the refusal
// and returns false otherwise.
func (c *Console) checkAction(w http.ResponseWriter, r *http.Request) (action, bool) {
	s := sessionOf(r)
	refuse := func(status int, msg string) (action, bool) {
		c.log.Warn("console: action refused", "path", r.URL.Path, "status", status, "reason", msg, "operator", s.Operator)
		c.render(w, r, status, "error", s, errorPage{Title: "Action refused", Message: msg})
		return action{}, false
	}
	if err := c.origin.Check(r); err != nil {
		return refuse(http.StatusForbidden, "The request did not come from a page of this console (cross-origin request). Nothing was done.")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return refuse(http.StatusBadRequest, "The form could not be read. Nothing was done.")
	}
	if !c.canAct(s) {
		return refuse(http.StatusForbidden, "Actions need your name: sign in again with your name as the user name (the password is the API token). Nothing was done.")
	}
	want := c.formToken(formSession(s))
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(want)) {
		return refuse(http.StatusForbidden, "The form is missing its token or comes from another session. Reload the page and try again. Nothing was done.")
	}
	a := action{operator: s.Operator, verified: s.Verified, source: sourceAddr(r), id: r.PostForm.Get("id"), form: r.PostForm}
	if s.Open {
		// An open console cannot know who is asking: the form says.
		a.operator = strings.TrimSpace(r.PostForm.Get("operator"))
		if a.operator == "" {
			return refuse(http.StatusBadRequest, "Say who you are: the operator name is required. Nothing was done.")
		}
	}
	if a.id == "" {
		return refuse(http.StatusBadRequest, "No settlement given. Nothing was done.")
	}
	return a, true
}

// sourceAddr is the IP address of the peer a request came from ("" when
// it cannot be read).
func sourceAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil || net.ParseIP(host) == nil {
		return ""
	}
	return host
}

// resolve is "resolve now": the bank is asked at once through the worker's
// Resolver, exactly as `settle reconcile resolve ID` and the reconcile job
// do, and the action is recorded with its result.
func (c *Console) resolve(w http.ResponseWriter, r *http.Request) {
	a, ok := c.checkAction(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ResolveTimeout)
	defer cancel()
	res, err := c.resolverOf(ctx, a.id).ResolveOne(reconcile.WithSource(ctx, settlement.SourceOperator), a.id)
	if err == nil && res.Error != "" {
		// ResolveOne's only error result without an error: no such settlement.
		c.render(w, r, http.StatusNotFound, "error", sessionOf(r), errorPage{Title: "Not found", Message: fmt.Sprintf("There is no settlement %q. Nothing was done.", a.id)})
		return
	}
	result := describeResolve(res, err)
	c.record(w, r, inspect.OperatorAction{
		SettlementID: a.id, Operator: a.operator, OperatorVerified: a.verified, SourceAddr: a.source, Action: inspect.OperatorResolve,
		Detail: "resolve now: ask the bank and apply its answer", Result: result, OK: err == nil,
	})
}

// resolverOf is the Resolver of settlement id's bank, or the worker's
// first (which refuses a settlement of a bank it does not serve).
func (c *Console) resolverOf(ctx context.Context, id string) *reconcile.Resolver {
	if len(c.cfg.Resolvers) == 0 {
		return c.cfg.Resolver
	}
	var bank string
	if err := c.cfg.DB.QueryRow(ctx, "SELECT bank FROM settlements WHERE settlement_id = $1", id).Scan(&bank); err == nil {
		if r := c.cfg.Resolvers[bank]; r != nil {
			return r
		}
	}
	return c.cfg.Resolver
}

// describeResolve says in words what resolving did.
func describeResolve(res reconcile.ResolveResult, err error) string {
	if err != nil {
		return "failed: " + res.Error
	}
	var b strings.Builder
	switch {
	case res.From != "" && res.To != "" && res.From != res.To:
		fmt.Fprintf(&b, "%s → %s", res.From, res.To)
	case res.To != "":
		fmt.Fprintf(&b, "stays %s", res.To)
	}
	if res.Action != "" && res.Action != "none" {
		fmt.Fprintf(&b, " (%s)", res.Action)
	}
	if res.Action == "none" {
		b.WriteString(" (nothing to ask the bank)")
	}
	if res.Reason != "" {
		b.WriteString(": " + res.Reason)
	}
	if res.NeedsInvestigation {
		b.WriteString("; needs investigation: " + res.InvestigationReason)
	}
	return b.String()
}

// note adds an operator's note to a settlement's story.
func (c *Console) note(w http.ResponseWriter, r *http.Request) {
	a, ok := c.checkAction(w, r)
	if !ok {
		return
	}
	text := strings.TrimSpace(strings.ReplaceAll(a.form.Get("note"), "\r\n", "\n"))
	c.record(w, r, inspect.OperatorAction{
		SettlementID: a.id, Operator: a.operator, OperatorVerified: a.verified, SourceAddr: a.source, Action: inspect.OperatorNote,
		Detail: text, Result: "recorded", OK: true,
	})
}

// record appends the action to operator_actions, logs it and sends the
// browser back to the story (POST, redirect, GET: a reload repeats
// nothing).
func (c *Console) record(w http.ResponseWriter, r *http.Request, oa inspect.OperatorAction) {
	oa.At = c.cfg.Now()
	if err := oa.Validate(); err != nil {
		c.render(w, r, http.StatusBadRequest, "error", sessionOf(r), errorPage{Title: "Action refused", Message: err.Error() + ". Nothing was done."})
		return
	}
	// Recorded even when the request has gone: the action happened.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), ResolveTimeout)
	defer cancel()
	rec, err := inspect.RecordAction(ctx, c.cfg.DB, oa)
	switch {
	case errors.Is(err, settlement.ErrNotFound):
		c.render(w, r, http.StatusNotFound, "error", sessionOf(r), errorPage{Title: "Not found", Message: fmt.Sprintf("There is no settlement %q. Nothing was done.", oa.SettlementID)})
		return
	case err != nil:
		c.log.Error("console: error recording an operator action", "settlement_id", oa.SettlementID,
			"operator", oa.Operator, "action", oa.Action, "result", oa.Result, "error", err)
		msg := "The action could not be recorded; the error is in the worker's log."
		if oa.Action == inspect.OperatorResolve {
			msg = "The settlement was resolved (" + oa.Result + ") but the action could not be recorded; the error is in the worker's log."
		}
		status := http.StatusInternalServerError
		if dberr.Unavailable(err) {
			status = http.StatusServiceUnavailable
		}
		c.render(w, r, status, "error", sessionOf(r), errorPage{Title: "Not recorded", Message: msg})
		return
	}
	c.log.Info("console: operator action", "settlement_id", rec.SettlementID, "operator", rec.Operator,
		"operator_verified", rec.OperatorVerified, "source_addr", rec.SourceAddr,
		"action", rec.Action, "ok", rec.OK, "result", rec.Result, "action_id", rec.ID)
	http.Redirect(w, r, storyURL(rec.SettlementID)+"&done="+strconv.FormatInt(rec.ID, 10)+"#actions", http.StatusSeeOther)
}
