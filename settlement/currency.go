package settlement

import (
	"errors"
	"fmt"
)

// Currency is an ISO 4217 currency: its alphabetic code and the exponent of
// its minor unit (2 for EUR: 1.00 EUR is 100 minor units; 0 for JPY; 3 for
// KWD).
type Currency struct {
	Code     string
	Exponent int
}

// ErrUnknownCurrency is matched (errors.Is) by LookupCurrency's error for a
// code that is not a current ISO 4217 currency with a minor unit.
var ErrUnknownCurrency = fmt.Errorf("not an ISO 4217 currency")

// LookupCurrency returns the ISO 4217 currency with that alphabetic code.
// Codes that name no currency, and the ISO codes without a minor unit
// (precious metals, special drawing rights, the test and "no currency"
// codes XTS and XXX), are refused: no amount in them can be expressed in
// minor units.
func LookupCurrency(code string) (Currency, error) {
	exp, ok := iso4217[code]
	if !ok {
		return Currency{}, fmt.Errorf("%q: %w", code, ErrUnknownCurrency)
	}
	return Currency{Code: code, Exponent: exp}, nil
}

// ErrNotPayable is matched (errors.Is) by PayoutCurrency's error for an
// ISO 4217 code settle can read (a statement may hold it) but no payout can
// be made in: a currency withdrawn from circulation, or a fund code (a unit
// of account, never what a bank transfers).
var ErrNotPayable = errors.New("not a currency payouts can be made in")

// PayoutCurrency returns the currency a payout may be made in: an ISO 4217
// currency (LookupCurrency) that is still in circulation and is not a fund
// code. Two notions, kept apart on purpose: a currency settle can read
// (LookupCurrency: statements and old records may hold a withdrawn one)
// and a currency one can pay out in (this). An unknown code matches
// ErrUnknownCurrency, a readable but unpayable one ErrNotPayable.
func PayoutCurrency(code string) (Currency, error) {
	c, err := LookupCurrency(code)
	if err != nil {
		return Currency{}, err
	}
	if why, ok := withdrawn[code]; ok {
		return Currency{}, &NotPayableError{Code: code, Reason: "was withdrawn (" + why + ")"}
	}
	if funds[code] {
		return Currency{}, &NotPayableError{Code: code, Reason: "is an ISO 4217 fund code, a unit of account"}
	}
	return c, nil
}

// NotPayableError says why a readable currency takes no payouts; it
// matches ErrNotPayable.
type NotPayableError struct {
	// Code is the currency code.
	Code string
	// Reason says why, for example "was withdrawn (2023-01-01, Croatia
	// adopted the euro)".
	Reason string
}

func (e *NotPayableError) Error() string {
	return fmt.Sprintf("%q %s: %v", e.Code, e.Reason, ErrNotPayable)
}

// Is makes a NotPayableError match ErrNotPayable.
func (e *NotPayableError) Is(target error) bool { return target == ErrNotPayable }

// withdrawn are the codes of iso4217 no longer in circulation (ISO 4217
// list three, historic denominations), with what replaced them. They stay
// in iso4217 so that a statement or record dated before the withdrawal is
// still read in its own minor units.
var withdrawn = map[string]string{
	"ANG": "2025-03-31, replaced by XCG",
	"BGN": "2026-01-01, Bulgaria adopted the euro",
	"CUC": "2021-01-01, Cuba unified its currency on CUP",
	"HRK": "2023-01-01, Croatia adopted the euro",
	"SLL": "2022, redenominated as SLE (1,000 SLL = 1 SLE)",
	"ZWL": "2024, replaced by ZWG",
}

// funds are the ISO 4217 fund codes (list one's "fund" entries): units of
// account and settlement funds (Chile's UF, Bolivia's Mvdol, the WIR
// units, Colombia's UVR, Mexico's UDI, the US next-day dollar, Uruguay's
// indexed units), never a currency a bank pays out in. The other codes
// without a currency behind them (XAU and the precious metals, XDR, XSU,
// XUA, the XB? bond units, XTS, XXX) are not in iso4217 at all.
var funds = map[string]bool{
	"BOV": true, "CHE": true, "CHW": true, "CLF": true, "COU": true,
	"MXV": true, "USN": true, "UYI": true, "UYW": true,
}

// iso4217 maps every active ISO 4217 alphabetic code that has a minor unit
// to its exponent (ISO 4217 list one, as published by the maintenance
// agency SIX). Codes withdrawn recently are kept while statements dated
// before their withdrawal may still be read (see withdrawn: no payout is made
// in them, see PayoutCurrency).
var iso4217 = map[string]int{
	"AED": 2, "AFN": 2, "ALL": 2, "AMD": 2, "ANG": 2, "AOA": 2, "ARS": 2, "AUD": 2,
	"AWG": 2, "AZN": 2, "BAM": 2, "BBD": 2, "BDT": 2, "BGN": 2, "BHD": 3, "BIF": 0,
	"BMD": 2, "BND": 2, "BOB": 2, "BOV": 2, "BRL": 2, "BSD": 2, "BTN": 2, "BWP": 2,
	"BYN": 2, "BZD": 2, "CAD": 2, "CDF": 2, "CHE": 2, "CHF": 2, "CHW": 2, "CLF": 4,
	"CLP": 0, "CNY": 2, "COP": 2, "COU": 2, "CRC": 2, "CUC": 2, "CUP": 2, "CVE": 2,
	"CZK": 2, "DJF": 0, "DKK": 2, "DOP": 2, "DZD": 2, "EGP": 2, "ERN": 2, "ETB": 2,
	"EUR": 2, "FJD": 2, "FKP": 2, "GBP": 2, "GEL": 2, "GHS": 2, "GIP": 2, "GMD": 2,
	"GNF": 0, "GTQ": 2, "GYD": 2, "HKD": 2, "HNL": 2, "HRK": 2, "HTG": 2, "HUF": 2,
	"IDR": 2, "ILS": 2, "INR": 2, "IQD": 3, "IRR": 2, "ISK": 0, "JMD": 2, "JOD": 3,
	"JPY": 0, "KES": 2, "KGS": 2, "KHR": 2, "KMF": 0, "KPW": 2, "KRW": 0, "KWD": 3,
	"KYD": 2, "KZT": 2, "LAK": 2, "LBP": 2, "LKR": 2, "LRD": 2, "LSL": 2, "LYD": 3,
	"MAD": 2, "MDL": 2, "MGA": 2, "MKD": 2, "MMK": 2, "MNT": 2, "MOP": 2, "MRU": 2,
	"MUR": 2, "MVR": 2, "MWK": 2, "MXN": 2, "MXV": 2, "MYR": 2, "MZN": 2, "NAD": 2,
	"NGN": 2, "NIO": 2, "NOK": 2, "NPR": 2, "NZD": 2, "OMR": 3, "PAB": 2, "PEN": 2,
	"PGK": 2, "PHP": 2, "PKR": 2, "PLN": 2, "PYG": 0, "QAR": 2, "RON": 2, "RSD": 2,
	"RUB": 2, "RWF": 0, "SAR": 2, "SBD": 2, "SCR": 2, "SDG": 2, "SEK": 2, "SGD": 2,
	"SHP": 2, "SLE": 2, "SLL": 2, "SOS": 2, "SRD": 2, "SSP": 2, "STN": 2, "SVC": 2,
	"SYP": 2, "SZL": 2, "THB": 2, "TJS": 2, "TMT": 2, "TND": 3, "TOP": 2, "TRY": 2,
	"TTD": 2, "TWD": 2, "TZS": 2, "UAH": 2, "UGX": 0, "USD": 2, "USN": 2, "UYI": 0,
	"UYU": 2, "UYW": 4, "UZS": 2, "VED": 2, "VES": 2, "VND": 0, "VUV": 0, "WST": 2,
	"XAF": 0, "XCD": 2, "XCG": 2, "XOF": 0, "XPF": 0, "YER": 2, "ZAR": 2, "ZMW": 2,
	"ZWG": 2, "ZWL": 2,
}
