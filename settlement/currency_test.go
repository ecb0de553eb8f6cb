package settlement

import (
	"errors"
	"testing"
)

func TestLookupCurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code string
		exp  int
	}{
		{"EUR", 2}, {"USD", 2}, {"GBP", 2}, {"JPY", 0}, {"KRW", 0}, {"CLP", 0},
		{"KWD", 3}, {"BHD", 3}, {"TND", 3}, {"CLF", 4}, {"UYW", 4}, {"HUF", 2}, {"CHF", 2},
	} {
		c, err := LookupCurrency(tc.code)
		if err != nil {
			t.Fatalf("LookupCurrency(%q): %v", tc.code, err)
		}
		if c.Code != tc.code || c.Exponent != tc.exp {
			t.Errorf("LookupCurrency(%q) = %+v, want exponent %d", tc.code, c, tc.exp)
		}
	}
	for _, code := range []string{"XYZ", "", "eur", "EURO", "XAU", "XXX", "XTS", "XDR"} {
		if _, err := LookupCurrency(code); !errors.Is(err, ErrUnknownCurrency) {
			t.Errorf("LookupCurrency(%q) = %v, want ErrUnknownCurrency", code, err)
		}
	}
}

// TestPayoutCurrency: a currency settle can read is not always one it can
// pay out in. Withdrawn currencies and fund codes are read (statements
// dated before the withdrawal, records) but refused for payouts.
func TestPayoutCurrency(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"HRK", "ZWL", "SLL", "CUC", "ANG", "BGN", "CLF", "BOV", "CHE", "CHW", "COU", "MXV", "USN", "UYI", "UYW"} {
		if _, err := LookupCurrency(code); err != nil {
			t.Errorf("LookupCurrency(%q) = %v: a statement in it could no longer be read", code, err)
		}
		_, err := PayoutCurrency(code)
		var np *NotPayableError
		if !errors.Is(err, ErrNotPayable) || !errors.As(err, &np) || np.Code != code || np.Reason == "" {
			t.Errorf("PayoutCurrency(%q) = %v, want ErrNotPayable", code, err)
		}
	}
	for _, code := range []string{"XAU", "XDR", "XTS", "XXX", "XSU", "XUA", "XBA", "XBD", "EURO", ""} {
		if _, err := PayoutCurrency(code); !errors.Is(err, ErrUnknownCurrency) {
			t.Errorf("PayoutCurrency(%q) = %v, want ErrUnknownCurrency", code, err)
		}
	}
	for code, exp := range map[string]int{"EUR": 2, "JPY": 0, "KWD": 3, "XAF": 0, "XCG": 2, "ZWG": 2, "SLE": 2, "CUP": 2} {
		if c, err := PayoutCurrency(code); err != nil || c.Exponent != exp {
			t.Errorf("PayoutCurrency(%q) = %+v, %v; want exponent %d", code, c, err, exp)
		}
	}
	for code := range withdrawn {
		if _, ok := iso4217[code]; !ok {
			t.Errorf("withdrawn %s is not in iso4217: it could not be read", code)
		}
	}
	for code := range funds {
		if _, ok := iso4217[code]; !ok {
			t.Errorf("fund code %s is not in iso4217: it could not be read", code)
		}
	}
}
