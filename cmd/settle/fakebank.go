package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
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
                                  (0 = never): by-key then answers 404 and a POST
                                  with the key creates a new payment
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

	bank, err := fakebank.New(fakebank.Options{Seed: *seed, StatePath: *state, Faults: faults, Logger: logger, Profile: *profile})
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
func initialFaults(fs *flag.FlagSet, faultsJSON string, settleDelay, keyTTL time.Duration) (bankclient.Faults, error) {
	var f bankclient.Faults
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
