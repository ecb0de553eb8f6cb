package demo

import (
	"bufio"
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/settle/settle/fakebank"
)

// Profiles are the fault profiles of --faults.
// Every profile but none returns a few settled payments a second after
// they settled, as ACH and SEPA returns do days later. At a bank that needs
// a consent per payment (obie), the customer authorises each 200 ms after
// it was asked for.
var Profiles = map[string]fakebank.Faults{
	"none": {SettleDelayMS: 300, ConsentDelayMS: 200},
	"flaky": {
		FailBeforeRate: 0.05, DropResponseRate: 0.20, StatusErrorRate: 0.05,
		RejectRate: 0.02, SettlementFailureRate: 0.03,
		LatencyMinMS: 0, LatencyMaxMS: 30, SettleDelayMS: 300,
		ReturnRate: 0.05, ReturnAfterMS: 1000, ConsentDelayMS: 200,
		WebhookDuplicateRate: 0.1, WebhookDelayMaxMS: 300,
	},
	"hostile": {
		FailBeforeRate: 0.15, DropResponseRate: 0.30, StatusErrorRate: 0.25,
		RejectRate: 0.05, SettlementFailureRate: 0.08,
		LatencyMinMS: 0, LatencyMaxMS: 80, SettleDelayMS: 500,
		ReturnRate: 0.05, ReturnAfterMS: 1000, ConsentDelayMS: 200,
		WebhookLossRate: 0.2, WebhookDuplicateRate: 0.2, WebhookDelayMaxMS: 1000,
	},
}

// describe says in words what a profile does.
func describe(f fakebank.Faults) string {
	if f.FailBeforeRate+f.DropResponseRate+f.StatusErrorRate+f.RejectRate+f.SettlementFailureRate == 0 && f.LatencyMaxMS == 0 {
		return "no faults"
	}
	pct := func(p float64) string { return fmt.Sprintf("%g%%", p*100) }
	s := fmt.Sprintf("executes then loses %s of payment responses, answers 5xx to %s of payments and %s of status calls, "+
		"rejects %s, fails %s at settlement, latency %d–%d ms",
		pct(f.DropResponseRate), pct(f.FailBeforeRate), pct(f.StatusErrorRate), pct(f.RejectRate),
		pct(f.SettlementFailureRate), f.LatencyMinMS, f.LatencyMaxMS)
	if f.ReturnRate > 0 {
		s += fmt.Sprintf(", returns %s of settled payments %d ms after they settled", pct(f.ReturnRate), f.ReturnAfterMS)
	}
	if f.WebhookLossRate+f.WebhookDuplicateRate > 0 || f.WebhookDelayMaxMS > 0 {
		s += fmt.Sprintf("; pushes status changes as webhooks up to %d ms late, %s twice, %s never",
			f.WebhookDelayMaxMS, pct(f.WebhookDuplicateRate), pct(f.WebhookLossRate))
	}
	return s
}

// BankTraffic counts what the bank answered, seen from the bank's side of
// the wire.
type BankTraffic struct {
	// Payments counts POST /v1/payments (Stripe: /v1/payouts) requests.
	Payments int64
	// Created, Replayed and Rejected count the definitive answers.
	Created, Replayed, Rejected int64
	// Dropped counts payments executed whose answer was lost (connection
	// closed, or 504).
	Dropped int64
	// RefusedBefore counts 5xx answers given before processing a payment.
	RefusedBefore int64
	// StatusCalls counts status calls (GET /v1/payments/by-key/{key} and
	// /v1/payments/{id}; Stripe: /v1/payouts/{id}); StatusErrors their 5xx.
	StatusCalls, StatusErrors int64
}

// bankServer is the in-process fakebank with a counting wrapper.
type bankServer struct {
	bank *fakebank.Bank
	srv  *http.Server
	url  string

	payments, created, replayed, rejected, dropped, refused, statusCalls, statusErrors atomic.Int64
}

func startBank(seed int64, faults fakebank.Faults, profile string, jwsKey *rsa.PublicKey) (*bankServer, error) {
	b, err := fakebank.New(fakebank.Options{Seed: seed, Faults: faults, Profile: profile, JWSPublicKey: jwsKey})
	if err != nil {
		return nil, fmt.Errorf("error creating the bank: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("error listening for the bank: %w", err)
	}
	s := &bankServer{bank: b, url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: s.count(b.Handler()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// count wraps the bank's handler and classifies every answer.
func (s *bankServer) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		switch {
		case r.Method == http.MethodPost && (r.URL.Path == "/v1/payments" || r.URL.Path == "/v1/payouts" ||
			strings.HasSuffix(r.URL.Path, "/domestic-payments")):
			// settle's protocol answers 201 created, 200 replayed, 422
			// rejected; Stripe's 200 for both (a replay marked
			// Idempotent-Replayed) and 400 rejected; Open Banking's 201 for
			// both (a replay is the current resource, unmarked: the bank's
			// own count says how many), 400 rejected, and a 500 that does
			// not say whether the payment was made.
			s.payments.Add(1)
			switch {
			case rec.hijacked || rec.status == http.StatusGatewayTimeout:
				s.dropped.Add(1)
			case rec.status >= 500:
				s.refused.Add(1)
			case rec.status == http.StatusOK && rec.Header().Get(fakebank.HeaderReplayed) == "true":
				s.replayed.Add(1)
			case rec.status == http.StatusCreated || rec.status == http.StatusOK:
				s.created.Add(1)
			case rec.status == http.StatusUnprocessableEntity || rec.status == http.StatusBadRequest:
				s.rejected.Add(1)
			}
		case r.Method == http.MethodGet && (strings.HasPrefix(r.URL.Path, "/v1/payments/") || strings.HasPrefix(r.URL.Path, "/v1/payouts/") ||
			strings.Contains(r.URL.Path, "/domestic-payments/")):
			s.statusCalls.Add(1)
			if rec.status >= 500 {
				s.statusErrors.Add(1)
			}
		}
	})
}

func (s *bankServer) traffic() BankTraffic {
	return BankTraffic{
		Payments: s.payments.Load(), Created: s.created.Load(), Replayed: s.replayed.Load(),
		Rejected: s.rejected.Load(), Dropped: s.dropped.Load(), RefusedBefore: s.refused.Load(),
		StatusCalls: s.statusCalls.Load(), StatusErrors: s.statusErrors.Load(),
	}
}

func (s *bankServer) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	return errors.Join(err, s.bank.Close())
}

// recorder remembers the status written and whether the connection was
// taken over (the bank's way of losing a response).
type recorder struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijacking not supported")
	}
	r.hijacked = true
	return hj.Hijack()
}
