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
