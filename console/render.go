package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/settlement"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pageNames are the pages; each is templates/NAME.html inside the layout.
var pageNames = []string{"overview", "list", "story", "conflicts", "statements", "accounts", "authorisations", "error"}

// session is who is asking: the operator's name (the Basic user name),
// whether it was checked against the operator's own credential
// (--operators-file), and whether the console is open (no API token).
type session struct {
	Operator string
	Verified bool
	Open     bool
}

type sessionKey struct{}

func withSession(ctx context.Context, s session) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

func sessionOf(r *http.Request) session {
	s, _ := r.Context().Value(sessionKey{}).(session)
	return s
}

// page is what the layout needs around a page's own data.
type page struct {
	Title   string
	Nav     string
	Session session
	// FormToken is the session's form token, for the action forms.
	FormToken string
	CSS       string
	Now       time.Time
	Body      any
}

// errorPage is the body of the error page.
type errorPage struct {
	Title   string
	Message string
}

// parseTemplates parses every page with the layout, and returns them with
// the stylesheet's content hash (its URL changes with its content).
func parseTemplates() (map[string]*template.Template, string, error) {
	css, err := fs.ReadFile(staticFS, "static/console.css")
	if err != nil {
		return nil, "", fmt.Errorf("console: error reading the stylesheet: %w", err)
	}
	sum := sha256.Sum256(css)
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, "", fmt.Errorf("console: error parsing the layout: %w", err)
	}
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := base.Clone()
		if err == nil {
			t, err = t.ParseFS(templateFS, "templates/"+name+".html")
		}
		if err != nil {
			return nil, "", fmt.Errorf("console: error parsing page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, hex.EncodeToString(sum[:6]), nil
}

// staticHandler serves the embedded assets under Prefix+"static/"; their
// URLs carry a content hash, so they may be cached for long.
func staticHandler() http.Handler {
	sub, _ := fs.Sub(staticFS, "static") // the directory is embedded
	files := http.StripPrefix(Prefix+"static/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=86400, immutable")
		files.ServeHTTP(w, r)
	})
}

// render writes page name with body, rendered into a buffer first so that
// a template error is a clean 500, never half a page.
func (c *Console) render(w http.ResponseWriter, _ *http.Request, status int, name string, s session, body any) {
	p := page{
		Session: s,
		CSS:     Prefix + "static/console.css?v=" + c.cssHash,
		Now:     c.cfg.Now(),
		Body:    body,
	}
	if c.canAct(s) {
		p.FormToken = c.formToken(formSession(s))
	}
	switch b := body.(type) {
	case errorPage:
		p.Title = b.Title
	case titled:
		p.Title, p.Nav = b.title(), b.nav()
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.Error("error rendering console page", "page", name, "error", err)
		http.Error(w, "error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// titled is a page body that names its title and its tab.
type titled interface {
	title() string
	nav() string
}

// canAct reports whether the session may take actions: a console that
// requires the token must know the operator's name; an open one asks for
// it in the form.
func (c *Console) canAct(s session) bool { return s.Open || strings.TrimSpace(s.Operator) != "" }

// formSession is the part of a session the form token binds.
func formSession(s session) string {
	if s.Open {
		return ""
	}
	return s.Operator
}

// funcs are the template helpers.
var funcs = template.FuncMap{
	"money":      money,
	"ts":         timestamp,
	"tsShort":    timeShort,
	"iso":        func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"ago":        func(now, t time.Time) string { return human(now.Sub(t)) },
	"secs":       func(s float64) string { return human(time.Duration(s * float64(time.Second))) },
	"dur":        func(d time.Duration) string { return human(d) },
	"percent":    func(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" },
	"count":      countText,
	"num":        thousands,
	"storyURL":   storyURL,
	"accountURL": accountURL,
	"listURL":    listURL,
	"deref":      func(p *time.Time) time.Time { return *p },
	"derefInt":   func(p *int) int { return *p },
	"derefInt64": func(p *int64) int64 { return *p },
	"isTrue":     func(p *bool) bool { return p != nil && *p },
	"lower":      strings.ToLower,
	"attempt":    attemptDuration,
	// The bounds of the overview's figures, for its captions.
	"exactLimit": func() int64 { return inspect.ExactCountLimit },
	"bankSample": func() int64 { return inspect.BankSample },
}

// money formats minor units in their currency's exponent: 12345 EUR is
// "123.45 EUR". An unknown currency shows the minor units as they are.
func money(minor int64, currency string) string {
	c, err := settlement.LookupCurrency(currency)
	if err != nil || c.Exponent == 0 {
		return thousands(minor) + " " + currency
	}
	neg := minor < 0
	if neg {
		minor = -minor
	}
	p := int64(math.Pow10(c.Exponent))
	s := fmt.Sprintf("%s.%0*d %s", thousands(minor/p), c.Exponent, minor%p, currency)
	if neg {
		s = "-" + s
	}
	return s
}

// thousands writes n with thin-space-free comma grouping: 1,234,567.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// countText shows a inspect.Count: exact, "≈ n", or "n+".
func countText(c inspect.Count) string {
	switch {
	case c.Exact:
		return thousands(c.N)
	case c.AtLeast:
		return "more than " + thousands(inspect.ExactCountLimit)
	}
	return "≈ " + thousands(c.N)
}

func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") }

func timeShort(t time.Time) string { return t.UTC().Format("Jan 2 15:04:05Z") }

// human writes a duration for people: 850ms, 12.3s, 4m05s, 3h02m, 2d04h.
func human(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return whole(int(d.Minutes()), "m", int(d.Seconds())%60, "s")
	case d < 48*time.Hour:
		return whole(int(d.Hours()), "h", int(d.Minutes())%60, "m")
	}
	return whole(int(d.Hours())/24, "d", int(d.Hours())%24, "h")
}

// whole writes a duration in two units, the second left out when zero:
// 15m, 4m05s.
func whole(a int, ua string, b int, ub string) string {
	if b == 0 {
		return strconv.Itoa(a) + ua
	}
	return fmt.Sprintf("%d%s%02d%s", a, ua, b, ub)
}

// attemptDuration is how long a bank call took, "" while unanswered.
func attemptDuration(a settlement.BankAttempt) string {
	if a.FinishedAt == nil {
		return ""
	}
	return human(a.FinishedAt.Sub(a.StartedAt))
}

func storyURL(id string) string {
	return Prefix + "settlement?" + url.Values{"id": {id}}.Encode()
}

// accountURL is the page of one ledger account.
func accountURL(id string) string {
	return Prefix + "accounts?" + url.Values{"account": {id}}.Encode()
}

// listURL is the list page for the filter given as alternating key and
// value strings.
func listURL(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return Prefix + "settlements"
	}
	return Prefix + "settlements?" + v.Encode()
}
