// Package fakebank is the bank simulator: a real HTTP server that speaks the
// bank protocol of DESIGN.md section 7 (idempotent payments, status by key,
// the statement, the admin fault profile and the stats), usable in-process
// from tests (NewTestServer, Bank.Start) and as `settle fakebank`. It also
// renders its books as the files banks send (GET /v1/statements/{date}:
// camt.053, camt.054, BAI2, MT940; DESIGN section 14), and lets a settled
// payment come back (Return, POST /admin/returns). The same books are
// served through other banks' APIs (profiles): Stripe's payouts (stripe.go)
// and UK Open Banking's consents and domestic payments, with message
// signing and mutual TLS (obie.go).
//
// It owns the simulated bank's books: the payments it has created, the
// idempotency keys it remembers, and the counters behind /admin/stats. It
// injects the faults real banks show (5xx before processing, lost responses,
// failing status calls, latency, definitive rejections, failed settlements,
// forgotten keys), drawing every decision from one seeded source so that a
// seed reproduces the same decisions for the same order of requests.
//
// It must never import the engine (intake, statemachine, jobs, reconcile) nor
// know anything about settlements beyond the wire types of bankclient (and
// the ISO 4217 table of package settlement, to write amounts in statements):
// it is the other party, and tests trust it only because it is independent. It must
// never answer a payment request before the payment is in its books (and on
// disk when a state file is used).
package fakebank

import (
	"context"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Options configures a Bank. The zero value is a usable in-memory bank with no
// faults, seed 0, the real clock and no logging.
type Options struct {
	// Seed seeds the one random source behind every fault decision.
	Seed int64
	// StatePath, when set, is the file that keeps the books across restarts.
	// Every mutation is written to it atomically before it is answered.
	StatePath string
	// Now is the bank's clock; it drives settlement progress and key expiry.
	// Default time.Now.
	Now func() time.Time
	// Faults is the initial fault profile. It must be valid (see SetFaults).
	Faults Faults
	// Logger receives one structured event per decision. Default: discard.
	Logger *slog.Logger
	// Profile is the API the bank serves its books through (one of
	// ProfileNames; default "settle", the protocol of DESIGN.md section 7).
	// /admin/faults and /admin/stats are the same in every profile.
	Profile string
	// JWSPublicKey, when set, is the TPP's key the obie profile verifies
	// the x-jws-signature of every POST with; without it signatures are
	// required but not verified.
	JWSPublicKey *rsa.PublicKey
	// JWSSigningKey is the key the obie profile signs its answers with
	// (x-jws-signature); default: a key made once per process.
	JWSSigningKey *rsa.PrivateKey
	// TLS, when set, makes Start serve HTTPS with it (set ClientAuth and
	// ClientCAs to require the client certificates of mutual TLS).
	TLS *tls.Config
	// ManualAuthorisation makes the obie profile's authorisation page
	// (GET /authorize) wait for the account holder's Approve or Reject;
	// without it the page decides by itself consent_delay_ms after the
	// consent was created (Rejected at consent_reject_rate).
	ManualAuthorisation bool
	// TokenTTL is how long the access tokens of the obie profile's
	// authorisation server live (expires_in). Default DefaultTokenTTL.
	TokenTTL time.Duration
	// WebhookURL, when set, is where the bank pushes its payments' status
	// changes, signed with WebhookSecret (see SetWebhook).
	WebhookURL, WebhookSecret string
}

// profileRoutes returns the function that registers the routes of the API
// face called profile (nil: no such profile): settle's protocol
// (handler.go), Stripe's payouts (stripe.go), UK Open Banking (obie.go).
// Every profile serves the same books with the same faults;
// max_payments_per_reference counts payments per settlement reference
// whichever field of its API carries it.
func profileRoutes(profile string) func(b *Bank, api *http.ServeMux) {
	switch profile {
	case "settle":
		return (*Bank).routes
	case "stripe":
		return (*Bank).stripeRoutes
	case "obie":
		return (*Bank).obieRoutes
	}
	return nil
}

// ProfileNames lists the profiles, sorted.
func ProfileNames() []string { return []string{"obie", "settle", "stripe"} }

// Bank is a simulated bank. It is safe for concurrent use.
type Bank struct {
	now       func() time.Time
	log       *slog.Logger
	statePath string
	profile   string
	verifyKey *rsa.PublicKey  // obie: the TPP's key; nil: not verified
	signKey   *rsa.PrivateKey // obie: the bank's signing key
	tlsConfig *tls.Config
	// obie's authorisation server: see Options.ManualAuthorisation and
	// TokenTTL.
	manualAuth bool
	tokenTTL   time.Duration

	// ctx is cancelled by Close; it is the base context of every request the
	// bank serves, so that latency sleeps end when the bank stops.
	ctx    context.Context
	cancel context.CancelFunc

	rngMu sync.Mutex // guards rng; taken after mu when both are held
	rng   *rand.Rand

	mu     sync.Mutex // guards everything below
	faults Faults
	// limiter enforces faults.RateLimitPerS; nil without it.
	limiter *rate.Limiter
	// requests and rateLimitedRequests count the API requests received
	// and those answered 429.
	requests, rateLimitedRequests atomic.Int64
	books                         *books
	version                       uint64 // incremented by every mutation of books

	persistMu sync.Mutex // serialises writes of the state file
	durable   uint64     // version last written to the state file; guarded by persistMu

	srvMu sync.Mutex
	srv   *http.Server

	// seed is Options.Seed; hooks pushes the status changes (nil until a
	// webhook URL is set). hooks is guarded by mu.
	seed  uint64
	hooks *notifier
}

// New returns a bank configured by opts. When opts.StatePath names an
// existing file, the books are loaded from it.
func New(opts Options) (*Bank, error) {
	if err := validateFaults(opts.Faults); err != nil {
		return nil, fmt.Errorf("error validating initial faults: %w", err)
	}
	if opts.Profile == "" {
		opts.Profile = "settle"
	}
	if profileRoutes(opts.Profile) == nil {
		return nil, fmt.Errorf("unknown profile %q (known: %s)", opts.Profile, strings.Join(ProfileNames(), ", "))
	}
	b := &Bank{
		now:       opts.Now,
		log:       opts.Logger,
		statePath: opts.StatePath,
		profile:   opts.Profile,
		rng:       rand.New(rand.NewPCG(uint64(opts.Seed), 0x5e771e)),
		faults:    opts.Faults,
		limiter:   newLimiter(opts.Faults),
		books:     newBooks(),
		verifyKey: opts.JWSPublicKey,
		signKey:   opts.JWSSigningKey,
		tlsConfig: opts.TLS,
		seed:      uint64(opts.Seed),

		manualAuth: opts.ManualAuthorisation,
		tokenTTL:   opts.TokenTTL,
	}
	if b.tokenTTL <= 0 {
		b.tokenTTL = DefaultTokenTTL
	}
	if b.profile == "obie" && b.signKey == nil {
		key, err := defaultSigningKey()
		if err != nil {
			return nil, fmt.Errorf("error making the bank's signing key: %w: %w", errNoSigningKey, err)
		}
		b.signKey = key
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.log == nil {
		b.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if b.statePath != "" {
		bk, err := loadState(b.statePath)
		if err != nil {
			return nil, err
		}
		b.books = bk
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	if opts.WebhookURL != "" {
		if err := b.SetWebhook(opts.WebhookURL, opts.WebhookSecret); err != nil {
			b.cancel()
			return nil, err
		}
	}
	return b, nil
}

// Faults returns the current fault profile.
func (b *Bank) Faults() Faults {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.faults
}

// SetFaults replaces the whole fault profile, as PUT /admin/faults does.
// Rates must lie in [0, 1]; durations must be non-negative and at most a
// year; LatencyMinMS must not exceed LatencyMaxMS.
func (b *Bank) SetFaults(f Faults) error {
	if err := validateFaults(f); err != nil {
		return err
	}
	b.mu.Lock()
	b.faults = f
	b.limiter = newLimiter(f)
	b.mu.Unlock()
	b.log.Info("fakebank: fault profile replaced", "faults", f)
	return nil
}

// Stats returns the counters of GET /admin/stats.
func (b *Bank) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.books.stats()
}

// Traffic is what the bank's API received since it started (not kept
// across restarts): every request, and those answered 429.
type Traffic struct {
	Requests    int64 `json:"requests"`
	RateLimited int64 `json:"rate_limited"`
}

// Traffic returns the API traffic counters.
func (b *Bank) Traffic() Traffic {
	return Traffic{Requests: b.requests.Load(), RateLimited: b.rateLimitedRequests.Load()}
}

// Handler returns the HTTP handler serving the bank protocol and the admin API.
func (b *Bank) Handler() http.Handler {
	mux := http.NewServeMux()
	api := http.NewServeMux()
	mux.Handle("/v1/", b.rateLimited(api))
	if b.profile == "obie" {
		// Open Banking's resources live under their own base path; every
		// answer carries x-fapi-interaction-id.
		mux.Handle(obieBase+"/", b.obieInteraction(b.rateLimited(api)))
		// The customer's decision on a consent, for tests.
		mux.HandleFunc("POST /admin/consents/{id}/authorise", b.handleDecideConsent(true))
		mux.HandleFunc("POST /admin/consents/{id}/reject", b.handleDecideConsent(false))
		// The authorisation server: the account holder's page and the
		// token endpoint.
		b.obieAuthRoutes(mux)
	}
	mux.HandleFunc("GET /admin/faults", b.handleGetFaults)
	mux.HandleFunc("PUT /admin/faults", b.handlePutFaults)
	mux.HandleFunc("GET /admin/stats", b.handleStats)
	mux.HandleFunc("POST /admin/returns", b.handleReturn)
	// The bank's statement files, whatever the API's face.
	mux.HandleFunc("GET /v1/statements/{date}", b.handleStatements)
	profileRoutes(b.profile)(b, api)
	return mux
}

// rateLimited answers 429 with Retry-After to the requests of the bank's
// API past the rate_limit_per_s fault, as a rate-limited bank does: the
// request is not processed.
func (b *Bank) rateLimited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		b.mu.Lock()
		l := b.limiter
		b.mu.Unlock()
		if l != nil && !l.Allow() {
			b.rateLimitedRequests.Add(1)
			w.Header().Set("Retry-After", "1")
			if b.profile == "stripe" {
				// Stripe's 429 (https://docs.stripe.com/rate-limits).
				writeStripeError(w, http.StatusTooManyRequests, stripeError{Type: stripeInvalidRequest, Code: "rate_limit", Message: "simulated by rate_limit_per_s"})
				return
			}
			if b.profile == "obie" && strings.HasPrefix(r.URL.Path, obieBase+"/") {
				b.writeOBError(w, http.StatusTooManyRequests, OBError{ErrorCode: OBUnexpectedError, Message: "simulated by rate_limit_per_s: at most the fair usage"})
				return
			}
			writeError(w, http.StatusTooManyRequests, "rate_limited", "simulated by rate_limit_per_s")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// routes registers the bank protocol's API on mux.
func (b *Bank) routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/payments", b.handleCreatePayment)
	mux.HandleFunc("GET /v1/payments/by-key/{key}", b.handlePaymentByKey)
	mux.HandleFunc("GET /v1/payments/{id}", b.handlePaymentByID)
	mux.HandleFunc("GET /v1/statement", b.handleStatement)
	mux.HandleFunc("GET /v1/returns", b.handleReturns)
}

// Start serves the bank on a new listener at addr (for example
// "127.0.0.1:0") in the background and returns its base URL (https://
// when Options.TLS is set). Stop it with
// Shutdown or Close.
func (b *Bank) Start(addr string) (baseURL string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("error listening on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           b.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return b.ctx },
	}
	b.srvMu.Lock()
	if b.srv != nil {
		b.srvMu.Unlock()
		_ = ln.Close()
		return "", errors.New("error starting fakebank: already started")
	}
	b.srv = srv
	b.srvMu.Unlock()
	scheme := "http://"
	if b.tlsConfig != nil {
		srv.TLSConfig = b.tlsConfig.Clone()
		ln = tls.NewListener(ln, srv.TLSConfig)
		scheme = "https://"
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("fakebank: server stopped", "error", err)
		}
	}()
	return scheme + ln.Addr().String(), nil
}

// Shutdown stops the server started by Start gracefully: it stops accepting
// connections and waits for requests in flight until ctx is done, then
// cancels what is left. The books are already on disk (every mutation is
// written before it is answered); Shutdown writes them once more in case.
func (b *Bank) Shutdown(ctx context.Context) error {
	b.srvMu.Lock()
	srv := b.srv
	b.srvMu.Unlock()
	var err error
	if srv != nil {
		if err = srv.Shutdown(ctx); err != nil {
			b.cancel()
			_ = srv.Close()
			err = fmt.Errorf("error shutting down fakebank: %w", err)
		}
	}
	b.cancel()
	b.stopHooks()
	return errors.Join(err, b.flush())
}

// stopHooks waits for the webhook pushes to end (the bank's context is
// cancelled).
func (b *Bank) stopHooks() {
	b.mu.Lock()
	n := b.hooks
	b.mu.Unlock()
	if n != nil {
		n.stop()
	}
}

// Close stops the server started by Start at once, ends every request in
// flight, and makes sure the books are on disk.
func (b *Bank) Close() error {
	b.cancel()
	b.srvMu.Lock()
	srv := b.srv
	b.srvMu.Unlock()
	var err error
	if srv != nil {
		if cerr := srv.Close(); cerr != nil {
			err = fmt.Errorf("error closing fakebank: %w", cerr)
		}
	}
	b.stopHooks()
	return errors.Join(err, b.flush())
}

// flush writes the current books to the state file if they changed since
// the last write.
func (b *Bank) flush() error {
	b.mu.Lock()
	v := b.version
	b.mu.Unlock()
	return b.persist(v)
}

// chance draws a fault decision with probability p. Rates of 0 and 1 draw
// nothing, so that a profile's certain outcomes do not shift the sequence.
func (b *Bank) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	if p >= 1 {
		return true
	}
	b.rngMu.Lock()
	defer b.rngMu.Unlock()
	return b.rng.Float64() < p
}

// latency draws a delay uniformly from [min, max] milliseconds.
func (b *Bank) latency(minMS, maxMS int64) time.Duration {
	if maxMS <= minMS {
		return time.Duration(minMS) * time.Millisecond
	}
	b.rngMu.Lock()
	defer b.rngMu.Unlock()
	return time.Duration(minMS+b.rng.Int64N(maxMS-minMS+1)) * time.Millisecond
}

// maxDurationMS bounds every duration of a fault profile (one year), so that
// converting it to a time.Duration cannot overflow.
const maxDurationMS = 365 * 24 * 60 * 60 * 1000

// validateFaults checks a fault profile.
func validateFaults(f Faults) error {
	rates := []struct {
		name string
		v    float64
	}{
		{"fail_before_rate", f.FailBeforeRate},
		{"drop_response_rate", f.DropResponseRate},
		{"status_error_rate", f.StatusErrorRate},
		{"reject_rate", f.RejectRate},
		{"settlement_failure_rate", f.SettlementFailureRate},
		{"return_rate", f.ReturnRate},
		{"consent_reject_rate", f.ConsentRejectRate},
		{"token_error_rate", f.TokenErrorRate},
		{"token_drop_rate", f.TokenDropRate},
		{"webhook_loss_rate", f.WebhookLossRate},
		{"webhook_duplicate_rate", f.WebhookDuplicateRate},
	}
	if !(f.RateLimitPerS >= 0 && f.RateLimitPerS <= 1e6) {
		return fmt.Errorf("rate_limit_per_s must be in [0, 1e6], got %v", f.RateLimitPerS)
	}
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) { // also false for NaN
			return fmt.Errorf("%s must be in [0, 1], got %v", r.name, r.v)
		}
	}
	durations := []struct {
		name string
		v    int64
	}{
		{"latency_min_ms", f.LatencyMinMS},
		{"latency_max_ms", f.LatencyMaxMS},
		{"settle_delay_ms", f.SettleDelayMS},
		{"key_ttl_ms", f.KeyTTLMS},
		{"return_after_ms", f.ReturnAfterMS},
		{"consent_delay_ms", f.ConsentDelayMS},
		{"webhook_delay_max_ms", f.WebhookDelayMaxMS},
	}
	for _, d := range durations {
		if d.v < 0 || d.v > maxDurationMS {
			return fmt.Errorf("%s must be in [0, %d], got %d", d.name, int64(maxDurationMS), d.v)
		}
	}
	if f.LatencyMinMS > f.LatencyMaxMS {
		return fmt.Errorf("latency_min_ms (%d) must not exceed latency_max_ms (%d)", f.LatencyMinMS, f.LatencyMaxMS)
	}
	return nil
}

// newLimiter is the token bucket of f's rate_limit_per_s (a second's worth
// of burst), nil without one.
func newLimiter(f Faults) *rate.Limiter {
	if f.RateLimitPerS <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(f.RateLimitPerS), max(1, int(f.RateLimitPerS)))
}
