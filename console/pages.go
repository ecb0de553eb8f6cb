package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/database/dberr"
	"github.com/settle/settle/settlement"
)

// ---- overview ----

type overviewPage struct {
	inspect.Overview
}

func (overviewPage) title() string { return "Overview" }
func (overviewPage) nav() string   { return "overview" }

// StateOf returns the count of state s.
func (o overviewPage) StateOf(s string) inspect.StateCount {
	for _, sc := range o.States {
		if string(sc.State) == s {
			return sc
		}
	}
	return inspect.StateCount{}
}

// Open is the counts of the open states.
func (o overviewPage) Open() []inspect.StateCount {
	var out []inspect.StateCount
	for _, sc := range o.States {
		if !sc.State.Terminal() {
			out = append(out, sc)
		}
	}
	return out
}

// Terminal is the counts of the terminal states.
func (o overviewPage) Terminal() []inspect.StateCount {
	var out []inspect.StateCount
	for _, sc := range o.States {
		if sc.State.Terminal() {
			out = append(out, sc)
		}
	}
	return out
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ov, err := c.inspect.Overview(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", sessionOf(r), overviewPage{ov})
}

// ---- lists ----

type listPage struct {
	States []settlement.State
	// The filter as given, for the form and the links.
	State, Flagged, Account, Older, Bank string
	Error                                string
	Rows                                 []inspect.SettlementRow
	// After is this page's cursor ("" on the first page); Next the next
	// page's ("" on the last).
	After, Next string
}

func (listPage) title() string { return "Settlements" }
func (listPage) nav() string   { return "settlements" }

// Filtered reports whether any filter is set.
func (l listPage) Filtered() bool {
	return l.State != "" || l.Flagged != "" || l.Account != "" || l.Older != "" || l.Bank != ""
}

// URL is the list with this page's filter and cursor after.
func (l listPage) URL(after string) string {
	return listURL("state", l.State, "flagged", l.Flagged, "account", l.Account, "older", l.Older, "bank", l.Bank, "after", after)
}

func (c *Console) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lp := listPage{
		States:  settlement.States,
		State:   q.Get("state"),
		Account: strings.TrimSpace(q.Get("account")),
		Older:   strings.TrimSpace(q.Get("older")),
		Bank:    strings.TrimSpace(q.Get("bank")),
		After:   q.Get("after"),
	}
	if q.Get("flagged") != "" {
		lp.Flagged = "1"
	}
	f := inspect.Filter{State: settlement.State(lp.State), NeedsInvestigation: lp.Flagged != "", AccountID: lp.Account, Bank: lp.Bank}
	var err error
	if lp.Older != "" {
		if f.OlderThan, err = time.ParseDuration(lp.Older); err != nil {
			err = fmt.Errorf("older than: want a duration such as 90s, 10m or 24h, got %q", lp.Older)
		}
	}
	var after inspect.Cursor
	if err == nil {
		after, err = inspect.ParseCursor(lp.After)
	}
	if err == nil {
		err = f.Validate()
	}
	if err != nil {
		lp.Error = err.Error()
		c.render(w, r, http.StatusBadRequest, "list", sessionOf(r), lp)
		return
	}
	p, err := c.inspect.Page(r.Context(), f, after, PageSize)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	lp.Rows, lp.Next = p.Rows, p.Next.String()
	c.render(w, r, http.StatusOK, "list", sessionOf(r), lp)
}

// ---- one settlement ----

type storyPage struct {
	inspect.Story
	Events    []timelineEvent
	Conflicts []conflictView
	// Done is the action just taken, named by the redirect after it.
	Done *inspect.OperatorAction
}

func (s storyPage) title() string { return "Settlement " + s.Settlement.SettlementID }
func (storyPage) nav() string     { return "settlements" }

// MoreConflicts is how many conflicts the page does not show.
func (s storyPage) MoreConflicts() int { return s.ConflictsTotal - len(s.Conflicts) }

// Open reports whether the settlement may still change on its own.
func (s storyPage) Open() bool { return !s.Settlement.State.Terminal() }

// timelineEvent is one line of the timeline with its offset from the
// first.
type timelineEvent struct {
	inspect.Event
	Offset string
}

// conflictView is a conflict with the stored and the rejected payload side
// by side, field by field.
type conflictView struct {
	inspect.Conflict
	Fields []fieldPair
}

type fieldPair struct {
	Field, Stored, Incoming string
	Differs                 bool
}

// businessFields are the fields of the payload hash, in display order.
var businessFields = []string{"settlement_id", "account_id", "amount_cents", "currency", "beneficiary"}

func sideBySide(s settlement.Settlement, c inspect.Conflict) conflictView {
	stored := map[string]string{
		"settlement_id": s.SettlementID,
		"account_id":    s.AccountID,
		"amount_cents":  strconv.FormatInt(s.AmountCents, 10),
		"currency":      s.Currency,
		"beneficiary":   s.Beneficiary,
	}
	var in map[string]any
	dec := json.NewDecoder(bytes.NewReader(c.Incoming))
	dec.UseNumber()
	_ = dec.Decode(&in) // a missing or odd payload shows as blanks
	v := conflictView{Conflict: c}
	for _, f := range businessFields {
		p := fieldPair{Field: f, Stored: stored[f]}
		if x, ok := in[f]; ok && x != nil {
			p.Incoming = fmt.Sprint(x)
		}
		p.Differs = p.Incoming != p.Stored
		v.Fields = append(v.Fields, p)
	}
	// A named bank is part of the payload: shown when the rejected event
	// named one, beside the bank the settlement is bound to.
	if x, ok := in["bank"]; ok && x != nil {
		stored := s.Bank
		ev := intake.Event{SettlementID: s.SettlementID, AccountID: s.AccountID, AmountCents: s.AmountCents,
			Currency: s.Currency, Beneficiary: s.Beneficiary, Bank: s.Bank}
		if intake.CanonicalHash(ev) != s.PayloadHash {
			// The first delivery named none: its bank came from a route.
			stored = "(none; bound to " + s.Bank + " by the routes)"
		}
		p := fieldPair{Field: "bank", Stored: stored, Incoming: fmt.Sprint(x)}
		p.Differs = p.Incoming != p.Stored
		v.Fields = append(v.Fields, p)
	}
	return v
}

func (c *Console) story(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		c.render(w, r, http.StatusBadRequest, "error", sessionOf(r), errorPage{Title: "No settlement", Message: "Which settlement? The address names none."})
		return
	}
	st, err := c.inspect.Show(r.Context(), id)
	if errors.Is(err, settlement.ErrNotFound) {
		c.render(w, r, http.StatusNotFound, "error", sessionOf(r), errorPage{Title: "Not found", Message: fmt.Sprintf("There is no settlement %q.", id)})
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	sp := storyPage{Story: st}
	if done, err := strconv.ParseInt(r.URL.Query().Get("done"), 10, 64); err == nil {
		for k := range st.OperatorActions {
			if st.OperatorActions[k].ID == done {
				sp.Done = &st.OperatorActions[k]
			}
		}
	}
	var first time.Time
	for k, e := range st.Timeline {
		if k == 0 || e.At.Before(first) {
			first = e.At
		}
	}
	for _, e := range st.Timeline {
		off := "+" + human(e.At.Sub(first))
		if e.At.Equal(first) {
			off = ""
		}
		sp.Events = append(sp.Events, timelineEvent{Event: e, Offset: off})
	}
	for _, cf := range st.Conflicts {
		sp.Conflicts = append(sp.Conflicts, sideBySide(st.Settlement, cf))
	}
	c.render(w, r, http.StatusOK, "story", sessionOf(r), sp)
}

// ---- conflicts ----

type conflictsPage struct {
	Conflicts   []inspect.Conflict
	After, Next int64
}

func (conflictsPage) title() string { return "Conflicts" }
func (conflictsPage) nav() string   { return "conflicts" }

func (c *Console) conflicts(w http.ResponseWriter, r *http.Request) {
	var after int64
	if s := r.URL.Query().Get("after"); s != "" {
		var err error
		if after, err = strconv.ParseInt(s, 10, 64); err != nil || after < 0 {
			c.render(w, r, http.StatusBadRequest, "error", sessionOf(r), errorPage{Title: "Bad address", Message: "The page cursor is not a number."})
			return
		}
	}
	p, err := c.inspect.ConflictsPage(r.Context(), after, PageSize)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "conflicts", sessionOf(r), conflictsPage{Conflicts: p.Conflicts, After: after, Next: p.Next})
}

// ---- unmatched statement lines ----

type statementsPage struct {
	inspect.LinePage
	After string
}

func (statementsPage) title() string { return "Statement lines" }
func (statementsPage) nav() string   { return "statements" }

func (c *Console) statements(w http.ResponseWriter, r *http.Request) {
	after, err := inspect.ParseLineCursor(r.URL.Query().Get("after"))
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "error", sessionOf(r), errorPage{Title: "Bad address", Message: "The page cursor is malformed."})
		return
	}
	p, err := c.inspect.UnmatchedLines(r.Context(), after, PageSize)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "statements", sessionOf(r), statementsPage{LinePage: p, After: after.String()})
}

// ---- errors ----

func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusNotFound, "error", sessionOf(r), errorPage{Title: "Not found", Message: "There is no such page in the console."})
}

// fail answers a read that could not be done: logged once here, the edge.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	msg := "The database could not answer. The error is in the worker's log."
	switch {
	case r.Context().Err() != nil:
		status, msg = http.StatusServiceUnavailable, "The request ended before the database answered."
	case dberr.Unavailable(err):
		status, msg = http.StatusServiceUnavailable, "The database is unavailable now; reload the page in a moment."
	}
	c.log.Error("console: error reading", "path", r.URL.Path, "error", err)
	c.render(w, r, status, "error", sessionOf(r), errorPage{Title: "Could not read", Message: msg})
}
