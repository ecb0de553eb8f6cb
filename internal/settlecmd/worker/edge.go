package worker

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/settle/settle/internal/httpsafe"
)

// RiverUIMaxBody bounds a request body of the River UI (its API takes a few
// job ids): one 200 MB POST took a worker from 32 MB to 444 MB RSS.
const RiverUIMaxBody = 1 << 20

// validateEdge checks the settings of the HTTP edge: the --public-host
// names, the --public-url, and that a worker listening beyond this machine
// has a token.
func (c Config) validateEdge() error {
	if _, err := publicURLHost(c.PublicURL); err != nil {
		return err
	}
	if _, err := httpsafe.NewHosts(c.publicHosts(), c.Listen); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("invalid --listen %q: want host:port: %w", c.Listen, err)
	}
	if c.APIToken == "" && !httpsafe.IsLoopback(host) {
		return errors.New("refusing to serve on --listen " + c.Listen + " without an API token: intake, the console, the River UI and /metrics " +
			"would be open to the network. Set SETTLE_API_TOKEN or --api-token-file (at least 16 characters), or listen on 127.0.0.1")
	}
	return nil
}

// publicURLHost checks a --public-url and returns its host (with its port
// when it names one); empty for none. The account holders' browsers come
// back to it from their bank, which accepts only the redirect URI
// registered with it: an absolute https URL (plain http only on this
// machine), without query, fragment or credentials.
func publicURLHost(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("invalid --public-url %q: %w", raw, err)
	}
	switch {
	case u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return "", fmt.Errorf("invalid --public-url %q: want https://host[:port][/path], the console's address as browsers reach it", raw)
	case u.Scheme == "http" && !httpsafe.IsLoopback(u.Hostname()):
		return "", fmt.Errorf("invalid --public-url %q: plain http is only for this machine; a bank sends account holders back to an https address", raw)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "", fmt.Errorf("invalid --public-url %q: no credentials, query or fragment", raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return "", fmt.Errorf("invalid --public-url %q: port %q", raw, p)
		}
	}
	return u.Host, nil
}

// publicHosts are the --public-host names and the --public-url's host.
func (c Config) publicHosts() []string {
	host, err := publicURLHost(c.PublicURL)
	if err != nil || host == "" {
		return c.PublicHosts
	}
	return append(c.PublicHosts[:len(c.PublicHosts):len(c.PublicHosts)], host)
}

// guardEdge puts the whole API behind the Host check and cross-origin
// protection (package httpsafe); /healthz and /readyz answer any Host.
func (w *Worker) guardEdge(mux http.Handler) (http.Handler, error) {
	hosts, err := httpsafe.NewHosts(w.cfg.publicHosts(), w.cfg.Listen)
	if err != nil {
		return nil, err
	}
	g := &httpsafe.Guard{Hosts: hosts, Unchecked: []string{"/healthz", "/readyz"}, Logger: w.logger, Limiter: w.limiter}
	return g.Wrap(withFavicon(mux)), nil
}

// withFavicon answers GET /favicon.ico with 204: browsers ask for it on
// every page of the console and the River UI, whatever icon the page
// declares, and log the 404 as an error (which the console's browser tests
// caught now and then, depending on when Chrome asked).
func withFavicon(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/favicon.ico" && httpsafe.Safe(r.Method) {
			w.Header().Set("Cache-Control", "public, max-age=86400")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// guardRiverUI bounds the River UI's request bodies and, unless
// RiverUIAdmin, lets only GET and HEAD through: River UI's writes cancel,
// retry and delete jobs and pause queues (pausing "bank" stops every
// payment).
func (w *Worker) guardRiverUI(ui http.Handler) http.Handler {
	h := httpsafe.MaxBody(ui, RiverUIMaxBody)
	if w.cfg.RiverUIAdmin {
		return h
	}
	return httpsafe.ReadOnly(h, "the River UI is read-only: start the worker with --riverui-admin (SETTLE_RIVERUI_ADMIN=true) "+
		"to cancel, retry or delete jobs and pause or resume queues; nothing was done", w.logger, w.limiter)
}

// warnIfOpen logs a loud line when the API has no token: everything is
// open to every process and user of this machine.
func (w *Worker) warnIfOpen() {
	if w.cfg.APIToken != "" {
		return
	}
	w.logger.Warn("OPEN: no API token is set: intake, the console, the River UI and /metrics answer every process and user of this machine " +
		"without credentials (web pages are kept out by the Host and cross-origin checks). Set SETTLE_API_TOKEN or --api-token-file")
}
