// Package console is settle's operator console (DESIGN.md section 16): the
// web pages the worker serves under /console/ for the person paged at
// 3 a.m. An overview of where the settlements stand and what is stuck,
// lists filtered by state, flag, age and account, the whole story of one
// settlement on a timeline, the recorded conflicts, the bank statement
// lines matched to no settlement, and two actions: "resolve now" and "add
// a note".
//
// It owns only presentation and the HTTP edge. Every fact comes from
// package reconcile's read side, the one `settle reconcile` prints, in
// read-only snapshots; "resolve now" is reconcile.Resolver.ResolveOne, the
// code of `settle reconcile resolve` and of the reconcile job; actions are
// recorded through inspect.RecordAction. It writes no SQL of its own.
//
// Pages are server-rendered with html/template from templates embedded in
// the binary, with one embedded stylesheet and no JavaScript: everything
// works with scripts off. A GET never changes anything. An action is a POST
// that must come from a page of the console: it is refused when the
// browser says it is cross-site (Sec-Fetch-Site, or an Origin naming
// another host) and when it lacks the form token, an HMAC of the
// operator's session that only a console page carries.
//
// With an API token configured, every page requires HTTP Basic credentials
// whose password is the token (package auth's one check); the user name is
// the operator's name, recorded with every action as self-asserted. With
// operators configured (auth.Operators, --operators-file) each operator
// signs in with their own name and token instead, and the name recorded is
// verified. Every action also records the address it came from. Without a
// token the console says on every page that it is open. The token never
// appears in a page, a log line or a URL.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/auth"
	"github.com/settle/settle/reconcile"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// PageSize is how many rows a list page shows.
const PageSize = 50

// ResolveTimeout bounds one "resolve now": it asks the bank, with the
// client's own per-request timeout and retries inside it. It stays below
// the worker's HTTP write timeout (60 s), so the answer still reaches the
// operator.
const ResolveTimeout = 45 * time.Second

// Config is what the console needs.
type Config struct {
	// DB is the database (required); the console only reads it, apart from
	// recording operator actions.
	DB *pgxpool.Pool
	// Resolver resolves a settlement now (required): the worker's own, so
	// that "resolve now" is exactly what the reconcile job does.
	Resolver *reconcile.Resolver
	// Resolvers, when set, are the worker's Resolvers by bank (several
	// banks in one worker): "resolve now" takes the settlement's bank's,
	// else Resolver, which refuses another bank's settlement.
	Resolvers map[string]*reconcile.Resolver
	// APIToken, when set, is required as the HTTP Basic password of every
	// request. It is never shown or logged.
	APIToken string
	// Operators, when set (--operators-file), are the only credentials the
	// console takes: each operator signs in with their own name and token,
	// and the name recorded with an action is verified. Without it the
	// name is the one given with the API token, recorded as self-asserted.
	Operators *auth.Operators
	// Logger receives one line per operator action (default: discarded).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// CheckNow has a settlement checked soon (the worker: a reconcile job
	// on its bank's queue, jobs.Inserter.CheckRedirect); used once an
	// account holder's authorisation came back, so its transitions record
	// settlement.SourceRedirect. Nil: the console resolves it itself, in
	// the request, with that source.
	CheckNow func(ctx context.Context, settlementID string) error
	// PublicURL is the console's address as account holders' browsers
	// reach it (scheme://host[:port]), for the redirect URI of the
	// authorisation links; empty: the address the operator's request came
	// to.
	PublicURL string
}

// Console is the operator console, an http.Handler for Prefix.
type Console struct {
	cfg      Config
	token    auth.Token
	inspect  *inspect.Inspector
	log      *slog.Logger
	mux      *http.ServeMux
	pages    map[string]*template.Template
	csrfKey  []byte
	origin   *http.CrossOriginProtection
	cssHash  string
	staticFS http.Handler
}

// New builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.DB == nil {
		return nil, errors.New("console: Config.DB is required")
	}
	if cfg.Resolver == nil {
		return nil, errors.New("console: Config.Resolver is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Console{
		cfg:     cfg,
		token:   auth.NewToken(cfg.APIToken),
		inspect: &inspect.Inspector{DB: cfg.DB, Now: cfg.Now},
		log:     cfg.Logger.With("component", "console"),
		origin:  http.NewCrossOriginProtection(),
	}
	c.csrfKey = csrfKey()
	var err error
	if c.pages, c.cssHash, err = parseTemplates(); err != nil {
		return nil, err
	}
	c.staticFS = staticHandler()
	c.mux = http.NewServeMux()
	c.mux.HandleFunc("GET "+Prefix+"{$}", c.overview)
	c.mux.HandleFunc("GET "+Prefix+"settlements", c.list)
	c.mux.HandleFunc("GET "+Prefix+"settlement", c.story)
	c.mux.HandleFunc("GET "+Prefix+"conflicts", c.conflicts)
	c.mux.HandleFunc("GET "+Prefix+"statements", c.statements)
	c.mux.HandleFunc("GET "+Prefix+"accounts", c.accounts)
	c.mux.HandleFunc("GET "+Prefix+"authorisations", c.authorisations)
	c.mux.HandleFunc("GET "+CallbackPath, c.callback)
	c.mux.HandleFunc("POST "+Prefix+"settlement/resolve", c.resolve)
	c.mux.HandleFunc("POST "+Prefix+"settlement/note", c.note)
	c.mux.Handle("GET "+Prefix+"static/", c.staticFS)
	c.mux.HandleFunc(Prefix, c.notFound)
	return c, nil
}

// csrfKey is the key of the form tokens: random, made when the console
// starts and never derived from the API token (a form token must not be a
// function of the credential, and a leaked form cannot help recover it).
// A restart voids the forms of the pages open before it: reload the page.
// Behind a load balancer, send one operator to one worker (sticky
// sessions) or the other workers refuse the form and ask for a reload.
func csrfKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}

// formToken is the form token of an operator session: the operator's name
// when the console requires the token, "" for an open console.
func (c *Console) formToken(session string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte("console actions\x00" + session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// ServeHTTP checks the credentials, sets the headers every answer carries
// and routes the request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if r.URL.Path == CallbackPath {
		// The account holder's browser, sent back by their bank: no
		// operator credentials; the state authenticates it.
		c.mux.ServeHTTP(w, r)
		return
	}
	if c.cfg.Operators != nil {
		name, ok := c.cfg.Operators.Check(r)
		if !ok {
			h.Set("WWW-Authenticate", `Basic realm="settle console", charset="UTF-8"`)
			c.render(w, r, http.StatusUnauthorized, "error", session{}, errorPage{
				Title: "Sign in", Message: "This console requires your own operator credentials: sign in with your operator name as the user name and your own token as the password.",
			})
			return
		}
		r = r.WithContext(withSession(r.Context(), session{Operator: name, Verified: true}))
		c.mux.ServeHTTP(w, r)
		return
	}
	user, ok := c.token.Check(r)
	if !ok {
		h.Set("WWW-Authenticate", `Basic realm="settle console", charset="UTF-8"`)
		c.render(w, r, http.StatusUnauthorized, "error", session{}, errorPage{
			Title: "Sign in", Message: "This console requires the API token: sign in with your name as the user name and the token as the password.",
		})
		return
	}
	r = r.WithContext(withSession(r.Context(), session{Operator: user, Open: !c.token.Set()}))
	c.mux.ServeHTTP(w, r)
}
