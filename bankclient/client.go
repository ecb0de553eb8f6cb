package bankclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"golang.org/x/time/rate"
)

// Client is the HTTP implementation of Bank. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	hc      *http.Client
	timeout time.Duration
	retry   RetryPolicy
	auth    string // "Bearer <token>", or empty
	maxBody int64
	logger  *slog.Logger
	observe func(op, outcome string, d time.Duration)
	limiter *rate.Limiter // nil: no cap
}

var _ Bank = (*Client)(nil)

// New returns a client of the bank at baseURL (for example
// "https://bank.example/" or "http://127.0.0.1:8081"). It reads no global
// configuration: everything comes from opts (see OptionsFromEnv).
func New(baseURL string, opts Options) (*Client, error) {
	base, err := ParseBaseURL(baseURL, "credentials belong in Options.Token")
	if err != nil {
		return nil, fmt.Errorf("error parsing bank URL: %w", err)
	}
	base.Path = strings.TrimSuffix(base.Path, "/")
	base.RawPath = ""

	c := &Client{
		base:    base,
		timeout: opts.Timeout,
		retry:   opts.Retry.WithDefaults(),
		maxBody: opts.MaxResponseSize,
		logger:  opts.Logger,
		observe: opts.Observe,
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.maxBody <= 0 {
		c.maxBody = DefaultMaxResponseSize
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if opts.RatePerSecond < 0 {
		return nil, fmt.Errorf("error configuring the bank rate: %g requests a second is negative", opts.RatePerSecond)
	}
	if opts.RatePerSecond > 0 {
		c.limiter = rate.NewLimiter(rate.Limit(opts.RatePerSecond), 1)
	}

	if _, err := checkScheme(base, opts, "bank", "credential"); err != nil {
		return nil, err
	}
	if opts.Token != "" {
		if err := CheckToken(string(opts.Token), "credential"); err != nil {
			return nil, fmt.Errorf("error configuring bank credential: %w", err)
		}
		c.auth = "Bearer " + string(opts.Token)
	}

	switch {
	case opts.HTTPClient != nil && opts.CAFile != "":
		return nil, errors.New("error configuring bank TLS: CAFile cannot be combined with HTTPClient")
	case opts.HTTPClient != nil:
		hc := *opts.HTTPClient
		c.hc = &hc
	default:
		tr, err := opts.Transport()
		if err != nil {
			return nil, fmt.Errorf("error configuring bank TLS: %w", err)
		}
		c.hc = &http.Client{Transport: tr}
	}
	// A payment API has no business redirecting: a followed redirect could
	// resend the payment elsewhere. A 3xx is classified as unexpected.
	c.hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c, nil
}

// ParseBaseURL parses a bank's base URL as every client takes it: http or
// https, a host, no query or fragment, and no user info: where the
// credential belongs instead is said by credential ("the token belongs in
// SETTLE_BANK_TOKEN"). Its errors never hold the URL's user info.
func ParseBaseURL(raw, credential string) (*url.URL, error) {
	base, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, err
	case base.Scheme != "http" && base.Scheme != "https":
		return nil, fmt.Errorf("scheme %q is not http or https", base.Scheme)
	case base.Host == "":
		return nil, errors.New("no host")
	case base.User != nil:
		return nil, fmt.Errorf("%s, not in the URL", credential)
	case base.RawQuery != "" || base.Fragment != "":
		return nil, errors.New("it must not carry a query or fragment")
	}
	return base, nil
}

// CheckToken refuses a credential that cannot travel in a header, named
// name in the error. Its errors never contain the credential.
func CheckToken(tok, name string) error {
	for i := 0; i < len(tok); i++ {
		if b := tok[i]; b <= ' ' || b >= 0x7f {
			return fmt.Errorf("%s contains a space, control or non-ASCII byte", name)
		}
	}
	return nil
}

// ParseRemote is what a connector's New checks before anything else: the
// base URL (ParseBaseURL), no credential over plain http to a bank not on
// this machine, a credential for such a bank at all, one that can travel
// in a header, and a rate that is not negative. bank names the bank and
// credential the kind of token in the errors ("Stripe", "secret key"),
// which never contain either. It returns the URL and whether the bank is
// on this machine.
func ParseRemote(baseURL string, opts Options, bank, credential string) (*url.URL, bool, error) {
	base, err := ParseBaseURL(baseURL, "the "+credential+" belongs in "+EnvToken)
	if err != nil {
		return nil, false, fmt.Errorf("error parsing %s URL: %w", bank, err)
	}
	loopback, err := checkScheme(base, opts, bank, credential)
	if err != nil {
		return nil, false, err
	}
	if opts.Token == "" && !loopback {
		return nil, false, fmt.Errorf("error configuring %s: no %s (set %s)", bank, credential, EnvToken)
	}
	if err := CheckToken(string(opts.Token), "the "+credential); err != nil {
		return nil, false, fmt.Errorf("error configuring %s: %w", bank, err)
	}
	if opts.RatePerSecond < 0 {
		return nil, false, fmt.Errorf("error configuring the bank rate: %g requests a second is negative", opts.RatePerSecond)
	}
	return base, loopback, nil
}

// ErrPlainHTTP is matched by the refusal to talk plain http to a bank that
// is not on this machine: anyone on the path could read the payments and
// answer "settled" for them.
var ErrPlainHTTP = errors.New("refusing plain http to a bank that is not on this machine")

// checkScheme is the transport check every client makes: https, or plain
// http to a bank on this machine (the fakebank), or, with
// opts.InsecureHTTP, to any bank but never with a credential; the last
// logs a loud line to opts.Logger. It reports whether the bank is on this
// machine. bank and credential name them in the errors.
func checkScheme(base *url.URL, opts Options, bank, credential string) (loopback bool, err error) {
	loopback = IsLoopback(base.Hostname())
	if base.Scheme == "https" || loopback {
		return loopback, nil
	}
	switch {
	case !opts.InsecureHTTP:
		return false, fmt.Errorf("error configuring %s: %w (%s): use https, or accept the risk with --bank-insecure-http (SETTLE_BANK_INSECURE_HTTP=true)", bank, ErrPlainHTTP, base.Host)
	case opts.Token != "":
		return false, fmt.Errorf("error configuring %s: %w (%s) with the %s, even with --bank-insecure-http", bank, ErrPlainHTTP, base.Host, credential)
	}
	if opts.Logger != nil {
		opts.Logger.Warn("INSECURE: the bank is reached over plain http (--bank-insecure-http): anyone on the network path can read every payment and answer \"settled\" for it; use https",
			"bank", bank, "host", base.Host)
	}
	return false, nil
}

// IsLoopback reports whether host names this machine.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NewTransport is the transport of a client of our own: a clone of
// http.DefaultTransport keeping up to 32 idle connections to the bank,
// TLS 1.2 at least, trusting the certificate authorities of the PEM bundle
// caFile, or the system's when it is empty.
func NewTransport(caFile string) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadCAs(caFile)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return tr, nil
}

// Transport is NewTransport(o.CAFile) keeping o.Conns idle connections to
// the bank when that is more than 32.
func (o Options) Transport() (*http.Transport, error) {
	tr, err := NewTransport(o.CAFile)
	if err != nil {
		return nil, err
	}
	tr.MaxIdleConnsPerHost = max(tr.MaxIdleConnsPerHost, o.Conns)
	tr.MaxIdleConns = max(tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	return tr, nil
}

// loadCAs reads a PEM bundle of certificate authorities.
func loadCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("error reading CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// Send implements Bank: POST /v1/payments with the Idempotency-Key header.
func (c *Client) Send(ctx context.Context, key string, req PaymentRequest) (SendResult, error) {
	if key == "" {
		return SendResult{}, errors.New("error sending payment: empty idempotency key")
	}
	if err := SettleConnector.Capabilities.CheckRequest(req); err != nil {
		return SendResult{}, fmt.Errorf("error sending payment %s: %w", key, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return SendResult{}, fmt.Errorf("error sending payment %s: error encoding request: %w", key, err)
	}
	res, err := call(ctx, c, OpSend, key, func(actx context.Context) (SendResult, string, error) {
		a, err := c.roundTrip(actx, http.MethodPost, c.endpoint("/v1/payments", nil), key, body)
		if err != nil {
			return SendResult{}, OutcomeAmbiguous, err
		}
		return classifySend(a, key, req)
	})
	if err != nil {
		return SendResult{}, fmt.Errorf("error sending payment %s: %w", key, err)
	}
	return res, nil
}

// StatusByKey implements Bank: GET /v1/payments/by-key/{key}.
func (c *Client) StatusByKey(ctx context.Context, key string) (Payment, error) {
	if key == "" {
		return Payment{}, errors.New("error getting payment status: empty idempotency key")
	}
	u := c.endpoint("/v1/payments/by-key/"+url.PathEscape(key), nil)
	p, err := call(ctx, c, OpStatus, key, func(actx context.Context) (Payment, string, error) {
		a, err := c.roundTrip(actx, http.MethodGet, u, "", nil)
		if err != nil {
			return Payment{}, OutcomeAmbiguous, err
		}
		return classifyStatus(a, key)
	})
	if err != nil {
		return Payment{}, fmt.Errorf("error getting payment status %s: %w", key, err)
	}
	return p, nil
}

// StatusByID implements IDLookup: GET /v1/payments/{id}, the payment by
// the bank's own id; a 404 matches ErrPaymentNotFound.
func (c *Client) StatusByID(ctx context.Context, id string) (Payment, error) {
	if id == "" {
		return Payment{}, errors.New("error getting payment: empty payment id")
	}
	u := c.endpoint("/v1/payments/"+url.PathEscape(id), nil)
	p, err := call(ctx, c, OpStatus, "", func(actx context.Context) (Payment, string, error) {
		a, err := c.roundTrip(actx, http.MethodGet, u, "", nil)
		if err != nil {
			return Payment{}, OutcomeAmbiguous, err
		}
		if a.status == http.StatusNotFound {
			return Payment{}, OutcomeNotFound, ErrPaymentNotFound
		}
		return classifyStatus(a, "")
	})
	if err != nil {
		return Payment{}, fmt.Errorf("error getting payment %s: %w", id, err)
	}
	if p.ID != id {
		return Payment{}, &AmbiguousError{Op: OpStatus, StatusCode: http.StatusOK, Attempts: 1,
			Err: fmt.Errorf("%w: asked for payment %s, got %s", ErrMalformedResponse, id, p.ID)}
	}
	return p, nil
}

// Statement implements Bank: GET /v1/statement?after=&limit=.
func (c *Client) Statement(ctx context.Context, after string, limit int) (StatementPage, error) {
	if limit < 0 {
		return StatementPage{}, fmt.Errorf("error reading statement: negative limit %d", limit)
	}
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	u := c.endpoint("/v1/statement", q)
	page, err := call(ctx, c, OpStatement, "", func(actx context.Context) (StatementPage, string, error) {
		a, err := c.roundTrip(actx, http.MethodGet, u, "", nil)
		if err != nil {
			return StatementPage{}, OutcomeAmbiguous, err
		}
		return classifyStatement(a)
	})
	if err != nil {
		return StatementPage{}, fmt.Errorf("error reading statement: %w", err)
	}
	return page, nil
}

// endpoint joins an escaped path and a query to the base URL.
func (c *Client) endpoint(escapedPath string, q url.Values) string {
	u := c.base.String() + escapedPath
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// roundTrip sends one request and reads its answer, bounded by the attempt's
// context. A transport failure is returned as a retryable *AmbiguousError.
func (c *Client) roundTrip(ctx context.Context, method, u, key string, body []byte) (answer, error) {
	if c.limiter != nil {
		if err := c.limiter.Wait(ctx); err != nil {
			// Nothing was sent: the wait for our turn outlasted the attempt
			// (if an earlier attempt of the call was sent, call reports
			// that one's ambiguity).
			return answer{}, fmt.Errorf("error waiting for the bank rate limit: %w", err)
		}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		// The URL was validated in New; this is a bug, and nothing was sent.
		return answer{}, backoff.Permanent(fmt.Errorf("error building request: %w", err))
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "settle-bankclient/1")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}

	resp, err := c.hc.Do(req)
	if err != nil {
		// A certificate the client does not trust will not become trusted
		// in a second: that is configuration, not a passing fault.
		var certErr *tls.CertificateVerificationError
		return answer{}, &AmbiguousError{Err: err, retry: !errors.As(err, &certErr)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return answer{}, &AmbiguousError{StatusCode: resp.StatusCode, Err: fmt.Errorf("error reading response body: %w", err), retry: true}
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: data}
	if int64(len(data)) > c.maxBody {
		a.body, a.tooLarge = data[:c.maxBody], true
	}
	return a, nil
}

// call runs attempt with the client's retry policy: ambiguous answers that
// may clear up are retried with exponential, jittered backoff; everything
// else, and the parent context ending, stops at once. The attempt must send
// the identical request every time.
func call[T any](ctx context.Context, c *Client, op, key string, attempt func(context.Context) (T, string, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("error before contacting bank: %w", err)
	}
	p := c.retry
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.InitialInterval),
		backoff.WithMaxInterval(p.MaxInterval),
		backoff.WithMultiplier(p.Multiplier),
		backoff.WithRandomizationFactor(p.RandomizationFactor),
		backoff.WithMaxElapsedTime(p.MaxElapsed),
	)
	policy := backoff.WithContext(backoff.WithMaxRetries(bo, uint64(p.MaxAttempts-1)), ctx)

	var (
		attempts int
		last     *AmbiguousError
	)
	rateLimitBudget := p.RateLimitWait
	once := func() (T, error) {
		attempts++
		actx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		start := time.Now()
		res, outcome, err := attempt(actx)
		if c.observe != nil {
			c.observe(op, outcome, time.Since(start))
		}
		return res, err
	}
	op1 := func() (T, error) {
		res, err := once()
		// 429 with Retry-After: the bank did nothing and said how long to
		// wait. Wait that long, within the call's budget, without counting
		// the attempt against MaxAttempts. (A 429 without it is retried
		// like any other passing fault.)
		for ae := (*AmbiguousError)(nil); errors.As(err, &ae) && ae.StatusCode == http.StatusTooManyRequests && ae.RetryAfter > 0; {
			wait := ae.RetryAfter
			if wait > rateLimitBudget || ctx.Err() != nil {
				break
			}
			rateLimitBudget -= wait
			c.logger.LogAttrs(ctx, slog.LevelInfo, "bank rate limit, waiting as asked",
				slog.String("op", op), slog.String("key", key), slog.Duration("wait", wait))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
			if ctx.Err() != nil {
				break
			}
			res, err = once()
		}
		if err == nil {
			return res, nil
		}
		var ae *AmbiguousError
		if !errors.As(err, &ae) {
			return zero, backoff.Permanent(err)
		}
		ae.Op, ae.Attempts = op, attempts
		last = ae
		if ctx.Err() != nil {
			// The parent is done: whatever the attempt saw, stop now, and
			// say so in the cause.
			ae.Err = fmt.Errorf("%w (%w)", ctx.Err(), ae.Err)
			return zero, backoff.Permanent(ae)
		}
		if !ae.retry || ae.RetryAfter > p.MaxInterval {
			return zero, backoff.Permanent(ae)
		}
		return zero, ae
	}
	notify := func(err error, wait time.Duration) {
		c.logger.LogAttrs(ctx, slog.LevelInfo, "bank answer ambiguous, retrying",
			slog.String("op", op),
			slog.String("key", key),
			slog.Int("attempt", attempts),
			slog.Int("status", last.StatusCode),
			slog.Duration("wait", wait),
			slog.String("error", err.Error()),
		)
	}
	res, err := backoff.RetryNotifyWithData(op1, policy, notify)
	if err == nil {
		return res, nil
	}
	if last != nil && !errors.As(err, new(*AmbiguousError)) {
		// backoff returns the bare context error when the parent ended
		// during a wait; the last answer is still ambiguous.
		last.Err = fmt.Errorf("%w (%w)", err, last.Err)
		return zero, last
	}
	return zero, err
}
