package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/settle/settle/bankclient/bankhttp"
)

// DefaultWebhookTimeout bounds one webhook attempt, answer included.
const DefaultWebhookTimeout = 10 * time.Second

// maxKeptBody is how much of a receiver's answer is kept for the operator.
const maxKeptBody = 1024

// ErrPlainHTTP is matched (errors.Is) by a webhook URL that is plain HTTP
// to a host other than this machine's loopback.
var ErrPlainHTTP = errors.New("plain http to a host other than loopback")

// Webhook is a sink that POSTs each event to a URL, signed as the Standard
// Webhooks specification says.
type Webhook struct {
	url    string
	name   string
	signer *Signer
	client *http.Client
	now    func() time.Time
}

// WebhookConfig configures NewWebhook.
type WebhookConfig struct {
	// URL receives the events (https, or http to loopback).
	URL string
	// Signer signs them (ParseSecrets).
	Signer *Signer
	// Timeout bounds one attempt (default DefaultWebhookTimeout).
	Timeout time.Duration
	// Now is the clock of webhook-timestamp (default time.Now).
	Now func() time.Time
}

// ParseWebhookURL checks a --events-url: absolute http(s), no plain HTTP
// to another machine.
func ParseWebhookURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("invalid --events-url %q: want https://host[:port]/path", redact(raw))
	}
	if u.Scheme == "http" && !bankhttp.IsLoopback(u.Hostname()) {
		return nil, fmt.Errorf("invalid --events-url %q: %w (use https)", redact(raw), ErrPlainHTTP)
	}
	return u, nil
}

// redact drops a URL's user information, for messages and the sink's name.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// NewWebhook returns the webhook sink of cfg.URL.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	if _, err := ParseWebhookURL(cfg.URL); err != nil {
		return nil, err
	}
	if cfg.Signer == nil {
		return nil, fmt.Errorf("webhook %s: %w (set SETTLE_EVENTS_SECRET to whsec_<base64>)", redact(cfg.URL), ErrNoSecret)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultWebhookTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.DialContext = (&net.Dialer{Timeout: cfg.Timeout}).DialContext
	transport.MaxIdleConnsPerHost = 32
	return &Webhook{
		url: cfg.URL, name: redact(cfg.URL), signer: cfg.Signer, now: cfg.Now,
		client: &http.Client{
			Timeout:   cfg.Timeout,
			Transport: transport,
			// A redirect is an answer other than 2xx: never follow it
			// with a signed body to another place.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// Name is the URL without user information.
func (w *Webhook) Name() string { return w.name }

// Deliver POSTs e, signed; only a 2xx answer delivers it.
func (w *Webhook) Deliver(ctx context.Context, e Event) Result {
	body, err := e.Body()
	if err != nil {
		return Result{Err: fmt.Errorf("error encoding event %s: %w", e.ID, err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, strings.NewReader(string(body)))
	if err != nil {
		return Result{Err: fmt.Errorf("error building the request for event %s: %w", e.ID, err)}
	}
	at := w.now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "settle-events")
	req.Header.Set("webhook-id", e.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	req.Header.Set("webhook-signature", w.signer.Sign(e.ID, at, body))
	resp, err := w.client.Do(req)
	if err != nil {
		return Result{Err: fmt.Errorf("error posting event %s: %w", e.ID, err)}
	}
	defer resp.Body.Close()
	kept, _ := io.ReadAll(io.LimitReader(resp.Body, maxKeptBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	r := Result{Status: resp.StatusCode, Body: keepable(kept)}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		r.Err = fmt.Errorf("event %s: receiver answered %d", e.ID, resp.StatusCode)
	}
	return r
}

// keepable is the start of an answer as text PostgreSQL can store: valid
// UTF-8, no NUL, at most maxKeptBody bytes.
func keepable(b []byte) string {
	if len(b) > maxKeptBody {
		b = b[:maxKeptBody]
	}
	s := strings.ToValidUTF8(string(b), string(utf8.RuneError))
	return strings.ReplaceAll(s, "\x00", "")
}
