package obie_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
)

// TestCheckEvent: intake refuses, naming the field, a beneficiary the
// connector cannot route and a currency it does not send.
func TestCheckEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ cur, bene, field string }{
		{"GBP", "SortCodeAccountNumber:08080021325698:ACME Ltd", ""},
		{"GBP", "SortCodeAccountNumber:08080021325698:A: B & C (UK) Ltd", ""},
		{"GBP", "IBAN:GB29NWBK60161331926819:Zoë Ørsted", ""},
		{"GBP", "SortCodeAccountNumber:08080021325698:" + strings.Repeat("n", 350), ""},
		{"GBP", "SortCodeAccountNumber:08080021325698:" + strings.Repeat("n", 351), "beneficiary"},
		{"GBP", "SortCodeAccountNumber:0808002132569:ACME", "beneficiary"},
		{"GBP", "SortCodeAccountNumber:080800213256980:ACME", "beneficiary"},
		{"GBP", "SortCodeAccountNumber:08080021325a98:ACME", "beneficiary"},
		{"GBP", "SortCodeAccountNumber:08080021325698:", "beneficiary"},
		{"GBP", "SortCodeAccountNumber:08080021325698", "beneficiary"},
		{"GBP", "SortCodeAccountNumber:08080021325698: ACME", "beneficiary"},
		{"GBP", "SortCodeAccountNumber:08080021325698:AC\nME", "beneficiary"},
		{"GBP", "IBAN:GB29NWBK60161331926818:ACME", "beneficiary"}, // check digits
		{"GBP", "IBAN:GB29 NWBK 6016 1331 9268 19:ACME", "beneficiary"},
		{"GBP", "IBAN:DE89370400440532013000:ACME", "beneficiary"}, // valid, but abroad
		{"GBP", "IBAN:gb29nwbk60161331926819:ACME", "beneficiary"},
		{"GBP", "BBAN:08080021325698:ACME", "beneficiary"},
		{"GBP", "ba_1Abc", "beneficiary"},
		{"GBP", "DE89370400440532013000", "beneficiary"},
		{"EUR", "IBAN:GB29NWBK60161331926819:ACME", "currency"},
		{"JPY", "SortCodeAccountNumber:08080021325698:ACME", "currency"},
		{"KWD", "SortCodeAccountNumber:08080021325698:ACME", "currency"},
	} {
		err := obie.NewConnector(obie.Config{}).Check(tc.cur, tc.bene)
		var fe *bankclient.FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("Check(%s, %q): %v", tc.cur, tc.bene, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("Check(%s, %q): %v, want a FieldError on %s", tc.cur, tc.bene, err, tc.field)
		}
	}
}

// TestAmounts: minor units and the spec's decimal strings convert exactly
// both ways by the currency's exponent: GBP (2), JPY (0), KWD (3).
func TestAmounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor int64
		cur   string
		s     string
	}{
		{16588, "GBP", "165.88"},
		{1, "GBP", "0.01"},
		{100, "GBP", "1.00"},
		{999999999999999, "GBP", "9999999999999.99"},
		{500, "JPY", "500"},
		{1500, "KWD", "1.500"},
		{1, "KWD", "0.001"},
	} {
		s, err := obie.FormatAmount(tc.minor, tc.cur)
		if err != nil || s != tc.s {
			t.Errorf("FormatAmount(%d, %s) = %q, %v; want %q", tc.minor, tc.cur, s, err, tc.s)
		}
		n, err := obie.ParseAmount(tc.s, tc.cur)
		if err != nil || n != tc.minor {
			t.Errorf("ParseAmount(%q, %s) = %d, %v; want %d", tc.s, tc.cur, n, err, tc.minor)
		}
	}
	for _, tc := range []struct {
		s, cur string
		want   int64
	}{
		{"165.880", "GBP", 16588}, {"165.8", "GBP", 16580}, {"165", "GBP", 16500}, {"500.00", "JPY", 500},
	} {
		if n, err := obie.ParseAmount(tc.s, tc.cur); err != nil || n != tc.want {
			t.Errorf("ParseAmount(%q, %s) = %d, %v; want %d", tc.s, tc.cur, n, err, tc.want)
		}
	}
	for _, tc := range []struct{ s, cur string }{
		{"165.885", "GBP"}, {"0.5", "JPY"}, {"1.0001", "KWD"}, {"-1.00", "GBP"}, {"+1.00", "GBP"}, {"1e3", "GBP"},
		{"1,00", "GBP"}, {".5", "GBP"}, {"5.", "GBP"}, {"", "GBP"}, {"12345678901234", "GBP"}, {"1.000000", "GBP"},
		{" 1.00", "GBP"}, {"1.00", "XXX"}, {"١٢", "GBP"},
	} {
		if n, err := obie.ParseAmount(tc.s, tc.cur); err == nil {
			t.Errorf("ParseAmount(%q, %s) = %d, want an error", tc.s, tc.cur, n)
		}
	}
	for _, tc := range []struct {
		minor int64
		cur   string
	}{{0, "GBP"}, {-1, "GBP"}, {10000000000000 * 100, "GBP"}, {1, "XTS"}} {
		if s, err := obie.FormatAmount(tc.minor, tc.cur); err == nil {
			t.Errorf("FormatAmount(%d, %s) = %q, want an error", tc.minor, tc.cur, s)
		}
	}
}

// TestCapabilities: what the engine is told about Open Banking.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	c := obie.NewConnector(obie.Config{})
	caps := c.Capabilities
	if !caps.LookupByID || caps.LookupByKey || caps.LookupByReference || caps.Search || caps.Replay != bankclient.ReplayCurrent ||
		caps.KeyWindow != obie.KeyWindow || caps.KeyMaxLen != 40 || caps.RefMaxLen != 31 || !caps.Consent || !caps.ReturnsOnStatementsOnly || !caps.NoList ||
		c.DefaultReturnWatch != 0 || c.VerifyWebhook != nil || len(bankclient.KeyFor("x")) > caps.KeyMaxLen {
		t.Errorf("capabilities %+v, connector %+v", caps, c)
	}
	for _, id := range []string{"settlement-0001", "a_b", strings.Repeat("x", 32), "é", "s 1"} {
		ref := caps.Reference(id)
		if len(ref) > 31 || strings.Trim(ref, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"+obie.RefAllowed) != "" {
			t.Errorf("reference %q of %q does not fit Faster Payments", ref, id)
		}
	}
	if caps.Reference("settlement-0001") != "settlement-0001" {
		t.Error("a settlement id that fits is not sent as it is")
	}
}
