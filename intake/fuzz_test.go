package intake_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/settlement"
)

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

// FuzzDecodeEvent: any input is either refused with an *InvalidError or
// decoded into an event that satisfies every limit and that decodes again,
// from its own canonical JSON, to the same event and hash. Never a panic.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"settlement_id":"s","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"b"}`))
	for _, tc := range badEvents() {
		if len(tc.body) < 4096 {
			f.Add([]byte(tc.body))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := intake.DecodeEvent(data)
		if err != nil {
			var inv *intake.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("error is not an *InvalidError: %v", err)
			}
			if !utf8.ValidString(inv.Field) {
				t.Fatalf("field name is not valid UTF-8: %q", inv.Field)
			}
			return
		}
		if ev.AmountCents <= 0 || !currencyRE.MatchString(ev.Currency) ||
			n(ev.SettlementID) < 1 || n(ev.SettlementID) > 128 || n(ev.AccountID) < 1 || n(ev.AccountID) > 128 ||
			n(ev.Beneficiary) < 1 || n(ev.Beneficiary) > 256 || n(ev.EventID) > 256 {
			t.Fatalf("accepted an event out of limits: %+v", ev)
		}
		if _, err := settlement.PayoutCurrency(ev.Currency); err != nil {
			t.Fatalf("accepted a currency no payout can be made in: %+v (%v)", ev, err)
		}
		for _, s := range []string{ev.SettlementID, ev.AccountID, ev.Beneficiary, ev.EventID} {
			for _, r := range s {
				if !unicode.IsGraphic(r) {
					t.Fatalf("accepted U+%04X, not a graphic character: %+v", r, ev)
				}
			}
		}
		re := map[string]any{"settlement_id": ev.SettlementID, "account_id": ev.AccountID,
			"amount_cents": json.Number(strconv.FormatInt(ev.AmountCents, 10)), "currency": ev.Currency, "beneficiary": ev.Beneficiary}
		b, err := json.Marshal(re)
		if err != nil {
			t.Fatal(err)
		}
		ev2, err := intake.DecodeEvent(b)
		if err != nil {
			t.Fatalf("re-encoded event refused: %v (%s)", err, b)
		}
		if intake.CanonicalHash(ev2) != intake.CanonicalHash(ev) {
			t.Fatalf("hash changed through re-encoding: %+v vs %+v", ev, ev2)
		}
	})
}

func n(s string) int { return utf8.RuneCountInString(s) }

// FuzzCanonicalHash: equal business fields give equal hashes whatever the
// transport fields; two different business tuples give different hashes.
func FuzzCanonicalHash(f *testing.F) {
	f.Add("s", "a", int64(1), "EUR", "b", "s", "a", int64(1), "EUR", "b", "e1", "e2")
	f.Add("ab", "c", int64(1), "EUR", "x", "a", "bc", int64(1), "EUR", "x", "", "")
	f.Add("s\n", "a", int64(5), "USD", "b", "s", "\na", int64(5), "USD", "b", "", "x")
	f.Add("s", "a:1:", int64(12), "EUR", "b", "s", "a", int64(1), "EUR", "2:b", "", "")
	f.Fuzz(func(t *testing.T, id1, acc1 string, amt1 int64, cur1, ben1, id2, acc2 string, amt2 int64, cur2, ben2, evID1, evID2 string) {
		a := intake.Event{SettlementID: id1, AccountID: acc1, AmountCents: amt1, Currency: cur1, Beneficiary: ben1, EventID: evID1}
		b := intake.Event{SettlementID: id2, AccountID: acc2, AmountCents: amt2, Currency: cur2, Beneficiary: ben2, EventID: evID2}
		sameBusiness := id1 == id2 && acc1 == acc2 && amt1 == amt2 && cur1 == cur2 && ben1 == ben2
		ha, hb := intake.CanonicalHash(a), intake.CanonicalHash(b)
		if sameBusiness != (ha == hb) {
			t.Fatalf("same business fields %v, equal hashes %v: %+v %+v", sameBusiness, ha == hb, a, b)
		}
		a2 := a
		a2.EventID = evID2
		if intake.CanonicalHash(a2) != ha {
			t.Fatal("a transport field changed the hash")
		}
		if len(ha) != len("sha256:")+64 {
			t.Fatalf("malformed hash %q", ha)
		}
	})
}
