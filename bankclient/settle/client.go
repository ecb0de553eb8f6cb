package settle

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
)

// Client is the HTTP implementation of Bank. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	hc      *http.Client
	timeout time.Duration
	retry   bankclient.RetryPolicy
	auth    string // "Bearer <token>", or empty
	maxBody int64
	logger  *slog.Logger
	observe func(op, outcome string, d time.Duration)
	limiter *bankhttp.Pacer // nil: no cap
}

var _ bankclient.Bank = (*Client)(nil)

// New returns a client of the bank at baseURL (for example
// "https://bank.example/" or "http://127.0.0.1:8081"). It reads no global
// configuration: everything comes from opts (see OptionsFromEnv).
func New(baseURL string, opts bankclient.Options) (*Client, error) {
	base, err := bankhttp.ParseBaseURL(baseURL, "credentials belong in bankclient.Options.Token")
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
		c.timeout = bankclient.DefaultTimeout
	}
	if c.maxBody <= 0 {
		c.maxBody = bankclient.DefaultMaxResponseSize
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if opts.RatePerSecond < 0 {
		return nil, fmt.Errorf("error configuring the bank rate: %g requests a second is negative", opts.RatePerSecond)
	}
	if opts.RatePerSecond > 0 {
		c.limiter = bankhttp.NewPacer(opts.RatePerSecond)
	}

	if _, err := bankhttp.CheckScheme(base, opts, "bank", "credential"); err != nil {
		return nil, err
	}
	if opts.Token != "" {
		if err := bankhttp.CheckToken(string(opts.Token), "credential"); err != nil {
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
		tr, err := bankhttp.Transport(opts)
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

// Send implements Bank: POST /v1/payments with the Idempotency-Key header.
func (c *Client) Send(ctx context.Context, key string, req bankclient.PaymentRequest) (bankclient.SendResult, error) {
	if key == "" {
		return bankclient.SendResult{}, errors.New("error sending payment: empty idempotency key")
	}
	if err := Connector.Capabilities.CheckRequest(req); err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payment %s: %w", key, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payment %s: error encoding request: %w", key, err)
	}
	res, err := call(ctx, c, bankclient.OpSend, key, func(actx context.Context) (bankclient.SendResult, string, error) {
		a, err := c.roundTrip(actx, http.MethodPost, c.endpoint("/v1/payments", nil), key, body)
		if err != nil {
			return bankclient.SendResult{}, bankclient.OutcomeAmbiguous, err
		}
		return classifySend(a, key, req)
	})
	if err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payment %s: %w", key, err)
	}
	return res, nil
}

// StatusByKey implements Bank: GET /v1/payments/by-key/{key}.
func (c *Client) StatusByKey(ctx context.Context, key string) (bankclient.Payment, error) {
	if key == "" {
		return bankclient.Payment{}, errors.New("error getting payment status: empty idempotency key")
	}
	u := c.endpoint("/v1/payments/by-key/"+url.PathEscape(key), nil)
	p, err := call(ctx, c, bankclient.OpStatus, key, func(actx context.Context) (bankclient.Payment, string, error) {
		a, err := c.roundTrip(actx, http.MethodGet, u, "", nil)
		if err != nil {
			return bankclient.Payment{}, bankclient.OutcomeAmbiguous, err
		}
		return classifyStatus(a, key)
	})
	if err != nil {
		return bankclient.Payment{}, fmt.Errorf("error getting payment status %s: %w", key, err)
	}
	return p, nil
}

// StatusByID implements IDLookup: GET /v1/payments/{id}, the payment by
// the bank's own id; a 404 matches ErrPaymentNotFound.
func (c *Client) StatusByID(ctx context.Context, id string) (bankclient.Payment, error) {
	if id == "" {
		return bankclient.Payment{}, errors.New("error getting payment: empty payment id")
	}
	u := c.endpoint("/v1/payments/"+url.PathEscape(id), nil)
	p, err := call(ctx, c, bankclient.OpStatus, "", func(actx context.Context) (bankclient.Payment, string, error) {
		a, err := c.roundTrip(actx, http.MethodGet, u, "", nil)
		if err != nil {
			return bankclient.Payment{}, bankclient.OutcomeAmbiguous, err
		}
		if a.status == http.StatusNotFound {
			return bankclient.Payment{}, bankclient.OutcomeNotFound, bankclient.ErrPaymentNotFound
		}
		return classifyStatus(a, "")
	})
	if err != nil {
		return bankclient.Payment{}, fmt.Errorf("error getting payment %s: %w", id, err)
	}
	if p.ID != id {
		return bankclient.Payment{}, &bankclient.AmbiguousError{Op: bankclient.OpStatus, StatusCode: http.StatusOK, Attempts: 1,
			Err: fmt.Errorf("%w: asked for payment %s, got %s", bankclient.ErrMalformedResponse, id, p.ID)}
	}
	return p, nil
}

// Statement implements Bank: GET /v1/statement?after=&limit=.
func (c *Client) Statement(ctx context.Context, after string, limit int) (bankclient.StatementPage, error) {
	if limit < 0 {
		return bankclient.StatementPage{}, fmt.Errorf("error reading statement: negative limit %d", limit)
	}
	u := c.endpoint("/v1/statement", pageQuery(url.Values{}, after, limit))
	page, err := call(ctx, c, bankclient.OpStatement, "", func(actx context.Context) (bankclient.StatementPage, string, error) {
		a, err := c.roundTrip(actx, http.MethodGet, u, "", nil)
		if err != nil {
			return bankclient.StatementPage{}, bankclient.OutcomeAmbiguous, err
		}
		return classifyStatement(a)
	})
	if err != nil {
		return bankclient.StatementPage{}, fmt.Errorf("error reading statement: %w", err)
	}
	return page, nil
}

// ReturnedSince implements bankclient.ReturnLister: GET
// /v1/returns?since=&after=&limit=, an optional endpoint of the protocol
// (the fakebank serves it). A bank without it answers 404 or 405, an
// error matching bankclient.ErrUnsupported: the return watch then asks
// payment by payment.
func (c *Client) ReturnedSince(ctx context.Context, since time.Time, after string, limit int) (bankclient.StatementPage, error) {
	if limit < 0 {
		return bankclient.StatementPage{}, fmt.Errorf("error listing returned payments: negative limit %d", limit)
	}
	q := url.Values{}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339Nano))
	}
	u := c.endpoint("/v1/returns", pageQuery(q, after, limit))
	page, err := call(ctx, c, bankclient.OpReturns, "", func(actx context.Context) (bankclient.StatementPage, string, error) {
		a, err := c.roundTrip(actx, http.MethodGet, u, "", nil)
		if err != nil {
			return bankclient.StatementPage{}, bankclient.OutcomeAmbiguous, err
		}
		if a.status == http.StatusNotFound || a.status == http.StatusMethodNotAllowed {
			return bankclient.StatementPage{}, bankclient.OutcomeNotFound,
				fmt.Errorf("%w: list of returned payments (HTTP %d)", bankclient.ErrUnsupported, a.status)
		}
		return classifyStatement(a)
	})
	if err != nil {
		return bankclient.StatementPage{}, fmt.Errorf("error listing returned payments: %w", err)
	}
	for _, p := range page.Payments {
		if p.Status != bankclient.StatusReturned {
			return bankclient.StatementPage{}, &bankclient.AmbiguousError{Op: bankclient.OpReturns, StatusCode: http.StatusOK, Attempts: 1,
				Err: fmt.Errorf("%w: payment %s in the list of returns is %s", bankclient.ErrMalformedResponse, p.ID, p.Status)}
		}
	}
	return page, nil
}

// pageQuery adds a page's cursor and limit (when set) to q.
func pageQuery(q url.Values, after string, limit int) url.Values {
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
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
		return answer{}, ambiguous(&bankclient.AmbiguousError{Err: err}, !errors.As(err, &certErr))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return answer{}, ambiguous(&bankclient.AmbiguousError{StatusCode: resp.StatusCode, Err: fmt.Errorf("error reading response body: %w", err)}, true)
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
		last     *bankclient.AmbiguousError
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
		for ae := (*bankclient.AmbiguousError)(nil); errors.As(err, &ae) && ae.StatusCode == http.StatusTooManyRequests && ae.RetryAfter > 0; {
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
		var ae *bankclient.AmbiguousError
		if !errors.As(err, &ae) {
			return zero, backoff.Permanent(err)
		}
		retry := mayRetry(err)
		ae.Op, ae.Attempts = op, attempts
		last = ae
		if ctx.Err() != nil {
			// The parent is done: whatever the attempt saw, stop now, and
			// say so in the cause.
			ae.Err = fmt.Errorf("%w (%w)", ctx.Err(), ae.Err)
			return zero, backoff.Permanent(ae)
		}
		if !retry || ae.RetryAfter > p.MaxInterval {
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
	if last != nil && !errors.As(err, new(*bankclient.AmbiguousError)) {
		// backoff returns the bare context error when the parent ended
		// during a wait; the last answer is still ambiguous.
		last.Err = fmt.Errorf("%w (%w)", err, last.Err)
		return zero, last
	}
	return zero, err
}
