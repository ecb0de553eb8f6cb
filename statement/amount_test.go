package statement

import (
	"errors"
	"testing"
)

func TestMinorUnits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		sep  byte
		exp  int
		want int64
		err  error
	}{
		{"1605.00", '.', 2, 160500, nil},
		{"18.150", '.', 2, 1815, nil}, // trailing zeros are exact
		{"1.7", '.', 2, 170, nil},
		{"200000", '.', 2, 20000000, nil},
		{"79255.00", '.', 0, 79255, nil},
		{"0.001", '.', 3, 1, nil},
		{"1.2345", '.', 4, 12345, nil},
		{".5", '.', 2, 50, nil},
		{"5.", '.', 2, 500, nil},
		{"500,", ',', 2, 50000, nil},
		{"0,", ',', 2, 0, nil},
		{"500", ',', 2, 50000, nil},
		{"000000001000,00", ',', 2, 100000, nil},
		{"92233720368547758.07", '.', 2, 9223372036854775807, nil},
		{"10.005", '.', 2, 0, ErrInexactAmount},
		{"100.5", '.', 0, 0, ErrInexactAmount},
		{"1,005", ',', 2, 0, ErrInexactAmount},
		{"0.0000001", '.', 4, 0, ErrInexactAmount},
		{"92233720368547758.08", '.', 2, 0, ErrMalformed},
		{"99999999999999999999", '.', 0, 0, ErrMalformed},
		{"", '.', 2, 0, ErrMalformed},
		{".", '.', 2, 0, ErrMalformed},
		{"1.2.3", '.', 2, 0, ErrMalformed},
		{"-1.00", '.', 2, 0, ErrMalformed},
		{"+1.00", '.', 2, 0, ErrMalformed},
		{"1e3", '.', 2, 0, ErrMalformed},
		{"1,00", '.', 2, 0, ErrMalformed},
		{" 1.00", '.', 2, 0, ErrMalformed},
	} {
		got, err := minorUnits(tc.in, tc.sep, tc.exp, "XXX")
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("minorUnits(%q, %q, %d) = %d, %v; want %v", tc.in, tc.sep, tc.exp, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("minorUnits(%q, %q, %d) = %d, %v; want %d", tc.in, tc.sep, tc.exp, got, err, tc.want)
		}
	}
}

func TestBAI2Amount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		signed bool
		want   int64
		ok     bool
	}{
		{"450000", false, 450000, true},
		{"00", false, 0, true},
		{"+4350000", true, 4350000, true},
		{"-500000", true, -500000, true},
		{"+10", false, 10, true},
		{"-10", false, 0, false},
		{"", false, 0, false},
		{"1.00", false, 0, false},
		{"9223372036854775808", false, 0, false},
	} {
		got, err := bai2Amount(tc.in, tc.signed)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("bai2Amount(%q, %v) = %d, %v", tc.in, tc.signed, got, err)
		}
	}
}

func TestDates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"240229", "2024-02-29"},
		{"991231", "1999-12-31"},
		{"690101", "1969-01-01"},
		{"680101", "2068-01-01"},
		{"230229", ""},
		{"241301", ""},
		{"2401", ""},
		{"24010a", ""},
		{"2401011", ""},
	} {
		got, err := shortDate(tc.in)
		if tc.want == "" {
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("shortDate(%q) = %v, %v; want an error", tc.in, got, err)
			}
			continue
		}
		if err != nil || got.Format("2006-01-02") != tc.want {
			t.Errorf("shortDate(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		value, mmdd, want string
	}{
		{"231231", "0102", "2024-01-02"}, // booked in the new year
		{"240102", "1231", "2023-12-31"}, // value-dated after the year end
		{"240615", "0614", "2024-06-14"},
		{"240228", "0229", "2024-02-29"},
		{"230228", "0229", ""},
		{"230101", "1340", ""},
	} {
		v, _ := shortDate(tc.value)
		got, err := entryDate(v, tc.mmdd)
		if tc.want == "" {
			if err == nil {
				t.Errorf("entryDate(%s, %s) = %s, want an error", tc.value, tc.mmdd, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("entryDate(%s, %s) = %s, %v; want %s", tc.value, tc.mmdd, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in       string
		dateTime bool
		want     string
	}{
		{"2024-03-01", false, "2024-03-01"},
		{"2024-03-01T10:00:00+01:00", true, "2024-03-01"},
		{"2024-03-01T00:00:00.000Z", true, "2024-03-01"},
		{"2024-3-1", false, ""},
		{"2024-02-30", false, ""},
		{"2024-03-01 10:00", true, ""},
		{"2024-03-01", true, ""},
	} {
		got, err := camtDate(tc.in, tc.dateTime)
		if (err != nil) != (tc.want == "") || got != tc.want {
			t.Errorf("camtDate(%q, %v) = %q, %v; want %q", tc.in, tc.dateTime, got, err, tc.want)
		}
	}
}
