package bankclient

import (
	"log/slog"
	"net/http"
	"time"
)

// Environment variables read by OptionsFromEnv.
const (
	EnvToken  = "SETTLE_BANK_TOKEN" //nolint:gosec // G101: the name of a variable, not a credential
	EnvCAFile = "SETTLE_BANK_CA_FILE"
	// EnvStripeAccount names the Stripe connected account payouts are
	// made for (the Stripe-Account header); empty: the platform's own.
	EnvStripeAccount = "SETTLE_STRIPE_ACCOUNT"
	// EnvSigningKeyFile is a PEM private key the client signs requests
	// with (Open Banking's x-jws-signature).
	EnvSigningKeyFile = "SETTLE_BANK_SIGNING_KEY_FILE"
	// EnvCertFile and EnvKeyFile are the PEM client certificate and key
	// for mutual TLS with the bank.
	EnvCertFile = "SETTLE_BANK_CERT_FILE"
	EnvKeyFile  = "SETTLE_BANK_KEY_FILE"
)

// DefaultURL is the bank settle talks to when told nothing else: the
// bundled fakebank's default address (settle fakebank).
const DefaultURL = "http://127.0.0.1:8081"

// Defaults of Options.
const (
	DefaultTimeout         = 10 * time.Second
	DefaultMaxResponseSize = 1 << 20
)

// Secret is a credential. It prints, logs and marshals as "[REDACTED]", so a
// struct holding one can be logged or formatted without leaking it.
type Secret string

const redacted = "[REDACTED]"

// String implements fmt.Stringer.
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer.
func (Secret) GoString() string { return redacted }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText implements encoding.TextMarshaler.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Options configures a Client. The zero value is usable: default timeout,
// default retry policy, no credential, system CAs, discarded logs.
type Options struct {
	// HTTPClient carries the requests. Nil means a client of this package's
	// own, which honours CAFile. It must not be combined with CAFile. Its
	// redirect policy is overridden: redirects are never followed.
	HTTPClient *http.Client
	// Timeout bounds each attempt (request and response body). 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Retry bounds the in-call retries of ambiguous answers. The zero value
	// means DefaultRetryPolicy.
	Retry RetryPolicy
	// Token is the bearer credential sent as "Authorization: Bearer <token>".
	// It is never logged nor included in an error. It is refused over plain
	// HTTP except to a loopback address.
	Token Secret
	// CAFile is a PEM file of certificate authorities to trust instead of the
	// system's, for banks with a private CA.
	CAFile string
	// MaxResponseSize bounds how much of a response body is read. A 2xx body
	// larger than this is malformed. 0 means DefaultMaxResponseSize.
	MaxResponseSize int64
	// Logger receives one event per retried attempt. Nil discards.
	Logger *slog.Logger
	// Observe, when set, is called after every HTTP attempt with the
	// operation (an Op constant), the outcome (an Outcome constant) and the
	// attempt's duration, so the engine can count
	// settle_bank_requests_total{bank,op,outcome} without this package importing
	// a metrics library. It must be quick and safe for concurrent use.
	Observe func(op, outcome string, d time.Duration)
	// RatePerSecond caps the requests this client sends a second (a token
	// bucket of one: requests are spaced evenly); 0 means no cap. It is per
	// client, and so per process: N workers send up to N times as many.
	RatePerSecond float64
	// Conns is how many requests the engine may have at the bank at once
	// (the worker's bank concurrency): a transport of this package's own
	// keeps that many idle connections to the bank (at least 32), so that
	// no request opens a connection (and its TLS handshake) only for the
	// one before it to close another.
	Conns int
	// Account is the account at the bank the client acts for, when the
	// bank has such a notion (Stripe's connected account, sent as
	// Stripe-Account); empty: the credential's own.
	Account string
	// SigningKeyFile is a PEM private key requests are signed with, for
	// banks that require signed requests (Open Banking's x-jws-signature);
	// a connector that signs refuses to start without it.
	SigningKeyFile string
	// CertFile and KeyFile are the PEM client certificate and its key
	// presented for mutual TLS; both or neither.
	CertFile string
	KeyFile  string
	// InsecureHTTP allows plain http to a bank that is not on this machine
	// (--bank-insecure-http), which is refused otherwise (ErrPlainHTTP):
	// anyone on the path could read the payments and answer "settled". A
	// credential never travels over it all the same, and the client logs a
	// loud line (Logger) when it is used.
	InsecureHTTP bool
}

// OptionsFromEnv returns Options holding the credential, CA file, account,
// signing key and client certificate from the environment
// (SETTLE_BANK_TOKEN, SETTLE_BANK_CA_FILE, SETTLE_STRIPE_ACCOUNT,
// SETTLE_BANK_SIGNING_KEY_FILE, SETTLE_BANK_CERT_FILE,
// SETTLE_BANK_KEY_FILE), read through getenv (pass os.Getenv). Everything
// else is left at its zero value.
func OptionsFromEnv(getenv func(string) string) Options {
	return Options{
		Token:          Secret(getenv(EnvToken)),
		CAFile:         getenv(EnvCAFile),
		Account:        getenv(EnvStripeAccount),
		SigningKeyFile: getenv(EnvSigningKeyFile),
		CertFile:       getenv(EnvCertFile),
		KeyFile:        getenv(EnvKeyFile),
	}
}

// RetryPolicy bounds the in-call retries of ambiguous answers: exponential
// backoff with jitter from github.com/cenkalti/backoff/v4. Retries always
// resend the identical body under the identical idempotency key.
type RetryPolicy struct {
	// MaxAttempts is the most requests one call sends, the first included.
	// 1 disables in-call retries.
	MaxAttempts int
	// MaxElapsed stops retrying once this much time has passed since the
	// call began (attempts included), so an attempt that timed out after
	// Options.Timeout is usually not retried.
	MaxElapsed time.Duration
	// InitialInterval is the first wait between attempts.
	InitialInterval time.Duration
	// MaxInterval caps a wait. A Retry-After from the bank longer than this
	// ends the in-call retries: the caller should wait that long instead.
	MaxInterval time.Duration
	// RateLimitWait bounds the time one call spends waiting out 429 answers
	// (each wait as long as its Retry-After asks). Such answers do not count
	// against MaxAttempts: the bank did nothing and asked us to slow down.
	// Past the budget the 429 is returned, ambiguous, with its RetryAfter.
	RateLimitWait time.Duration
	// Multiplier grows the wait after each attempt.
	Multiplier float64
	// RandomizationFactor jitters each wait by ± this fraction.
	RandomizationFactor float64
}

// DefaultRetryPolicy is three attempts within about two seconds.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:         3,
	MaxElapsed:          2 * time.Second,
	InitialInterval:     100 * time.Millisecond,
	MaxInterval:         1 * time.Second,
	RateLimitWait:       10 * time.Second,
	Multiplier:          2,
	RandomizationFactor: 0.5,
}

// WithDefaults fills the zero fields of p from DefaultRetryPolicy.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	d := DefaultRetryPolicy
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = d.MaxElapsed
	}
	if p.InitialInterval <= 0 {
		p.InitialInterval = d.InitialInterval
	}
	if p.MaxInterval <= 0 {
		p.MaxInterval = max(d.MaxInterval, p.InitialInterval)
	}
	if p.RateLimitWait <= 0 {
		p.RateLimitWait = d.RateLimitWait
	}
	if p.Multiplier < 1 {
		p.Multiplier = d.Multiplier
	}
	if p.RandomizationFactor <= 0 || p.RandomizationFactor >= 1 {
		p.RandomizationFactor = d.RandomizationFactor
	}
	return p
}
