package obie

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/settle/settle/settlement"
)

// The amount is a decimal string, OBActiveCurrencyAndAmount_SimpleType:
// pattern ^\d{1,13}$|^\d{1,13}\.\d{1,5}$ (OpenAPI document). settle holds
// integer minor units; the two convert exactly by the currency's ISO 4217
// exponent, never through a float.

// maxIntDigits and maxFracDigits are the pattern's limits.
const (
	maxIntDigits  = 13
	maxFracDigits = 5
)

// errAmount is wrapped by every amount that cannot be converted exactly.
var errAmount = errors.New("amount cannot be expressed exactly")

// FormatAmount writes minor units of currency as the spec's decimal
// string: 16588 GBP is "165.88", 500 JPY "500", 1500 KWD "1.500".
func FormatAmount(minor int64, currency string) (string, error) {
	cur, err := settlement.LookupCurrency(currency)
	if err != nil {
		return "", err
	}
	if minor <= 0 {
		return "", fmt.Errorf("%w: %d is not positive", errAmount, minor)
	}
	if cur.Exponent > maxFracDigits {
		return "", fmt.Errorf("%w: %s has %d decimals, the spec takes %d", errAmount, currency, cur.Exponent, maxFracDigits)
	}
	s := strconv.FormatInt(minor, 10)
	if cur.Exponent > 0 {
		if len(s) <= cur.Exponent {
			s = strings.Repeat("0", cur.Exponent-len(s)+1) + s
		}
		s = s[:len(s)-cur.Exponent] + "." + s[len(s)-cur.Exponent:]
	}
	if i, _, _ := strings.Cut(s, "."); len(i) > maxIntDigits {
		return "", fmt.Errorf("%w: %d %s has more than %d integer digits", errAmount, minor, currency, maxIntDigits)
	}
	return s, nil
}

// ParseAmount reads the spec's decimal string as minor units of currency,
// exactly: "165.88" and "165.880" GBP are 16588; "165.885" GBP, a sign,
// an exponent or more digits than the pattern allows are errors.
func ParseAmount(s, currency string) (int64, error) {
	cur, err := settlement.LookupCurrency(currency)
	if err != nil {
		return 0, err
	}
	ip, fp, hasDot := strings.Cut(s, ".")
	if len(ip) == 0 || len(ip) > maxIntDigits || (hasDot && (len(fp) == 0 || len(fp) > maxFracDigits)) || !allDigits(ip) || !allDigits(fp) {
		return 0, fmt.Errorf("%w: %q is not an amount of the spec", errAmount, s)
	}
	trimmed := strings.TrimRight(fp, "0")
	if len(trimmed) > cur.Exponent {
		return 0, fmt.Errorf("%w: %q has more decimals than %s's %d", errAmount, s, currency, cur.Exponent)
	}
	digits := ip + trimmed + strings.Repeat("0", cur.Exponent-len(trimmed))
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %w", errAmount, s, err)
	}
	return n, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
