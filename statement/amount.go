package statement

import (
	"fmt"
	"math"
	"time"

	"github.com/settle/settle/settlement"
)

// currencyCache remembers the exponents a decoder has looked up, so that a
// million entries in one currency cost one lookup.
type currencyCache struct {
	last settlement.Currency
}

// lookup returns the currency with that ISO 4217 code, or an error
// wrapping settlement.ErrUnknownCurrency.
func (c *currencyCache) lookup(code string) (settlement.Currency, error) {
	if code == c.last.Code && code != "" {
		return c.last, nil
	}
	cur, err := settlement.LookupCurrency(code)
	if err != nil {
		return settlement.Currency{}, fmt.Errorf("currency %w", err)
	}
	c.last = cur
	return cur, nil
}

// minorUnits converts the decimal amount s, written with the decimal
// separator sep ('.' in XML, ',' in MT940), to exact minor units of a
// currency with exponent exp. s is digits with at most one separator;
// digits after it beyond exp must be zeros (18.150 EUR is 1815), anything
// else is ErrInexactAmount, never rounded. "500," and "500" are 50000 at
// exponent 2. Signs are the caller's business.
func minorUnits(s string, sep byte, exp int, code string) (int64, error) {
	if s == "" {
		return 0, errorf(ErrMalformed, "empty amount")
	}
	var v int64
	digits, frac := 0, -1 // frac counts digits after the separator; -1 before it
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == sep && frac < 0:
			frac = 0
			continue
		case c < '0' || c > '9':
			return 0, errorf(ErrMalformed, "amount %q is not a decimal number", s)
		}
		d := int64(c - '0')
		digits++
		if frac >= 0 {
			frac++
			if frac > exp {
				if d != 0 {
					return 0, errorf(ErrInexactAmount, "amount %s has more decimals than %s allows (%d)", s, code, exp)
				}
				continue
			}
		}
		if v > (math.MaxInt64-d)/10 {
			return 0, errorf(ErrMalformed, "amount %s is too large", s)
		}
		v = v*10 + d
	}
	if digits == 0 {
		return 0, errorf(ErrMalformed, "amount %q has no digits", s)
	}
	if frac < 0 {
		frac = 0
	}
	for ; frac < exp; frac++ {
		if v > math.MaxInt64/10 {
			return 0, errorf(ErrMalformed, "amount %s is too large", s)
		}
		v *= 10
	}
	return v, nil
}

// isoDate checks that s is an existing date written YYYY-MM-DD and
// returns it.
func isoDate(s string) (string, error) {
	if _, err := time.Parse(time.DateOnly, s); err != nil {
		return "", errorf(ErrMalformed, "date %q does not exist or is not YYYY-MM-DD", s)
	}
	return s, nil
}

// shortDate converts the six-digit YYMMDD of BAI2 and MT940 to
// YYYY-MM-DD (years 69-99 are 19xx, the rest 20xx), refusing dates that
// do not exist.
func shortDate(s string) (time.Time, error) {
	t, err := time.Parse("060102", s)
	if err != nil || len(s) != 6 {
		return time.Time{}, errorf(ErrMalformed, "date %q does not exist or is not YYMMDD", s)
	}
	return t, nil
}
