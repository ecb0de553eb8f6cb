package stripe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
)

// Client is a bankclient.Bank that pays settlements out through Stripe. It
// is safe for concurrent use.
type Client struct {
	sc      *stripe.Client
	api     stripe.Backend
	key     bankclient.Secret
	account string
	timeout time.Duration
	retry   bankclient.RetryPolicy
	logger  *slog.Logger
	observe func(op, outcome string, d time.Duration)
	limiter *bankhttp.Pacer
}

var (
	_ bankclient.Bank     = (*Client)(nil)
	_ bankclient.IDLookup = (*Client)(nil)
)

// New returns a client of Stripe's API at baseURL (DefaultURL, or a
// fakebank serving --profile stripe) with the secret key opts.Token and
// the connected account opts.Account. stripe-go's own network retries are
// off: the retries of opts.Retry are ours, under the same key.
func New(baseURL string, opts bankclient.Options) (*Client, error) {
	base, _, err := bankhttp.ParseRemote(baseURL, opts, "Stripe", "secret key")
	if err != nil {
		return nil, err
	}
	hc, err := httpClient(opts)
	if err != nil {
		return nil, err
	}
	u := strings.TrimSuffix(base.String(), "/")
	api := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		HTTPClient: hc,
		URL:        &u,
		// Every retry is ours (DESIGN.md section 13): stripe-go would
		// retry 409s and connection errors on its own, unclassified and
		// unobserved.
		MaxNetworkRetries: stripe.Int64(0),
		// stripe-go logs to the standard streams; our logs are ours.
		LeveledLogger:   &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry: stripe.Bool(false),
	})
	backends := &stripe.Backends{API: api, Connect: api, Uploads: api, MeterEvents: api}
	c := &Client{
		sc:      stripe.NewClient(string(opts.Token), stripe.WithBackends(backends)),
		api:     api,
		key:     opts.Token,
		account: opts.Account,
		timeout: opts.Timeout,
		retry:   opts.Retry.WithDefaults(),
		logger:  opts.Logger,
		observe: opts.Observe,
	}
	if c.timeout <= 0 {
		c.timeout = bankclient.DefaultTimeout
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if opts.RatePerSecond > 0 {
		c.limiter = bankhttp.NewPacer(opts.RatePerSecond)
	}
	return c, nil
}

// httpClient is opts.HTTPClient (copied) or a client of our own trusting
// opts.CAFile; either way it never follows a redirect, which could resend a
// payout elsewhere.
func httpClient(opts bankclient.Options) (*http.Client, error) {
	var hc http.Client
	switch {
	case opts.HTTPClient != nil && opts.CAFile != "":
		return nil, errors.New("error configuring Stripe TLS: CAFile cannot be combined with HTTPClient")
	case opts.HTTPClient != nil:
		hc = *opts.HTTPClient
	default:
		tr, err := bankhttp.Transport(opts)
		if err != nil {
			return nil, err
		}
		hc.Transport = tr
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hc, nil
}

// maxMetadataValue is the longest metadata value Stripe stores.
const maxMetadataValue = 500

// payoutParams is the payout of req: identical for identical requests, so
// a retry or replay under the same key is the same request to Stripe.
func (c *Client) payoutParams(req bankclient.PaymentRequest) *stripe.PayoutCreateParams {
	p := &stripe.PayoutCreateParams{
		Amount:      stripe.Int64(req.AmountCents),
		Currency:    stripe.String(strings.ToLower(req.Currency)),
		Destination: stripe.String(req.CreditorAccount),
		Description: stripe.String("settle " + req.Reference),
		Metadata:    map[string]string{"reference": req.Reference},
	}
	if req.SettlementID != "" && len(req.SettlementID) <= maxMetadataValue {
		p.Metadata["settlement_id"] = req.SettlementID
	}
	if c.account != "" {
		p.StripeAccount = stripe.String(c.account)
	}
	return p
}

// Send implements bankclient.Bank: POST /v1/payouts under the
// Idempotency-Key key. Within Stripe's key window a repeat of the request
// answers the original response, marked Idempotent-Replayed: its status is
// as it was then.
func (c *Client) Send(ctx context.Context, key string, req bankclient.PaymentRequest) (bankclient.SendResult, error) {
	switch {
	case key == "" || len(key) > Capabilities.KeyMaxLen:
		return bankclient.SendResult{}, fmt.Errorf("error sending payout: idempotency key of %d characters", len(key))
	}
	if err := Capabilities.CheckRequest(req); err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payout %s: %w", key, err)
	}
	res, err := call(ctx, c, bankclient.OpSend, key, func(actx context.Context) (bankclient.SendResult, answer) {
		params := c.payoutParams(req)
		params.IdempotencyKey = stripe.String(key)
		po, err := c.sc.V1Payouts.Create(actx, params)
		if err != nil {
			return bankclient.SendResult{}, classify(err, true)
		}
		p, err := c.payment(po)
		if err != nil {
			return bankclient.SendResult{}, malformed(err)
		}
		replayed := po.LastResponse != nil && po.LastResponse.Header.Get("Idempotent-Replayed") == "true"
		out := bankclient.OutcomeAccepted
		if replayed {
			out = bankclient.OutcomeReplayed
		}
		return bankclient.SendResult{Payment: p, Replayed: replayed}, answer{outcome: out}
	})
	if err != nil {
		return bankclient.SendResult{}, fmt.Errorf("error sending payout %s: %w", key, err)
	}
	return res, nil
}

// StatusByKey implements bankclient.Bank: Stripe cannot be asked about a
// payout by its idempotency key.
func (c *Client) StatusByKey(context.Context, string) (bankclient.Payment, error) {
	return bankclient.Payment{}, bankclient.ErrUnsupported
}

// StatusByID implements bankclient.IDLookup: GET /v1/payouts/{id}; a
// payout Stripe does not hold matches bankclient.ErrPaymentNotFound.
func (c *Client) StatusByID(ctx context.Context, id string) (bankclient.Payment, error) {
	if id == "" {
		return bankclient.Payment{}, errors.New("error getting payout: empty payout id")
	}
	p, err := call(ctx, c, bankclient.OpStatus, "", func(actx context.Context) (bankclient.Payment, answer) {
		params := &stripe.PayoutRetrieveParams{}
		if c.account != "" {
			params.StripeAccount = stripe.String(c.account)
		}
		po, err := c.sc.V1Payouts.Retrieve(actx, id, params)
		if err != nil {
			return bankclient.Payment{}, classify(err, false)
		}
		p, err := c.payment(po)
		if err != nil {
			return bankclient.Payment{}, malformed(err)
		}
		if p.ID != id {
			return bankclient.Payment{}, malformed(fmt.Errorf("asked for payout %s, got %s", id, p.ID))
		}
		return p, answer{outcome: bankclient.OutcomeAccepted}
	})
	if err != nil {
		return bankclient.Payment{}, fmt.Errorf("error getting payout %s: %w", id, err)
	}
	return p, nil
}

// MaxListLimit is the largest page GET /v1/payouts serves.
const MaxListLimit = 100

// Statement implements bankclient.Bank: one page of GET /v1/payouts,
// newest first, after the payout id after (Stripe's starting_after); limit
// is capped at MaxListLimit.
func (c *Client) Statement(ctx context.Context, after string, limit int) (bankclient.StatementPage, error) {
	return c.list(ctx, time.Time{}, "", after, limit)
}

// StatementSince is Statement restricted to the payouts created at or after
// since (the list's created[gte] filter): bankclient.Searcher. Stripe lists
// newest first, so a search after a lost answer reads the payouts of the
// last hours, not the account's whole history.
func (c *Client) StatementSince(ctx context.Context, since time.Time, after string, limit int) (bankclient.StatementPage, error) {
	return c.list(ctx, since, "", after, limit)
}

// ReturnedSince implements bankclient.ReturnLister: the payouts created at
// or after since whose status is failed now (GET /v1/payouts with
// status=failed). A payout of a confirmed settlement was paid, so failed
// is its return (Capabilities.FailedAfterSettledIsReturn); the others
// (failed without ever being paid) are no settlement's return, and the
// watch passes over them.
func (c *Client) ReturnedSince(ctx context.Context, since time.Time, after string, limit int) (bankclient.StatementPage, error) {
	return c.list(ctx, since, string(stripe.PayoutStatusFailed), after, limit)
}

// list reads one page of the payout list, created at or after since when
// since is not zero, of that status when status is not empty.
func (c *Client) list(ctx context.Context, since time.Time, status, after string, limit int) (bankclient.StatementPage, error) {
	if limit < 0 {
		return bankclient.StatementPage{}, fmt.Errorf("error listing payouts: negative limit %d", limit)
	}
	if limit == 0 || limit > MaxListLimit {
		limit = MaxListLimit
	}
	page, err := call(ctx, c, bankclient.OpStatement, "", func(actx context.Context) (bankclient.StatementPage, answer) {
		params := &stripe.PayoutListParams{}
		params.Context = actx
		params.Limit = stripe.Int64(int64(limit))
		if after != "" {
			params.StartingAfter = stripe.String(after)
		}
		if !since.IsZero() {
			params.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}
		}
		if status != "" {
			params.Status = stripe.String(status)
		}
		if c.account != "" {
			params.StripeAccount = stripe.String(c.account)
		}
		// As stripe-go's own list does: the parameters form-encoded into
		// the query (its Call cannot encode list parameters).
		q := &form.Values{}
		form.AppendTo(q, params)
		list := &stripe.PayoutList{}
		if err := c.api.CallRaw(http.MethodGet, "/v1/payouts", string(c.key), []byte(q.Encode()), params.GetParams(), list); err != nil {
			return bankclient.StatementPage{}, classify(err, false)
		}
		if len(list.Data) > limit {
			return bankclient.StatementPage{}, malformed(fmt.Errorf("asked for %d payouts, got %d", limit, len(list.Data)))
		}
		pg := bankclient.StatementPage{Payments: make([]bankclient.Payment, 0, len(list.Data))}
		for _, po := range list.Data {
			p, err := c.payment(po)
			if err != nil {
				return bankclient.StatementPage{}, malformed(err)
			}
			pg.Payments = append(pg.Payments, p)
		}
		if list.HasMore && len(pg.Payments) > 0 {
			pg.Next = pg.Payments[len(pg.Payments)-1].ID
		}
		return pg, answer{outcome: bankclient.OutcomeAccepted}
	})
	if err != nil {
		return bankclient.StatementPage{}, fmt.Errorf("error listing payouts: %w", err)
	}
	return page, nil
}

// answer is how one attempt ended: the outcome reported to
// Options.Observe, the classified error, and whether another attempt
// under the same key may help.
type answer struct {
	outcome string
	err     error
	retry   bool
}

// call runs attempt under the client's retry policy (see
// bankhttp.RetryCall), each attempt after its turn under the client's
// rate limit.
func call[T any](ctx context.Context, c *Client, op, key string, attempt func(context.Context) (T, answer)) (T, error) {
	r := bankhttp.Retrier{
		Policy:  c.retry,
		Timeout: c.timeout,
		Observe: c.observe,
		Peer:    "Stripe",
		Retrying: func(ctx context.Context, op, key string, attempt int, ae *bankclient.AmbiguousError, wait time.Duration) {
			c.logger.LogAttrs(ctx, slog.LevelInfo, "stripe answer ambiguous, retrying under the same key",
				slog.String("op", op), slog.String("key", key), slog.Int("attempt", attempt),
				slog.Int("status", ae.StatusCode), slog.Duration("wait", wait), slog.String("error", ae.Err.Error()))
		},
	}
	if c.limiter != nil {
		r.Wait = func(ctx context.Context) error {
			if err := c.limiter.Wait(ctx); err != nil {
				return fmt.Errorf("error waiting for the bank rate limit: %w", err)
			}
			return nil
		}
	}
	return bankhttp.RetryCall(ctx, r, op, key, func(actx context.Context) (T, bankhttp.Attempt) {
		res, a := attempt(actx)
		return res, bankhttp.Attempt{Outcome: a.outcome, Err: a.err, Retry: a.retry}
	})
}
