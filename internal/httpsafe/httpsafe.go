// Package httpsafe holds the defences of the worker's HTTP edge against the
// web pages its users visit (issue 32, items 5 and 7): a browser will send a
// "simple" cross-site request (text/plain, a form) with the user's cached
// credentials to any address it can reach, loopback included, and DNS
// rebinding points a name of the attacker's at 127.0.0.1.
//
//   - Hosts: the Host header must name this machine (localhost, 127.0.0.1,
//     ::1, any port) or a --public-host; anything else is 421 Misdirected
//     Request, which defeats DNS rebinding (the browser sends the
//     attacker's name).
//   - Guard: Hosts plus net/http.CrossOriginProtection (Sec-Fetch-Site,
//     else Origin against Host) on every unsafe method, for the whole mux.
//   - RequireJSON: a write's body must be declared JSON (or NDJSON), which
//     a browser cannot send cross-site without a CORS preflight that
//     settle never answers.
//   - ReadOnly and MaxBody: the River UI's writes are refused unless
//     allowed, and every body it reads is bounded.
//
// Refusals are answered with a problem+json body saying what to do, and
// logged through a Limiter: one line per kind and interval with a count of
// those left out, so a flood of refused requests cannot flood the log.
package httpsafe

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Problem types of the refusals.
const (
	ProblemMisdirected = "urn:settle:problem:misdirected"
	ProblemCrossOrigin = "urn:settle:problem:cross-origin"
	ProblemMediaType   = "urn:settle:problem:unsupported-media-type"
	ProblemReadOnly    = "urn:settle:problem:read-only"
)

// problem is an RFC 9457 problem answer. Message repeats Detail for the
// River UI, whose pages show an error's "message".
type problem struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Status  int    `json:"status"`
	Detail  string `json:"detail"`
	Message string `json:"message,omitempty"`
}

// WriteProblem answers status with a problem+json body.
func WriteProblem(w http.ResponseWriter, status int, typ, title, detail string) {
	body, _ := json.Marshal(problem{Type: typ, Title: title, Status: status, Detail: detail, Message: detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// Hosts is the set of names the worker answers to: this machine's, the
// --listen address when it is an IP address, and the --public-host names.
type Hosts struct {
	// anyPort holds names accepted with any port (or none); exact holds
	// host:port pairs accepted only so.
	anyPort map[string]bool
	exact   map[string]bool
}

// NewHosts returns the names the worker answers to. Each public entry is a
// host name or IP address (any port) or host:port (that port only), as a
// browser sends it in Host. listen, the --listen address, adds its IP
// address when it is one (an IP address cannot be rebound).
func NewHosts(public []string, listen string) (*Hosts, error) {
	h := &Hosts{anyPort: map[string]bool{}, exact: map[string]bool{}}
	for _, p := range public {
		p = strings.TrimSpace(p)
		if p == "" || strings.ContainsAny(p, "/@?# \t") {
			return nil, fmt.Errorf("invalid --public-host %q: want a host name, an IP address or host:port (no scheme, no path)", p)
		}
		if host, port, err := net.SplitHostPort(p); err == nil {
			if host == "" || port == "" {
				return nil, fmt.Errorf("invalid --public-host %q: want a host name, an IP address or host:port", p)
			}
			h.exact[normalize(host)+":"+port] = true
			continue
		}
		h.anyPort[normalize(strings.Trim(p, "[]"))] = true
	}
	if host, _, err := net.SplitHostPort(listen); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			h.anyPort[ip.String()] = true
		}
	}
	return h, nil
}

// normalize lowercases a host name and drops its final dot.
func normalize(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// IsLoopback reports whether host (a name or an IP address, no port) is
// this machine: localhost, or a loopback address.
func IsLoopback(host string) bool {
	host = normalize(strings.Trim(host, "[]"))
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Allowed reports whether a request's Host header names the worker.
func (h *Hosts) Allowed(hostHeader string) bool {
	if hostHeader == "" {
		return false
	}
	host, port, err := net.SplitHostPort(hostHeader)
	if err != nil {
		host, port = strings.Trim(hostHeader, "[]"), ""
	}
	host = normalize(host)
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	switch {
	case IsLoopback(host), h.anyPort[host]:
		return true
	case port != "":
		return h.exact[host+":"+port]
	}
	return false
}

// Limiter lets one log line of each kind through per interval and counts
// the others, so that refusals cannot flood the log.
type Limiter struct {
	// Every is the interval (default 10s).
	Every time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu   sync.Mutex
	last map[string]time.Time
	left map[string]int
}

// Allow reports whether a line of kind may be logged now and, when it may,
// how many lines of that kind were left out since the last one.
func (l *Limiter) Allow(kind string) (ok bool, leftOut int) {
	if l == nil {
		return true, 0
	}
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	every := l.Every
	if every <= 0 {
		every = 10 * time.Second
	}
	t := now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.left = map[string]time.Time{}, map[string]int{}
	}
	if last, seen := l.last[kind]; seen && t.Sub(last) < every {
		l.left[kind]++
		return false, 0
	}
	leftOut = l.left[kind]
	l.last[kind], l.left[kind] = t, 0
	return true, leftOut
}

// Warn logs msg at warn level through the limiter, keyed by msg, adding
// "left_out" when lines were left out since the last one.
func (l *Limiter) Warn(log *slog.Logger, r *http.Request, msg string, attrs ...any) {
	ok, n := l.Allow(msg)
	if !ok || log == nil {
		return
	}
	attrs = append(attrs, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	if n > 0 {
		attrs = append(attrs, "left_out", n)
	}
	log.Warn(msg, attrs...)
}

// Guard protects a whole mux: the Host check (except for the paths in
// Unchecked, health probes that reveal nothing) and cross-origin
// protection of every unsafe method.
type Guard struct {
	Hosts *Hosts
	// Unchecked are paths served whatever their Host (/healthz, /readyz:
	// probes address a worker by its pod or machine IP).
	Unchecked []string
	Logger    *slog.Logger
	Limiter   *Limiter
}

// Wrap returns next behind the guard.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.Limiter.Warn(g.Logger, r, "http: cross-origin request refused", "origin", r.Header.Get("Origin"),
			"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		WriteProblem(w, http.StatusForbidden, ProblemCrossOrigin, "Cross-origin request refused",
			"this request came from another site's page (Sec-Fetch-Site or Origin); nothing was done")
	}))
	protected := cop.Handler(next)
	unchecked := map[string]bool{}
	for _, p := range g.Unchecked {
		unchecked[p] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !unchecked[r.URL.Path] && !g.Hosts.Allowed(r.Host) {
			g.Limiter.Warn(g.Logger, r, "http: request for another host refused (421)", "host", r.Host)
			WriteProblem(w, http.StatusMisdirectedRequest, ProblemMisdirected, "Misdirected request",
				fmt.Sprintf("this worker answers to localhost, 127.0.0.1, ::1 and its --public-host names, not to %q; add it with --public-host (SETTLE_PUBLIC_HOST) if it is this worker's", r.Host))
			return
		}
		protected.ServeHTTP(w, r)
	})
}

// Safe reports whether method never changes anything (RFC 9110).
func Safe(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// jsonTypes are the media types a write may declare besides application/json
// and application/*+json: the batch endpoint's NDJSON.
var jsonTypes = map[string]bool{
	"application/json":        true,
	"application/x-ndjson":    true,
	"application/ndjson":      true,
	"application/jsonl":       true,
	"application/jsonlines":   true,
	"application/x-jsonlines": true,
}

// IsJSON reports whether a Content-Type header declares JSON or NDJSON.
func IsJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return jsonTypes[mt] || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// RequireJSON refuses an unsafe request whose body is not declared JSON
// (or NDJSON) with 415: a browser sends text/plain, a form or no type at
// all cross-site without asking first, and never JSON.
func RequireJSON(next http.Handler, log *slog.Logger, lim *Limiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Safe(r.Method) && !IsJSON(r.Header.Get("Content-Type")) {
			lim.Warn(log, r, "http: write without a JSON content type refused (415)", "content_type", r.Header.Get("Content-Type"))
			w.Header().Set("Accept-Post", "application/json, application/x-ndjson")
			WriteProblem(w, http.StatusUnsupportedMediaType, ProblemMediaType, "Unsupported media type",
				fmt.Sprintf("the body must be sent as Content-Type: application/json (a batch may also be application/x-ndjson), not %q; nothing was done", r.Header.Get("Content-Type")))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// MaxBody bounds every request body read through next to n bytes (a read
// past it fails, and the server answers 413 when the handler reports it).
func MaxBody(next http.Handler, n int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > n {
			WriteProblem(w, http.StatusRequestEntityTooLarge, "urn:settle:problem:too-large", "Request body too large",
				fmt.Sprintf("the body is over %d bytes; nothing was done", n))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, n)
		next.ServeHTTP(w, r)
	})
}

// ReadOnly refuses every method but GET and HEAD with 403 and detail, the
// message saying how to allow writes.
func ReadOnly(next http.Handler, detail string, log *slog.Logger, lim *Limiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			lim.Warn(log, r, "http: write to a read-only interface refused (403)")
			WriteProblem(w, http.StatusForbidden, ProblemReadOnly, "Read-only", detail)
			return
		}
		next.ServeHTTP(w, r)
	})
}
