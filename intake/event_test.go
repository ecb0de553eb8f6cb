package intake_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/settle/settle/intake"
)

// eventFields is a valid event as a field map; tests change or drop fields.
func eventFields(id string) map[string]any {
	return map[string]any{
		"settlement_id": id,
		"account_id":    "acc-1",
		"amount_cents":  12345,
		"currency":      "EUR",
		"beneficiary":   "DE89 3704 0044 0532 0130 00",
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecodeEventValid(t *testing.T) {
	t.Parallel()
	ev, err := intake.DecodeEvent([]byte(`{"settlement_id":"s-1","account_id":"a","amount_cents":9223372036854775807,
		"currency":"USD","beneficiary":"Zoë \u00e9","occurred_at":"2026-01-02T03:04:05.123Z","event_id":"m-7"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := intake.Event{SettlementID: "s-1", AccountID: "a", AmountCents: 9223372036854775807, Currency: "USD",
		Beneficiary: "Zoë é", OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 123e6, time.UTC), EventID: "m-7"}
	if !ev.OccurredAt.Equal(want.OccurredAt) {
		t.Fatalf("occurred_at = %v", ev.OccurredAt)
	}
	ev.OccurredAt = want.OccurredAt
	if ev != want {
		t.Fatalf("got %+v, want %+v", ev, want)
	}
	// Transport fields are optional and may be null.
	if _, err := intake.DecodeEvent([]byte(`{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"b","event_id":null,"occurred_at":null}`)); err != nil {
		t.Fatal(err)
	}
}

// badEvents are refused inputs: the body, the status the API answers and
// the field the problem names ("" for the body as a whole).
func badEvents() []struct {
	name, body, field string
	status            int
} {
	valid := `"account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"b"`
	return []struct {
		name, body, field string
		status            int
	}{
		{"not json", `settle me`, "", 400},
		{"empty body", ``, "", 400},
		{"array", `[{"settlement_id":"s"}]`, "", 400},
		{"string", `"hello"`, "", 400},
		{"trailing data", `{"settlement_id":"s",` + valid + `} {}`, "", 400},
		{"truncated", `{"settlement_id":"s",` + valid, "", 400},
		{"invalid utf8", "{\"settlement_id\":\"s\xff\"," + valid + "}", "", 400},
		{"duplicate key", `{"settlement_id":"s","settlement_id":"t",` + valid + `}`, "settlement_id", 400},
		{"duplicate amount", `{"settlement_id":"s",` + valid + `,"amount_cents":1000000}`, "amount_cents", 400},
		{"float amount", `{"settlement_id":"s","account_id":"a","amount_cents":1.0,"currency":"EUR","beneficiary":"b"}`, "amount_cents", 422},
		{"exponent amount", `{"settlement_id":"s","account_id":"a","amount_cents":1e3,"currency":"EUR","beneficiary":"b"}`, "amount_cents", 422},
		{"string amount", `{"settlement_id":"s","account_id":"a","amount_cents":"100","currency":"EUR","beneficiary":"b"}`, "amount_cents", 422},
		{"negative amount", `{"settlement_id":"s","account_id":"a","amount_cents":-5,"currency":"EUR","beneficiary":"b"}`, "amount_cents", 422},
		{"zero amount", `{"settlement_id":"s","account_id":"a","amount_cents":0,"currency":"EUR","beneficiary":"b"}`, "amount_cents", 422},
		{"overflow amount", `{"settlement_id":"s","account_id":"a","amount_cents":9223372036854775808,"currency":"EUR","beneficiary":"b"}`, "amount_cents", 422},
		{"huge amount", `{"settlement_id":"s","account_id":"a","amount_cents":` + strings.Repeat("9", 400) + `,"currency":"EUR","beneficiary":"b"}`, "amount_cents", 422},
		{"null amount", `{"settlement_id":"s","account_id":"a","amount_cents":null,"currency":"EUR","beneficiary":"b"}`, "amount_cents", 422},
		{"lower currency", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"eur","beneficiary":"b"}`, "currency", 422},
		{"long currency", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"EURO","beneficiary":"b"}`, "currency", 422},
		{"no such currency", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"XYZ","beneficiary":"b"}`, "currency", 422},
		{"currency without minor units", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"XAU","beneficiary":"b"}`, "currency", 422},
		{"withdrawn currency", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"HRK","beneficiary":"b"}`, "currency", 422},
		{"fund currency", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"CLF","beneficiary":"b"}`, "currency", 422},
		{"right-to-left override in beneficiary", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"ACME\u202eLtd"}`, "beneficiary", 422},
		{"zero-width space in account_id", "{\"settlement_id\":\"s\",\"account_id\":\"a\u200bb\",\"amount_cents\":1,\"currency\":\"EUR\",\"beneficiary\":\"b\"}", "account_id", 422},
		{"BOM in settlement_id", "{\"settlement_id\":\"\ufeffs\"," + valid + "}", "settlement_id", 422},
		{"line separator in beneficiary", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"b\u2028c"}`, "beneficiary", 422},
		{"missing beneficiary", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"EUR"}`, "beneficiary", 422},
		{"missing settlement_id", `{` + valid + `}`, "settlement_id", 422},
		{"unknown field", `{"settlement_id":"s",` + valid + `,"memo":"hi"}`, "memo", 422},
		{"case-folded key", `{"Settlement_ID":"s",` + valid + `}`, "Settlement_ID", 422},
		{"empty settlement_id", `{"settlement_id":"",` + valid + `}`, "settlement_id", 422},
		{"long settlement_id", `{"settlement_id":"` + strings.Repeat("x", 129) + `",` + valid + `}`, "settlement_id", 422},
		{"control in settlement_id", `{"settlement_id":"a\tb",` + valid + `}`, "settlement_id", 422},
		{"numeric settlement_id", `{"settlement_id":42,` + valid + `}`, "settlement_id", 422},
		{"nested settlement_id", `{"settlement_id":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `,` + valid + `}`, "settlement_id", 422},
		{"long account_id", `{"settlement_id":"s","account_id":"` + strings.Repeat("a", 129) + `","amount_cents":1,"currency":"EUR","beneficiary":"b"}`, "account_id", 422},
		{"lone surrogate", `{"settlement_id":"s","account_id":"\ud800","amount_cents":1,"currency":"EUR","beneficiary":"b"}`, "account_id", 422},
		{"long beneficiary", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"` + strings.Repeat("b", 257) + `"}`, "beneficiary", 422},
		{"NUL in beneficiary", `{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"b\u0000c"}`, "beneficiary", 422},
		{"bad occurred_at", `{"settlement_id":"s",` + valid + `,"occurred_at":"yesterday"}`, "occurred_at", 422},
		{"too old", `{"settlement_id":"s",` + valid + `,"occurred_at":"2001-01-01T00:00:00Z"}`, "occurred_at", 422},
		{"in the future", `{"settlement_id":"s",` + valid + `,"occurred_at":"2099-01-01T00:00:00Z"}`, "occurred_at", 422},
		{"long event_id", `{"settlement_id":"s",` + valid + `,"event_id":"` + strings.Repeat("e", 257) + `"}`, "event_id", 422},
		{"too large", `{"settlement_id":"s",` + valid + `,"event_id":"` + strings.Repeat(" ", intake.MaxEventBytes) + `"}`, "", 413},
	}
}

func TestDecodeEventRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range badEvents() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := intake.DecodeEvent([]byte(tc.body))
			if err == nil {
				err = ev.CheckHorizon(time.Now(), intake.DefaultReplayHorizon)
			}
			var inv *intake.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("err = %v, want *InvalidError", err)
			}
			if inv.Field != tc.field {
				t.Fatalf("field = %q, want %q (%v)", inv.Field, tc.field, err)
			}
		})
	}
}

func TestCheckHorizonRefusesTheFuture(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	ev := intake.Event{OccurredAt: now.Add(intake.MaxClockSkew)}
	if err := ev.CheckHorizon(now, time.Hour); err != nil {
		t.Fatalf("at the clock-skew allowance: %v", err)
	}
	ev.OccurredAt = ev.OccurredAt.Add(time.Millisecond)
	var inv *intake.InvalidError
	if err := ev.CheckHorizon(now, time.Hour); !errors.As(err, &inv) || inv.Field != "occurred_at" || errors.Is(err, intake.ErrTooOld) {
		t.Fatalf("past the allowance: %v, want an invalid occurred_at", err)
	}
	if err := ev.CheckHorizon(now, 0); !errors.As(err, &inv) {
		t.Fatalf("past the allowance without a horizon: %v", err)
	}
}

func TestCheckHorizon(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	ev := intake.Event{OccurredAt: now.Add(-720 * time.Hour)}
	if err := ev.CheckHorizon(now, 720*time.Hour); err != nil {
		t.Fatalf("exactly at the horizon: %v", err)
	}
	ev.OccurredAt = ev.OccurredAt.Add(-time.Nanosecond)
	if err := ev.CheckHorizon(now, 720*time.Hour); !errors.Is(err, intake.ErrTooOld) {
		t.Fatalf("past the horizon: %v", err)
	}
	if err := (intake.Event{}).CheckHorizon(now, time.Hour); err != nil {
		t.Fatalf("no occurred_at: %v", err)
	}
}

// TestCanonicalHashGolden pins the encoding: stored receipts hold these
// hashes, so the encoding may never change under them.
func TestCanonicalHashGolden(t *testing.T) {
	t.Parallel()
	ev := intake.Event{SettlementID: "s-1", AccountID: "acc-1", AmountCents: 12345, Currency: "EUR", Beneficiary: "Zoë"}
	const want = "sha256:3d99bb85300a047696f88b8bd4cfc358722fdf7f3537c22fa04217d15808ed41"
	if got := intake.CanonicalHash(ev); got != want {
		t.Fatalf("CanonicalHash = %s, want %s", got, want)
	}
}

// render writes fields as a JSON object in the given key order, with
// random whitespace and random \u escapes of ASCII letters: same meaning,
// different bytes.
func render(r *rand.Rand, fields map[string]any, keys []string) string {
	ws := []string{"", " ", "\n", "\t", "  \r\n"}
	pick := func() string { return ws[r.IntN(len(ws))] }
	var b strings.Builder
	b.WriteString(pick() + "{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(pick() + escape(r, k) + pick() + ":" + pick())
		switch v := fields[k].(type) {
		case string:
			b.WriteString(escape(r, v))
		default:
			fmt.Fprint(&b, v)
		}
		b.WriteString(pick())
	}
	b.WriteString("}" + pick())
	return b.String()
}

func escape(r *rand.Rand, s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b.WriteString(`\` + string(c))
		case c < 0x80 && r.IntN(3) == 0:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func randomString(r *rand.Rand, min, max int) string {
	alphabet := []rune(`abcXYZ019 -_:/"\é€😀`)
	n := min + r.IntN(max-min+1)
	out := make([]rune, n)
	for i := range out {
		out[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(out)
}

// TestCanonicalHashProperties: equal meaning gives an equal hash whatever
// the key order, whitespace, escapes and transport fields; changing any one
// business field changes it.
func TestCanonicalHashProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		fields := map[string]any{
			"settlement_id": randomString(r, 1, 20),
			"account_id":    randomString(r, 1, 20),
			"amount_cents":  1 + r.Int64N(1<<62),
			"currency":      []string{"EUR", "USD", "JPY"}[r.IntN(3)],
			"beneficiary":   randomString(r, 1, 40),
		}
		keys := []string{"settlement_id", "account_id", "amount_cents", "currency", "beneficiary"}
		base, err := intake.DecodeEvent([]byte(render(r, fields, keys)))
		if err != nil {
			t.Fatalf("decoding %v: %v", fields, err)
		}
		h := intake.CanonicalHash(base)

		// Same meaning, other bytes and other transport fields.
		same := map[string]any{}
		for k, v := range fields {
			same[k] = v
		}
		same["event_id"] = randomString(r, 0, 10)
		same["occurred_at"] = time.Now().Add(-time.Duration(r.IntN(1000)) * time.Minute).Format(time.RFC3339Nano)
		keys2 := []string{"settlement_id", "account_id", "amount_cents", "currency", "beneficiary", "event_id", "occurred_at"}
		r.Shuffle(len(keys2), func(i, j int) { keys2[i], keys2[j] = keys2[j], keys2[i] })
		ev2, err := intake.DecodeEvent([]byte(render(r, same, keys2)))
		if err != nil {
			t.Fatalf("decoding the reordered event: %v", err)
		}
		if got := intake.CanonicalHash(ev2); got != h {
			t.Fatalf("same meaning, different hash: %v vs %v", base, ev2)
		}

		// Any business field changed: another hash.
		for _, k := range keys {
			other := base
			switch k {
			case "settlement_id":
				other.SettlementID += "x"
			case "account_id":
				other.AccountID += "x"
			case "amount_cents":
				other.AmountCents++
			case "currency":
				other.Currency = "GBP"
			case "beneficiary":
				other.Beneficiary += "x"
			}
			if intake.CanonicalHash(other) == h {
				t.Fatalf("changing %s kept the hash", k)
			}
		}
	}
	// No field-boundary ambiguity: moving characters between adjacent
	// fields changes the hash.
	a := intake.Event{SettlementID: "ab", AccountID: "c", AmountCents: 1, Currency: "EUR", Beneficiary: "x"}
	b := intake.Event{SettlementID: "a", AccountID: "bc", AmountCents: 1, Currency: "EUR", Beneficiary: "x"}
	if intake.CanonicalHash(a) == intake.CanonicalHash(b) {
		t.Fatal("field boundary ambiguity")
	}
}

func TestCanonicalHashIgnoresKeyOrderExhaustively(t *testing.T) {
	t.Parallel()
	fields := eventFields("perm")
	keys := []string{"settlement_id", "account_id", "amount_cents", "currency", "beneficiary"}
	sort.Strings(keys)
	var want string
	r := rand.New(rand.NewPCG(3, 4))
	permute(keys, 0, func(p []string) {
		ev, err := intake.DecodeEvent([]byte(render(r, fields, p)))
		if err != nil {
			t.Fatal(err)
		}
		h := intake.CanonicalHash(ev)
		if want == "" {
			want = h
		}
		if h != want {
			t.Fatalf("order %v: %s != %s", p, h, want)
		}
	})
}

func permute(a []string, k int, f func([]string)) {
	if k == len(a) {
		f(a)
		return
	}
	for i := k; i < len(a); i++ {
		a[k], a[i] = a[i], a[k]
		permute(a, k+1, f)
		a[k], a[i] = a[i], a[k]
	}
}

// TestDecodeEventRefusesWhatNoOneCanPayOutIn (issue 32, item 13): a
// withdrawn currency, an ISO fund code and the X codes that are no
// currency at all are refused naming currency, while every currency one
// can pay out in, the odd-exponent ones and the X-coded real ones (CFA
// francs, East Caribbean dollar, Caribbean guilder, CFP franc) included,
// is accepted.
func TestDecodeEventRefusesWhatNoOneCanPayOutIn(t *testing.T) {
	t.Parallel()
	for _, code := range []string{
		"HRK", "ZWL", "SLL", "CUC", "ANG", "BGN", // withdrawn
		"CLF", "BOV", "CHE", "CHW", "COU", "MXV", "USN", "UYI", "UYW", // funds
		"XAU", "XAG", "XPT", "XPD", "XTS", "XXX", "XDR", "XSU", "XUA", "XBA", "XBB", "XBC", "XBD", // no currency
	} {
		f := eventFields("s-" + code)
		f["currency"] = code
		_, err := intake.DecodeEvent([]byte(mustJSON(t, f)))
		var inv *intake.InvalidError
		if !errors.As(err, &inv) || inv.Field != "currency" || !errors.Is(err, intake.ErrInvalid) {
			t.Errorf("%s: %v, want 422 naming currency", code, err)
		}
	}
	for _, code := range []string{"EUR", "USD", "GBP", "JPY", "KWD", "BHD", "CLP", "XAF", "XOF", "XCD", "XCG", "XPF", "ZWG", "SLE", "CUP", "VES", "VED"} {
		f := eventFields("s-" + code)
		f["currency"] = code
		if _, err := intake.DecodeEvent([]byte(mustJSON(t, f))); err != nil {
			t.Errorf("%s: %v, want accepted", code, err)
		}
	}
}

// TestDecodeEventRefusesInvisibleCharacters (issue 32, item 13): a format
// character (Cf: bidi overrides and isolates, zero-width characters, the
// BOM, the soft hyphen, tags…), a line or paragraph separator, a control
// or a private-use character in settlement_id, account_id, beneficiary or
// event_id would show one thing on the console and mean another: every
// one of them, from every range of its class, is refused naming the field.
func TestDecodeEventRefusesInvisibleCharacters(t *testing.T) {
	t.Parallel()
	var runes []rune
	for _, table := range []*unicode.RangeTable{unicode.Cf, unicode.Zl, unicode.Zp, unicode.Cc, unicode.Co} {
		for _, r16 := range table.R16 {
			for r := rune(r16.Lo); r <= rune(r16.Hi); r += rune(r16.Stride) {
				runes = append(runes, r)
			}
		}
		for _, r32 := range table.R32 {
			// Private use spans 130,000 code points: its ends and middle do.
			if r32.Hi-r32.Lo > 1000 {
				runes = append(runes, rune(r32.Lo), rune(r32.Lo+r32.Hi)/2, rune(r32.Hi))
				continue
			}
			for r := rune(r32.Lo); r <= rune(r32.Hi); r += rune(r32.Stride) {
				runes = append(runes, r)
			}
		}
	}
	for _, r := range []rune{0x202E, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x00AD, 0x061C, 0x2066, 0x2069, 0xE0001, 0x2028, 0x2029, 0x0085, 0x007F} {
		if !slices.Contains(runes, r) {
			t.Fatalf("U+%04X is missing from the classes tested", r)
		}
	}
	for _, field := range []string{"settlement_id", "account_id", "beneficiary", "event_id"} {
		for _, r := range runes {
			for _, v := range []string{string(r), "ACME" + string(r) + "Ltd", "ACME Ltd" + string(r)} {
				f := eventFields("s-1")
				f[field] = v
				body, err := json.Marshal(f) // \u escapes and raw UTF-8 alike
				if err != nil {
					t.Fatal(err)
				}
				_, err = intake.DecodeEvent(body)
				var inv *intake.InvalidError
				if !errors.As(err, &inv) || inv.Field != field || !errors.Is(err, intake.ErrInvalid) {
					t.Fatalf("%s with U+%04X: %v, want 422 naming %s", field, r, err, field)
				}
			}
		}
	}
	// What people and banks write is still taken.
	for _, v := range []string{"Zoë é", "株式会社 ACME", "Müller & Söhne GmbH", "O'Brien-Smith, J.", "ACME\u00a0Ltd", "شركة", "€ 😀"} {
		f := eventFields("s-ok")
		f["beneficiary"], f["account_id"] = v, v
		if _, err := intake.DecodeEvent([]byte(mustJSON(t, f))); err != nil {
			t.Errorf("%q: %v, want accepted", v, err)
		}
	}
}

// TestValidEventsHashAsBefore: refusing more characters and currencies
// changes nothing for an event that was valid: its payload hash is the one
// stored receipts hold (DESIGN.md section 4).
func TestValidEventsHashAsBefore(t *testing.T) {
	t.Parallel()
	ev, err := intake.DecodeEvent([]byte(`{"beneficiary":"Zo\u00eb","currency":"EUR","amount_cents":12345,"account_id":"acc-1","settlement_id":"s-1","event_id":"e"}`))
	if err != nil {
		t.Fatal(err)
	}
	const want = "sha256:3d99bb85300a047696f88b8bd4cfc358722fdf7f3537c22fa04217d15808ed41"
	if got := intake.CanonicalHash(ev); got != want {
		t.Fatalf("CanonicalHash = %s, want %s", got, want)
	}
}
