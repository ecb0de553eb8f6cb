package main

import (
	"strings"
	"testing"
)

// TestSeveralBanksEnvironment: each bank of a worker serving several reads
// its own SETTLE_BANK_<NAME>_* variables, and the single bank's settings
// are refused beside several, so one bank's credential never reaches
// another.
func TestSeveralBanksEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"SETTLE_BANK_SETTLE_URL":            "http://127.0.0.1:8081",
		"SETTLE_BANK_STRIPE_URL":            "http://127.0.0.1:8082",
		"SETTLE_BANK_STRIPE_TOKEN":          "sk_test_x",
		"SETTLE_BANK_STRIPE_ACCOUNT":        "acct_1",
		"SETTLE_BANK_STRIPE_WEBHOOK_SECRET": "whsec_s",
	}
	getenv := func(k string) string { return env[k] }
	banks, err := severalBanks([]string{"settle", "stripe"}, "", false, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(banks) != 2 || banks[0].URL != "http://127.0.0.1:8081" || banks[0].Options.Token != "" ||
		banks[1].URL != "http://127.0.0.1:8082" || banks[1].Options.Token != "sk_test_x" || banks[1].Options.Account != "acct_1" ||
		banks[1].WebhookSecret != "whsec_s" {
		t.Fatalf("banks = %+v", banks)
	}
	if _, err := severalBanks([]string{"settle", "stripe"}, "http://x", false, getenv); err == nil || !strings.Contains(err.Error(), "SETTLE_BANK_<NAME>_URL") {
		t.Fatalf("--bank-url beside several banks: %v", err)
	}
	env["SETTLE_BANK_TOKEN"] = "shared"
	if _, err := severalBanks([]string{"settle", "stripe"}, "", false, getenv); err == nil || !strings.Contains(err.Error(), "SETTLE_BANK_SETTLE_TOKEN") {
		t.Fatalf("SETTLE_BANK_TOKEN beside several banks: %v", err)
	}
}
