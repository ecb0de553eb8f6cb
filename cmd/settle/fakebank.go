package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
)

const fakebankDescription = `
Runs the bundled bank simulator: the bank protocol of DESIGN.md section 7, with
injectable faults, for tests, the demo and the benchmark. It prints
"fakebank listening on <base URL>" on stdout once it accepts connections, and
stops gracefully on SIGTERM or SIGINT.

Protocol:
  POST /v1/payments                  Idempotency-Key header required (400 without);
                                     201 new payment, 200 + Idempotent-Replayed: true
                                     for the same key and body, 422
                                     {"error":"idempotency_key_reuse"} for another body,
                                     422 {"error":"rejected","reason":...} when refused
                                     (pinned to the key). Bodies over 64 KiB: 413.
  GET  /v1/payments/by-key/{key}     the payment, or 404 {"error":"not_found"}
  GET  /v1/statement?after=C&limit=N every payment in creation order; limit 1..1000
                                     (default 100); "next" is the cursor of the next page
  GET  /v1/statements/{date}         the books of that UTC day (YYYY-MM-DD; today: so far)
                                     as a bank statement file, one statement per account
                                     and currency: ?format=camt.053|camt.054|bai2|mt940,
                                     or Accept application/vnd.iso20022.camt.053+xml,
                                     application/vnd.iso20022.camt.054+xml,
                                     application/vnd.bai2, application/vnd.swift.mt940
                                     (default camt.053); ?batch=N books up to N payments
                                     in one camt entry (default 10); 404 when no account
                                     has a booking by then

Payments are accepted, processing from half the settle delay, then settled (or
failed, at settlement_failure_rate) once the settle delay has passed.

--profile stripe serves Stripe's payouts (POST/GET /v1/payouts).

--profile obie serves UK Open Banking domestic payments v3.1.11 under
/open-banking/v3.1/pisp (the published OpenAPI document's server path):
  POST /domestic-payment-consents          AwaitingAuthorisation until the account
                                           holder decides on /authorize, Consumed
                                           once paid
  GET  /domestic-payment-consents/{ConsentId}
  POST /domestic-payments                  only with the account holder's access
                                           token of its consent (401 for a token
                                           not issued or expired, 403 for a client
                                           credentials one or another consent's),
                                           under an Authorised consent with the
                                           same Initiation and Risk (else 400
                                           UK.OBIE.Resource.InvalidConsentStatus or
                                           UK.OBIE.Resource.ConsentMismatch)
  GET  /domestic-payments/{DomesticPaymentId}
                                           Pending, AcceptedSettlementInProcess,
                                           AcceptedSettlementCompleted, then
                                           AcceptedCreditSettlementCompleted (or
                                           Rejected); returns show only on statements
  The authorisation server (authorization code grant with PKCE):
  GET  /authorize                          the account holder's page: response_type=
                                           code, client_id, redirect_uri, scope with
                                           payments, state, code_challenge (S256),
                                           openbanking_intent_id=<ConsentId>; the
                                           page decides by itself consent_delay_ms
                                           after the consent was created (Rejected
                                           at consent_reject_rate) and redirects
                                           with code or error=access_denied; with
                                           --manual-authorisation it shows Approve
                                           and Reject
  POST /token                              grant_type authorization_code (code,
                                           redirect_uri, client_id, code_verifier),
                                           client_credentials or refresh_token
  Headers: Authorization: Bearer <token> (401 without); on POSTs
  Content-Type application/json (415), x-idempotency-key of at most 40
  characters (400 UK.OBIE.Header.Missing/Invalid), x-jws-signature (400
  UK.OBIE.Signature.Missing). The same key and body within 24 h (key_ttl_ms when
  set) answer 201 with the current resource; the same key with another body is
  400 UK.OBIE.Header.Invalid at path x-idempotency-key. Unknown ids are 400
  UK.OBIE.Resource.NotFound. Errors are OBErrorResponse1; answers are signed
  (x-jws-signature) and play back x-fapi-interaction-id. With --jws-public-key the
  bank verifies each POST's detached JWS (PS256, kid, the openbanking.org.uk
  iat/iss/tan claims, crit exactly those; 400 UK.OBIE.Signature.* otherwise,
  nothing created); WITHOUT it signatures are required but NOT verified.
  POST /admin/consents/{id}/authorise|reject decides an awaiting consent now
  (authorised: the page then hands out the code at once).
  Faults in this profile: fail_before_rate, drop_response_rate (half of the
  time) and status_error_rate answer 500 UK.OBIE.UnexpectedError; reject_rate
  makes a payment Rejected at once, settlement_failure_rate Rejected once due;
  rate_limit_per_s answers 429 with Retry-After. /admin/stats adds "consents",
  "consent_replays" and "consent_key_reuse_conflicts"; max_payments_per_reference
  counts payments per EndToEndIdentification.

--tls-cert and --tls-key serve HTTPS; --client-ca also requires a client
certificate issued by that CA (mutual TLS, as Open Banking requires).

Admin API:
  GET  /admin/faults   the fault profile
  PUT  /admin/faults   replaces the whole profile (absent fields are 0):
         fail_before_rate         answer 503 before processing a payment
         drop_response_rate       process the payment, then close the connection
                                  without answering or answer 504 (half each)
         status_error_rate        answer 503 to by-key status calls
         reject_rate              reject a new payment definitively (422)
         settlement_failure_rate  a new payment ends failed instead of settled
         latency_min_ms, latency_max_ms
                                  delay every /v1 answer, uniform in [min, max]
         settle_delay_ms          time from accepted to settled/failed
         key_ttl_ms               forget a key this long after its first use
                                  (0 = never; obie: 24 h): by-key then answers 404
                                  and a POST with the key creates a new payment
         return_rate, return_after_ms
                                  settled payments that come back that long after
         rate_limit_per_s         answer 429 with Retry-After past this rate
         consent_delay_ms         (obie) the account holder decides on the
                                  authorisation page this long after the consent
                                  was created (0 = at once)
         consent_reject_rate      (obie) consents the customer rejects
         token_error_rate, token_drop_rate
                                  (obie) /token answers 500 before issuing, or
                                  issues the token and loses the answer
         webhook_loss_rate, webhook_duplicate_rate, webhook_delay_max_ms
                                  (--webhook-url) status changes never pushed,
                                  pushed twice, and each push's random delay
       Rates are probabilities in [0, 1]; an invalid profile is 400.
  GET  /admin/stats    {"payments","replays","key_reuse_conflicts",
                        "max_executions_per_key","max_payments_per_reference"};
                       max_payments_per_reference above 1 means a double payment.
  POST /admin/returns  {"payment_id","reason"}: the settled payment comes back now
                       (reason an ISO 20022 return code, default AC04); 409 when
                       it has not settled

  curl -X PUT localhost:8081/admin/faults -d '{"drop_response_rate":0.2,"settle_delay_ms":500}'`

// cmdFakebank runs the bank simulator until ctx is cancelled.
func cmdFakebank(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("fakebank", "[flags]", fakebankDescription, s)
	listen := fs.String("listen", strings.TrimPrefix(bankclient.DefaultURL, "http://"), "address to listen on (port 0 picks a free port)")
	seed := fs.Int64("seed", 1, "seed of the random source behind every fault decision; the same seed and the same order of requests give the same decisions")
	state := fs.String("state", "", "file keeping the bank's books across restarts, written atomically before each answer (default: memory only)")
	faultsJSON := fs.String("faults", "", `initial fault profile as the JSON of PUT /admin/faults, e.g. '{"reject_rate":0.05}'`)
	settleDelay := fs.Duration("settle-delay", 200*time.Millisecond, "initial settle delay (overrides settle_delay_ms of --faults when given)")
	keyTTL := fs.Duration("key-ttl", 0, "initial key TTL, 0 = keys are never forgotten (overrides key_ttl_ms of --faults when given)")
	profile := fs.String("profile", "settle", "the API the bank serves its books through: "+strings.Join(fakebank.ProfileNames(), ", "))
	verbose := fs.Bool("verbose", false, "log every decision (payment created, replayed, rejected, fault injected)")
	manualAuth := fs.Bool("manual-authorisation", false, "obie: the authorisation page (/authorize) waits for the account holder's Approve or Reject instead of deciding by itself consent_delay_ms after the consent was created")
	jwsPublicKey := fs.String("jws-public-key", "", "obie: PEM file of the TPP's RSA public key (or certificate); the bank then verifies the x-jws-signature of every POST (without it, signatures are not verified)")
	jwsSigningKey := fs.String("jws-signing-key", "", "obie: PEM file of the RSA private key the bank signs its answers with (default: a key made at start)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate to serve HTTPS with (with --tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	clientCA := fs.String("client-ca", "", "PEM CA certificates: require a client certificate issued by one of them (mutual TLS; needs --tls-cert)")
	webhookURL := fs.String("webhook-url", "", "push each payment's status changes to this URL, as the profile's bank does (settle: Settle-Signature; stripe: payout.* events in Stripe-Signature), signed with SETTLE_BANK_WEBHOOK_SECRET and retried until answered 2xx; e.g. http://127.0.0.1:8080/v1/bank/webhooks/settle (obie pushes nothing)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.Err, "settle fakebank: unexpected arguments %q\n", fs.Args())
		return exitError
	}

	faults, err := initialFaults(fs, *faultsJSON, *settleDelay, *keyTTL)
	if err != nil {
		fmt.Fprintf(s.Err, "settle fakebank: %v\n", err)
		return exitError
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(s.Err, &slog.HandlerOptions{Level: level}))

	opts := fakebank.Options{Seed: *seed, StatePath: *state, Faults: faults, Logger: logger, Profile: *profile, ManualAuthorisation: *manualAuth,
		WebhookURL: *webhookURL, WebhookSecret: os.Getenv(bankclient.EnvWebhookSecret)}
	if err := bankSecurity(&opts, *jwsPublicKey, *jwsSigningKey, *tlsCert, *tlsKey, *clientCA); err != nil {
		fmt.Fprintf(s.Err, "settle fakebank: %v\n", err)
		return exitError
	}
	bank, err := fakebank.New(opts)
	if err != nil {
		fmt.Fprintf(s.Err, "settle fakebank: %v\n", err)
		return exitError
	}
	url, err := bank.Start(*listen)
	if err != nil {
		fmt.Fprintf(s.Err, "settle fakebank: %v\n", err)
		return exitError
	}
	logger.Info("fakebank started", "url", url, "seed", *seed, "state", *state, "faults", faults)
	fmt.Fprintf(s.Out, "fakebank listening on %s\n", url)

	<-ctx.Done()
	logger.Info("fakebank stopping")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := bank.Shutdown(shutdownCtx); err != nil {
		fmt.Fprintf(s.Err, "settle fakebank: %v\n", err)
		return exitError
	}
	return exitOK
}

// initialFaults builds the starting fault profile: --faults, then
// --settle-delay and --key-ttl when given on the command line, or when
// --faults does not set them.
func initialFaults(fs *flag.FlagSet, faultsJSON string, settleDelay, keyTTL time.Duration) (fakebank.Faults, error) {
	var f fakebank.Faults
	fields := map[string]json.RawMessage{}
	if faultsJSON != "" {
		dec := json.NewDecoder(strings.NewReader(faultsJSON))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return f, fmt.Errorf("invalid --faults: %w", err)
		}
		if err := json.Unmarshal([]byte(faultsJSON), &fields); err != nil {
			return f, fmt.Errorf("invalid --faults: %w", err)
		}
	}
	given := func(name string) bool {
		set := false
		fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
		return set
	}
	if _, inJSON := fields["settle_delay_ms"]; given("settle-delay") || !inJSON {
		f.SettleDelayMS = settleDelay.Milliseconds()
	}
	if _, inJSON := fields["key_ttl_ms"]; given("key-ttl") || !inJSON {
		f.KeyTTLMS = keyTTL.Milliseconds()
	}
	return f, nil
}

// bankSecurity reads the keys and certificates of the flags into opts.
func bankSecurity(opts *fakebank.Options, jwsPublicKey, jwsSigningKey, tlsCert, tlsKey, clientCA string) error {
	if (jwsPublicKey != "" || jwsSigningKey != "") && opts.Profile != "obie" {
		return errors.New("--jws-public-key and --jws-signing-key are for --profile obie")
	}
	if jwsPublicKey != "" {
		pub, err := fakebank.ReadRSAPublicKey(jwsPublicKey)
		if err != nil {
			return err
		}
		opts.JWSPublicKey = pub
	}
	if jwsSigningKey != "" {
		key, err := fakebank.ReadRSAPrivateKey(jwsSigningKey)
		if err != nil {
			return err
		}
		opts.JWSSigningKey = key
	}
	if (tlsCert == "") != (tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if clientCA != "" && tlsCert == "" {
		return errors.New("--client-ca needs --tls-cert and --tls-key")
	}
	if tlsCert == "" {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
	if err != nil {
		return fmt.Errorf("error loading --tls-cert/--tls-key: %w", err)
	}
	opts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pemData, err := os.ReadFile(clientCA)
		if err != nil {
			return fmt.Errorf("error reading --client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemData) {
			return fmt.Errorf("--client-ca %s holds no PEM certificate", clientCA)
		}
		opts.TLS.ClientCAs, opts.TLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return nil
}
