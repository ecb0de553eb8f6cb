package obie

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/obie/jws"
)

// APIPath is where the payment initiation resources live under the bank's
// address: the OpenAPI document's server, "[participant-path-prefix]/
// open-banking/[version]/[resource-group]" (read-write data API profile,
// Resource URI Path Structure). A base URL that already ends in
// /open-banking/v<version>/pisp is taken as it is.
const APIPath = "/open-banking/v3.1/pisp"

// apiPathRE recognises a base URL that already names the API.
var apiPathRE = regexp.MustCompile(`/open-banking/v[0-9]+(\.[0-9]+)*/pisp$`)

// The operations' paths under the API.
const (
	pathConsents = "/domestic-payment-consents"
	pathPayments = "/domestic-payments"
)

// The request headers of the read-write data API profile.
const (
	HeaderInteractionID  = "x-fapi-interaction-id"
	HeaderIdempotencyKey = "x-idempotency-key"
	HeaderJWSSignature   = "x-jws-signature"
)

// MinDuplicateGap is the least time between two POSTs under one
// idempotency key: "The TPP must delay sending duplicate payment
// initiation requests using the same x-idempotency key for a minimum of 1
// second even if they have not received a response" (read-write data API
// profile, Idempotency). The client keeps to it for every POST it sends,
// the consent's too, in-call retries and replays alike.
const MinDuplicateGap = time.Second

// replaySkew is how much older than the call a resource's CreationDateTime
// must be before the answer is reported as a replay: Open Banking marks no
// replay (it answers 201 with the current resource either way), so only a
// resource created well before we first asked can be told apart, allowing
// for the two clocks to disagree.
const replaySkew = 5 * time.Minute

// Client is a bankclient.Bank paying through an Open Banking ASPSP's
// domestic payments API. It is safe for concurrent use.
type Client struct {
	base    string // scheme://host[/prefix]/open-banking/v3.1/pisp
	hc      *http.Client
	auth    bankclient.Secret // "Bearer <token>", or empty
	sign    *signer
	bankKey *rsa.PublicKey // nil: answers are not verified
	now     func() time.Time
	timeout time.Duration
	retry   bankclient.RetryPolicy
	maxBody int64
	logger  *slog.Logger
	observe func(op, outcome string, d time.Duration)
	limiter *bankhttp.Pacer
	pace    *pacer

	// The account holder's authorisation (authorise.go).
	keys                   *keys
	clientID               string
	authorizeURL, tokenURL string
}

var (
	_ bankclient.Bank      = (*Client)(nil)
	_ bankclient.IDLookup  = (*Client)(nil)
	_ bankclient.Consenter = (*Client)(nil)
)

// New returns a client of the ASPSP at baseURL (its host and any
// participant path prefix; APIPath is appended unless already there),
// with the bearer token, signing key, client certificate and CAs of opts
// and the signature claims of cfg. It will not start without a signing
// key (every POST must be signed) nor without a token key (the account
// holders' tokens are kept sealed with it).
func New(baseURL string, opts bankclient.Options, cfg Config) (*Client, error) {
	base, loopback, err := bankhttp.ParseRemote(baseURL, opts, "Open Banking", "access token")
	if err != nil {
		return nil, err
	}
	sg, err := newSigner(opts, cfg, loopback)
	if err != nil {
		return nil, err
	}
	var bankKey *rsa.PublicKey
	if cfg.BankKeyFile != "" {
		if bankKey, err = jws.ReadRSAPublicKey(cfg.BankKeyFile); err != nil {
			return nil, fmt.Errorf("error configuring Open Banking answer signatures: %s: %w", EnvBankKeyFile, err)
		}
	}
	hc, err := httpClient(opts, base.Scheme == "https")
	if err != nil {
		return nil, err
	}
	tokenKey, err := readTokenKey(cfg)
	if err != nil {
		return nil, err
	}
	ks, err := deriveKeys(tokenKey)
	if err != nil {
		return nil, err
	}
	clientID := cfg.ClientID
	if clientID == "" {
		if !loopback {
			return nil, fmt.Errorf("error configuring Open Banking: no client id at the bank's authorisation server (set %s)", EnvClientID)
		}
		clientID = DefaultClientID
	}
	authorizeURL, tokenURL := cfg.AuthorizeURL, cfg.TokenURL
	for _, u := range []*string{&authorizeURL, &tokenURL} {
		if *u == "" {
			continue
		}
		if pu, err := url.Parse(*u); err != nil || !pu.IsAbs() || (pu.Scheme != "https" && (pu.Scheme != "http" || !loopback)) {
			return nil, fmt.Errorf("error configuring Open Banking: %s and %s must be absolute https URLs", EnvAuthorizeURL, EnvTokenURL)
		}
	}
	if authorizeURL == "" {
		authorizeURL = base.Scheme + "://" + base.Host + "/authorize"
	}
	if tokenURL == "" {
		tokenURL = base.Scheme + "://" + base.Host + "/token"
	}

	path := strings.TrimSuffix(base.EscapedPath(), "/")
	if !apiPathRE.MatchString(path) {
		path += APIPath
	}
	c := &Client{
		base:    base.Scheme + "://" + base.Host + path,
		hc:      hc,
		sign:    sg,
		bankKey: bankKey,
		now:     cfg.Now,
		timeout: opts.Timeout,
		retry:   opts.Retry.WithDefaults(),
		maxBody: opts.MaxResponseSize,
		logger:  opts.Logger,
		observe: opts.Observe,

		keys:         ks,
		clientID:     clientID,
		authorizeURL: authorizeURL,
		tokenURL:     tokenURL,
	}
	if opts.Token != "" {
		c.auth = "Bearer " + opts.Token
	}
	if c.now == nil {
		c.now = time.Now
	}
	// The gap is wall-clock time, whatever clock the claims use.
	c.pace = &pacer{gap: MinDuplicateGap, now: time.Now, last: map[string]time.Time{}}
	if c.timeout <= 0 {
		c.timeout = bankclient.DefaultTimeout
	}
	if c.maxBody <= 0 {
		c.maxBody = bankclient.DefaultMaxResponseSize
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if opts.RatePerSecond > 0 {
		c.limiter = bankhttp.NewPacer(opts.RatePerSecond)
	}
	return c, nil
}

// httpClient is opts.HTTPClient (copied) or a client of our own with the
// client certificate of opts.CertFile/KeyFile and the CAs of opts.CAFile;
// either way it never follows a redirect, which could resend a payment
// elsewhere.
func httpClient(opts bankclient.Options, https bool) (*http.Client, error) {
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, fmt.Errorf("error configuring Open Banking TLS: a client certificate needs both %s and %s", bankclient.EnvCertFile, bankclient.EnvKeyFile)
	}
	if opts.CertFile != "" && !https {
		return nil, fmt.Errorf("error configuring Open Banking TLS: a client certificate (%s) is set but the bank URL is not https", bankclient.EnvCertFile)
	}
	var hc http.Client
	switch {
	case opts.HTTPClient != nil && (opts.CAFile != "" || opts.CertFile != ""):
		return nil, errors.New("error configuring Open Banking TLS: CAFile and CertFile cannot be combined with HTTPClient")
	case opts.HTTPClient != nil:
		hc = *opts.HTTPClient
	default:
		tr, err := bankhttp.Transport(opts)
		if err != nil {
			return nil, err
		}
		if opts.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("error loading the client certificate (%s, %s): %w", bankclient.EnvCertFile, bankclient.EnvKeyFile, err)
			}
			tr.TLSClientConfig.Certificates = []tls.Certificate{cert}
		}
		hc.Transport = tr
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hc, nil
}

// CreateConsent implements bankclient.Consenter: POST
// /domestic-payment-consents under the consent key. The same key and body
// again answers 201 with the consent as it is now.
func (c *Client) CreateConsent(ctx context.Context, key string, req bankclient.PaymentRequest) (bankclient.Consent, error) {
	if err := checkKey(key); err != nil {
		return bankclient.Consent{}, fmt.Errorf("error creating consent: %w", err)
	}
	body, in, err := consentBody(req)
	if err != nil {
		return bankclient.Consent{}, fmt.Errorf("error creating consent %s: %w", key, err)
	}
	con, err := post(ctx, c, c.auth, bankclient.OpConsent, key, pathConsents, body, func(a httpAnswer, start time.Time) (bankclient.Consent, answer) {
		if a.status != http.StatusCreated {
			return bankclient.Consent{}, classifyPost(a)
		}
		con, err := parseConsent(a.body, &in)
		if err != nil {
			return bankclient.Consent{}, malformed(a, err)
		}
		con.Replayed = con.Status == bankclient.ConsentConsumed || createdBefore(a.body, start.Add(-replaySkew))
		return con, answer{outcome: outcomeOf(con.Replayed)}
	})
	if err != nil {
		return bankclient.Consent{}, fmt.Errorf("error creating consent %s: %w", key, err)
	}
	return con, nil
}

// ConsentByID implements bankclient.Consenter: GET
// /domestic-payment-consents/{ConsentId}; one the bank does not hold
// matches bankclient.ErrPaymentNotFound.
func (c *Client) ConsentByID(ctx context.Context, id string) (bankclient.Consent, error) {
	if id == "" {
		return bankclient.Consent{}, errors.New("error getting consent: empty consent id")
	}
	con, err := get(ctx, c, bankclient.OpConsentStatus, pathConsents+"/"+url.PathEscape(id), func(a httpAnswer) (bankclient.Consent, answer) {
		if a.status != http.StatusOK {
			return bankclient.Consent{}, classifyGet(a)
		}
		con, err := parseConsent(a.body, nil)
		if err == nil && con.ID != id {
			err = fmt.Errorf("asked for consent %s, got %s", bankclient.Sanitize(id), bankclient.Sanitize(con.ID))
		}
		if err != nil {
			return bankclient.Consent{}, malformed(a, err)
		}
		return con, answer{outcome: bankclient.OutcomeAccepted}
	})
	if err != nil {
		return bankclient.Consent{}, fmt.Errorf("error getting consent %s: %w", bankclient.Sanitize(id), err)
	}
	return con, nil
}

// Send implements bankclient.Bank: POST /domestic-payments under the
// payment key, with req.ConsentID and the Initiation of the consent.
// Within the key window a repeat answers 201 with the payment as it is
// now; Replayed is set only when its CreationDateTime shows it older than
// the call (Open Banking does not mark replays).
func (c *Client) Send(ctx context.Context, key string, req bankclient.PaymentRequest) (bankclient.SendResult, error) {
	if err := checkKey(key); err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payment: %w", err)
	}
	body, in, err := paymentBody(req)
	if err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payment %s: %w", key, err)
	}
	auth, err := c.bearer(req)
	if err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payment %s: %w", key, err)
	}
	res, err := post(ctx, c, auth, bankclient.OpSend, key, pathPayments, body, func(a httpAnswer, start time.Time) (bankclient.SendResult, answer) {
		if a.status != http.StatusCreated {
			return bankclient.SendResult{}, classifyPost(a)
		}
		p, err := parsePayment(a.body, req.ConsentID, &in)
		if err != nil {
			return bankclient.SendResult{}, malformed(a, err)
		}
		replayed := createdBefore(a.body, start.Add(-replaySkew))
		return bankclient.SendResult{Payment: p, Replayed: replayed}, answer{outcome: outcomeOf(replayed)}
	})
	if err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payment %s: %w", key, err)
	}
	return res, nil
}

// StatusByID implements bankclient.IDLookup: GET
// /domestic-payments/{DomesticPaymentId}; a payment the bank does not hold
// matches bankclient.ErrPaymentNotFound.
func (c *Client) StatusByID(ctx context.Context, id string) (bankclient.Payment, error) {
	if id == "" {
		return bankclient.Payment{}, errors.New("error getting payment: empty payment id")
	}
	p, err := get(ctx, c, bankclient.OpStatus, pathPayments+"/"+url.PathEscape(id), func(a httpAnswer) (bankclient.Payment, answer) {
		if a.status != http.StatusOK {
			return bankclient.Payment{}, classifyGet(a)
		}
		p, err := parsePayment(a.body, "", nil)
		if err == nil && p.ID != id {
			err = fmt.Errorf("asked for payment %s, got %s", bankclient.Sanitize(id), bankclient.Sanitize(p.ID))
		}
		if err != nil {
			return bankclient.Payment{}, malformed(a, err)
		}
		return p, answer{outcome: bankclient.OutcomeAccepted}
	})
	if err != nil {
		return bankclient.Payment{}, fmt.Errorf("error getting payment %s: %w", bankclient.Sanitize(id), err)
	}
	return p, nil
}

// StatusByKey implements bankclient.Bank: Open Banking cannot be asked
// about a payment by its idempotency key.
func (c *Client) StatusByKey(context.Context, string) (bankclient.Payment, error) {
	return bankclient.Payment{}, bankclient.ErrUnsupported
}

// Statement implements bankclient.Bank: Open Banking's payment initiation
// API has no list of payments (reconciliation reads imported statements).
func (c *Client) Statement(context.Context, string, int) (bankclient.StatementPage, error) {
	return bankclient.StatementPage{}, bankclient.ErrUnsupported
}

// checkKey refuses a key the bank would refuse (nothing is sent).
func checkKey(key string) error {
	if key == "" || len(key) > KeyMaxLen || strings.TrimSpace(key) != key {
		return fmt.Errorf("idempotency key of %d characters (1 to %d, no surrounding space)", len(key), KeyMaxLen)
	}
	return nil
}

func outcomeOf(replayed bool) string {
	if replayed {
		return bankclient.OutcomeReplayed
	}
	return bankclient.OutcomeAccepted
}

// httpAnswer is one HTTP answer of the bank, read and bounded.
type httpAnswer struct {
	status        int
	header        http.Header
	body          []byte
	tooLarge      bool
	interactionID string
}

// answer is how one attempt ended: the outcome reported to
// Options.Observe, the classified error, and whether another attempt
// under the same key may help.
type answer struct {
	outcome string
	err     error
	retry   bool
}

// post sends body to path under key, signed once for the whole call: every
// attempt is the identical request, signature included (PS256 signatures
// are randomised, so signing again would change it).
func post[T any](ctx context.Context, c *Client, auth bankclient.Secret, op, key, path string, body []byte, parse func(httpAnswer, time.Time) (T, answer)) (T, error) {
	var zero T
	sig, err := c.sign.sign(body, c.now())
	if err != nil {
		return zero, err
	}
	start := c.now()
	return call(ctx, c, op, key, func(actx context.Context) (T, answer) {
		if err := c.pace.wait(actx, key); err != nil {
			return zero, answer{outcome: bankclient.OutcomeAmbiguous, err: fmt.Errorf("error waiting a second between requests under one key: %w", err)}
		}
		a, fail := c.roundTrip(actx, auth, http.MethodPost, path, key, body, sig)
		// The next duplicate waits a second from now: from when this one
		// was done with, so however long it took to reach the bank, the
		// bank sees them at least a second apart.
		c.pace.mark(key)
		if fail != nil {
			return zero, *fail
		}
		return parse(a, start)
	})
}

// get reads path.
func get[T any](ctx context.Context, c *Client, op, path string, parse func(httpAnswer) (T, answer)) (T, error) {
	var zero T
	return call(ctx, c, op, "", func(actx context.Context) (T, answer) {
		a, fail := c.roundTrip(actx, c.auth, http.MethodGet, path, "", nil, "")
		if fail != nil {
			return zero, *fail
		}
		return parse(a)
	})
}

// roundTrip sends one request with the profile's headers and reads its
// answer. A transport failure comes back as the attempt's answer.
func (c *Client) roundTrip(ctx context.Context, auth bankclient.Secret, method, path, key string, body []byte, sig string) (httpAnswer, *answer) {
	if c.limiter != nil {
		if err := c.limiter.Wait(ctx); err != nil {
			return httpAnswer{}, &answer{outcome: bankclient.OutcomeAmbiguous, err: fmt.Errorf("error waiting for the bank rate limit: %w", err)}
		}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		// The URL was validated in New: a bug, and nothing was sent.
		return httpAnswer{}, &answer{outcome: bankclient.OutcomeAmbiguous, err: fmt.Errorf("error building request: %w", err)}
	}
	iid := uuid.NewString()
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "settle-bankclient-obie/1")
	req.Header.Set(HeaderInteractionID, iid)
	if auth != "" {
		req.Header.Set("Authorization", string(auth))
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderIdempotencyKey, key)
		req.Header.Set(HeaderJWSSignature, sig)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// A certificate the client does not trust, or a handshake the
		// bank refuses, will not mend in a second: configuration.
		var certErr *tls.CertificateVerificationError
		return httpAnswer{}, &answer{
			outcome: bankclient.OutcomeAmbiguous,
			err:     &bankclient.AmbiguousError{Err: fmt.Errorf("%w (%s %s)", err, HeaderInteractionID, iid)},
			retry:   !errors.As(err, &certErr),
		}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return httpAnswer{}, &answer{
			outcome: bankclient.OutcomeAmbiguous,
			err:     &bankclient.AmbiguousError{StatusCode: resp.StatusCode, Err: fmt.Errorf("error reading response body (%s %s): %w", HeaderInteractionID, iid, err)},
			retry:   true,
		}
	}
	a := httpAnswer{status: resp.StatusCode, header: resp.Header, body: data, interactionID: iid}
	if int64(len(data)) > c.maxBody {
		a.body, a.tooLarge = data[:c.maxBody], true
	}
	if c.bankKey != nil && (a.status == http.StatusOK || a.status == http.StatusCreated || a.status == http.StatusBadRequest) {
		// An answer we would act on that the bank did not sign is not
		// the bank's word: not acted on, and not definitive.
		if err := jws.Verify(resp.Header.Get(HeaderJWSSignature), a.body, c.bankKey, c.now()); err != nil || a.tooLarge {
			if err == nil {
				err = errors.New("the body is larger than the size limit")
			}
			return httpAnswer{}, &answer{
				outcome: bankclient.OutcomeAmbiguous,
				err: &bankclient.AmbiguousError{StatusCode: a.status,
					Err: fmt.Errorf("%w: the answer's %s does not verify with the bank's key (%s): %w (%s %s)", bankclient.ErrMalformedResponse, HeaderJWSSignature, EnvBankKeyFile, err, HeaderInteractionID, iid)},
				retry: a.status != http.StatusBadRequest,
			}
		}
	}
	return a, nil
}

// call runs attempt under the client's retry policy (see
// bankhttp.RetryCall). A definitive answer after an ambiguous one is
// reported as the ambiguous one: a wait before the later attempt (the rate
// limit, the duplicate gap) may have ended it, but an earlier attempt did
// leave, and its answer is what the caller must know.
func call[T any](ctx context.Context, c *Client, op, key string, attempt func(context.Context) (T, answer)) (T, error) {
	r := bankhttp.Retrier{
		Policy:         c.retry,
		Timeout:        c.timeout,
		Observe:        c.observe,
		Peer:           "the bank",
		FoldDefinitive: true,
		Ambiguous: func(ctx context.Context, op, key string, attempt int, ae *bankclient.AmbiguousError) {
			c.logger.LogAttrs(ctx, slog.LevelWarn, "Open Banking answer not definitive",
				slog.String("op", op), slog.String("key", key), slog.Int("attempt", attempt),
				slog.Int("status", ae.StatusCode), slog.String("error", ae.Err.Error()))
		},
	}
	return bankhttp.RetryCall(ctx, r, op, key, func(actx context.Context) (T, bankhttp.Attempt) {
		res, a := attempt(actx)
		return res, bankhttp.Attempt{Outcome: a.outcome, Err: a.err, Retry: a.retry}
	})
}

// pacer keeps POSTs under one idempotency key at least gap apart (see
// MinDuplicateGap). It remembers only the keys used within the last gap:
// it delays, it never deduplicates.
type pacer struct {
	gap  time.Duration
	now  func() time.Time
	mu   sync.Mutex
	last map[string]time.Time
}

// mark records that a POST under key has just been done with.
func (p *pacer) mark(key string) {
	p.mu.Lock()
	p.last[key] = p.now()
	p.mu.Unlock()
}

// wait returns once a POST under key may leave, and records that it does.
func (p *pacer) wait(ctx context.Context, key string) error {
	for {
		p.mu.Lock()
		now := p.now()
		for k, t := range p.last {
			if now.Sub(t) >= p.gap {
				delete(p.last, k)
			}
		}
		t, seen := p.last[key]
		if !seen {
			p.last[key] = now
			p.mu.Unlock()
			return nil
		}
		d := p.gap - now.Sub(t)
		p.mu.Unlock()
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}
