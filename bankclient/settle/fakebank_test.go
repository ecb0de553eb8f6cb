package settle_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// This file runs the client against the bank simulator in-process: the two
// were written independently from DESIGN.md section 7, so agreement here is
// evidence that both follow the contract.

type fakebankBundle struct {
	bank   *fakebank.Bank
	client *settle.Client
	clock  *settletest.ManualClock
	url    string
}

func setupFakebank(t *testing.T, faults fakebank.Faults) *fakebankBundle {
	t.Helper()
	clock := settletest.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	bank, url := fakebanktest.NewServer(t, fakebank.Options{Seed: 1, Now: clock.Now, Faults: faults})
	client, err := settle.New(url, bankclient.Options{
		Timeout: 10 * time.Second,
		Retry: bankclient.RetryPolicy{
			MaxAttempts: 3, MaxElapsed: time.Minute,
			InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond,
		},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &fakebankBundle{bank: bank, client: client, clock: clock, url: url}
}

// checkPaidOnce fails if the bank paid any reference twice.
func (b *fakebankBundle) checkPaidOnce(t *testing.T) {
	t.Helper()
	if s := b.bank.Stats(); s.MaxPaymentsPerReference > 1 || s.MaxExecutionsPerKey > 1 {
		t.Errorf("bank paid twice: %+v", s)
	}
}

func request(ref string) bankclient.PaymentRequest {
	return bankclient.PaymentRequest{
		AmountCents: 4200, Currency: "EUR",
		DebtorAccount: "DE89370400440532013000", CreditorAccount: "FR1420041010050500013M02606",
		Reference: ref,
	}
}

func TestFakebankProtocol(t *testing.T) {
	t.Parallel()
	b := setupFakebank(t, fakebank.Faults{})
	ctx := context.Background()
	key := bankclient.KeyFor("stl-1")

	first, err := b.client.Send(ctx, key, request("stl-1"))
	if err != nil || first.Replayed {
		t.Fatalf("first Send = %+v, %v; want a new payment", first, err)
	}
	again, err := b.client.Send(ctx, key, request("stl-1"))
	if err != nil || !again.Replayed || again.Payment.ID != first.Payment.ID {
		t.Fatalf("second Send = %+v, %v; want a replay of %s", again, err, first.Payment.ID)
	}

	other := request("stl-1")
	other.AmountCents++
	if _, err := b.client.Send(ctx, key, other); !bankclient.IsKeyReuse(err) || bankclient.IsRejected(err) {
		t.Fatalf("Send with another body: err = %v, want key reuse", err)
	}

	bad := request("stl-bad")
	bad.Currency = "euro"
	badKey := bankclient.KeyFor("stl-bad")
	for i := range 2 {
		if _, err := b.client.Send(ctx, badKey, bad); !bankclient.IsRejected(err) {
			t.Fatalf("Send invalid (try %d): err = %v, want rejected", i, err)
		}
	}

	p, err := b.client.StatusByKey(ctx, key)
	if err != nil || p.ID != first.Payment.ID || p.Reference != "stl-1" {
		t.Fatalf("StatusByKey = %+v, %v", p, err)
	}
	if _, err := b.client.StatusByKey(ctx, bankclient.KeyFor("never-sent")); !bankclient.IsNotFound(err) {
		t.Fatalf("StatusByKey of an unknown key: err = %v, want not found", err)
	}

	want := map[string]bool{"stl-1": true}
	for i := range 6 {
		ref := fmt.Sprintf("stl-page-%d", i)
		want[ref] = true
		if _, err := b.client.Send(ctx, bankclient.KeyFor(ref), request(ref)); err != nil {
			t.Fatalf("Send %s: %v", ref, err)
		}
	}
	got := map[string]bool{}
	for p, err := range bankclient.Payments(ctx, b.client, 2) {
		if err != nil {
			t.Fatalf("Payments: %v", err)
		}
		if got[p.Reference] {
			t.Errorf("statement lists %s twice", p.Reference)
		}
		got[p.Reference] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statement references = %v, want %v", got, want)
	}
	if _, err := b.client.Statement(ctx, "no-such-cursor", 2); err == nil || bankclient.IsRejected(err) {
		t.Errorf("Statement with a bad cursor: err = %v, want a non-rejection error", err)
	}
	b.checkPaidOnce(t)
}

func TestFakebankFaults(t *testing.T) {
	t.Parallel()

	t.Run("fail before processing", func(t *testing.T) {
		t.Parallel()
		b := setupFakebank(t, fakebank.Faults{FailBeforeRate: 1})
		_, err := b.client.Send(context.Background(), bankclient.KeyFor("s"), request("s"))
		var ae *bankclient.AmbiguousError
		if !errors.As(err, &ae) || ae.Attempts != 3 || ae.StatusCode != 503 {
			t.Fatalf("err = %v, want ambiguous 503 after 3 attempts", err)
		}
		if s := b.bank.Stats(); s.Payments != 0 {
			t.Errorf("payments = %d, want 0", s.Payments)
		}
	})

	t.Run("drop response", func(t *testing.T) {
		t.Parallel()
		b := setupFakebank(t, fakebank.Faults{DropResponseRate: 1})
		ctx := context.Background()
		key := bankclient.KeyFor("s")
		if _, err := b.client.Send(ctx, key, request("s")); !bankclient.IsAmbiguous(err) {
			t.Fatalf("err = %v, want ambiguous", err)
		}
		s := b.bank.Stats()
		if s.Payments != 1 || s.Replays < 2 {
			t.Errorf("stats = %+v, want one payment and at least two replays", s)
		}
		// The settlement is uncertain; the status API resolves it.
		if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
			t.Fatal(err)
		}
		p, err := b.client.StatusByKey(ctx, key)
		if err != nil || p.IdempotencyKey != key {
			t.Fatalf("StatusByKey = %+v, %v", p, err)
		}
		res, err := b.client.Send(ctx, key, request("s"))
		if err != nil || !res.Replayed || res.Payment.ID != p.ID {
			t.Fatalf("resend = %+v, %v; want a replay of %s", res, err, p.ID)
		}
		b.checkPaidOnce(t)
	})

	t.Run("status error", func(t *testing.T) {
		t.Parallel()
		b := setupFakebank(t, fakebank.Faults{StatusErrorRate: 1})
		ctx := context.Background()
		key := bankclient.KeyFor("s")
		if _, err := b.client.Send(ctx, key, request("s")); err != nil {
			t.Fatalf("Send: %v", err)
		}
		_, err := b.client.StatusByKey(ctx, key)
		var ae *bankclient.AmbiguousError
		if !errors.As(err, &ae) || ae.Attempts != 3 || bankclient.IsNotFound(err) {
			t.Fatalf("err = %v, want ambiguous after 3 attempts", err)
		}
	})

	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		b := setupFakebank(t, fakebank.Faults{RejectRate: 1})
		ctx := context.Background()
		key := bankclient.KeyFor("s")
		_, err := b.client.Send(ctx, key, request("s"))
		var re *bankclient.RejectedError
		if !errors.As(err, &re) || re.Code != settle.ErrorCodeRejected || re.Reason == "" {
			t.Fatalf("err = %v, want a rejection with a reason", err)
		}
		// The rejection is pinned to the key, whatever the faults now.
		if err := b.bank.SetFaults(fakebank.Faults{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.client.Send(ctx, key, request("s")); !bankclient.IsRejected(err) {
			t.Fatalf("resend: err = %v, want rejected again", err)
		}
		if _, err := b.client.StatusByKey(ctx, key); !bankclient.IsNotFound(err) {
			t.Fatalf("StatusByKey of a rejected key: err = %v, want not found", err)
		}
	})

	t.Run("settlement failure", func(t *testing.T) {
		t.Parallel()
		b := setupFakebank(t, fakebank.Faults{SettlementFailureRate: 1, SettleDelayMS: 1000})
		ctx := context.Background()
		key := bankclient.KeyFor("s")
		res, err := b.client.Send(ctx, key, request("s"))
		if err != nil || res.Payment.Status != bankclient.StatusAccepted {
			t.Fatalf("Send = %+v, %v; want accepted", res, err)
		}
		b.clock.Advance(2 * time.Second)
		p, err := b.client.StatusByKey(ctx, key)
		if err != nil || p.Status != bankclient.StatusFailed || p.FailureReason == "" {
			t.Fatalf("StatusByKey = %+v, %v; want failed with a reason", p, err)
		}
	})

	t.Run("key forgotten", func(t *testing.T) {
		t.Parallel()
		b := setupFakebank(t, fakebank.Faults{KeyTTLMS: 1000})
		ctx := context.Background()
		key := bankclient.KeyFor("s")
		if _, err := b.client.Send(ctx, key, request("s")); err != nil {
			t.Fatalf("Send: %v", err)
		}
		b.clock.Advance(2 * time.Second)
		if _, err := b.client.StatusByKey(ctx, key); !bankclient.IsNotFound(err) {
			t.Fatalf("StatusByKey after the TTL: err = %v, want not found", err)
		}
	})

	t.Run("latency beyond the timeout", func(t *testing.T) {
		t.Parallel()
		b := setupFakebank(t, fakebank.Faults{LatencyMinMS: 5000, LatencyMaxMS: 5000})
		client, err := settle.New(b.url, bankclient.Options{
			Timeout: 20 * time.Millisecond,
			Retry:   bankclient.RetryPolicy{MaxAttempts: 2, MaxElapsed: time.Minute, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.Send(context.Background(), bankclient.KeyFor("s"), request("s"))
		var ae *bankclient.AmbiguousError
		if !errors.As(err, &ae) || ae.Attempts != 2 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ambiguous deadline after 2 attempts", err)
		}
	})
}
