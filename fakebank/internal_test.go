package fakebank

import (
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
)

func TestValidateFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    Faults
		ok   bool
	}{
		{"zero", Faults{}, true},
		{"all certain", Faults{FailBeforeRate: 1, DropResponseRate: 1, StatusErrorRate: 1, RejectRate: 1, SettlementFailureRate: 1}, true},
		{"fixed latency", Faults{LatencyMinMS: 5, LatencyMaxMS: 5}, true},
		{"rate above 1", Faults{DropResponseRate: 1.01}, false},
		{"negative rate", Faults{SettlementFailureRate: -0.5}, false},
		{"latency min above max", Faults{LatencyMinMS: 6, LatencyMaxMS: 5}, false},
		{"negative latency", Faults{LatencyMinMS: -1, LatencyMaxMS: 5}, false},
		{"negative settle delay", Faults{SettleDelayMS: -1}, false},
		{"negative key ttl", Faults{KeyTTLMS: -1}, false},
		{"key ttl over a year", Faults{KeyTTLMS: maxDurationMS + 1}, false},
	}
	for _, tt := range tests {
		if err := validateFaults(tt.f); (err == nil) != tt.ok {
			t.Errorf("%s: validateFaults = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestLatencyDrawStaysInRange(t *testing.T) {
	t.Parallel()
	b, err := New(Options{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := b.latency(10, 14)
		if d < 10*time.Millisecond || d > 14*time.Millisecond {
			t.Fatalf("latency %v outside [10ms, 14ms]", d)
		}
		seen[d] = true
	}
	if len(seen) != 5 {
		t.Fatalf("want every value of [10, 14] ms drawn, got %v", seen)
	}
	if d := b.latency(3, 3); d != 3*time.Millisecond {
		t.Fatalf("fixed latency: want 3ms, got %v", d)
	}
}

func TestStatusIsComputedFromTimestamps(t *testing.T) {
	t.Parallel()
	created := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	instant := &payment{CreatedAt: created, DueAt: created, Outcome: bankclient.StatusFailed, FailureReason: "x"}
	if v := instant.view(created); v.Status != bankclient.StatusFailed || v.FailureReason != "x" {
		t.Fatalf("zero delay: want failed at once, got %+v", v)
	}
	slow := &payment{CreatedAt: created, DueAt: created.Add(2 * time.Second), Outcome: bankclient.StatusSettled, FailureReason: ""}
	for _, c := range []struct {
		at   time.Duration
		want bankclient.Status
	}{{0, bankclient.StatusAccepted}, {time.Second, bankclient.StatusProcessing}, {2 * time.Second, bankclient.StatusSettled}, {-time.Hour, bankclient.StatusAccepted}} {
		if got := slow.view(created.Add(c.at)).Status; got != c.want {
			t.Errorf("at %v: want %s, got %s", c.at, c.want, got)
		}
	}
}
