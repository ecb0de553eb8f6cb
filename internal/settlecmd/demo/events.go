package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/settle/settle/intake"
)

// Accounts are the accounts the demo's events pay from.
var Accounts = []string{"acc-1", "acc-2", "acc-3", "acc-4", "acc-5"}

// Stream is the demo's generated traffic: first deliveries, then
// redeliveries of some of them (same business fields, another event id and
// another key order) and a few conflicts (a known settlement_id with another
// amount).
type Stream struct {
	// First holds one event per settlement, as NDJSON lines.
	First [][]byte
	// Again holds the redeliveries and conflicts, shuffled, as NDJSON lines.
	Again [][]byte
	// Redeliveries and Conflicts count the events of Again by kind.
	Redeliveries, Conflicts int
	// Amounts is each settlement's amount in its first delivery, the one
	// that must be paid whatever comes later.
	Amounts map[string]int64
	// ConflictIDs are the settlement ids that received a conflicting event.
	ConflictIDs []string
}

var (
	beneficiaries = []string{"Ada Lovelace", "Grace Hopper", "Alan Turing", "Edsger Dijkstra", "Barbara Liskov",
		"Donald Knuth", "Frances Allen", "John Backus", "Leslie Lamport", "Margaret Hamilton"}
	currencies = []string{"EUR", "EUR", "EUR", "USD", "GBP"}
)

// accountIDs turn the demo's beneficiaries into what a connector can pay
// to: Stripe pays out to an external account's id; UK Open Banking to a
// sort code and account number with the account holder's name.
var accountIDs = map[string]func(name string) string{
	"stripe": func(name string) string { return "ba_demo_" + strings.ReplaceAll(name, " ", "_") },
	"obie": func(name string) string {
		h := fnv.New32a()
		_, _ = h.Write([]byte(name))
		return fmt.Sprintf("SortCodeAccountNumber:040004%08d:%s", h.Sum32()%100_000_000, name)
	},
}

// onlyCurrency is the one currency a connector's bank pays in, where it
// pays in one only (Open Banking domestic payments: sterling).
var onlyCurrency = map[string]string{"obie": "GBP"}

// Generate returns n events: about 80% first deliveries, about 20%
// redeliveries, and max(1, n/100) conflicts, drawn from seed.
func Generate(n int, seed int64, now time.Time) Stream {
	return GenerateFor("", n, seed, now)
}

// GenerateFor is Generate with beneficiaries the connector bank can pay
// to (the same draws whatever the connector).
func GenerateFor(bank string, n int, seed int64, now time.Time) Stream {
	return generate(bank, "demo-", false, n, seed, now)
}

// generate is GenerateFor with settlement ids starting with prefix, each
// event naming bank in its bank field when named is true.
func generate(bank, prefix string, named bool, n int, seed int64, now time.Time) Stream {
	beneficiary := func(name string) string { return name }
	if f := accountIDs[bank]; f != nil {
		beneficiary = f
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5e771e))
	conflicts := max(1, n/100)
	unique := max(1, n*4/5)
	if unique+conflicts > n {
		unique = max(1, n-conflicts)
	}
	redeliveries := max(0, n-unique-conflicts)
	st := Stream{Amounts: make(map[string]int64, unique), Redeliveries: redeliveries, Conflicts: conflicts}
	evs := make([]intake.Event, unique)
	for i := range evs {
		evs[i] = intake.Event{
			SettlementID: fmt.Sprintf("%s%04d", prefix, i+1),
			AccountID:    Accounts[rng.IntN(len(Accounts))],
			AmountCents:  100 + rng.Int64N(250_000),
			Currency:     currencies[rng.IntN(len(currencies))],
			Beneficiary:  beneficiary(beneficiaries[rng.IntN(len(beneficiaries))]),
			OccurredAt:   now.Add(-time.Duration(rng.IntN(3600)) * time.Second).UTC().Truncate(time.Second),
			EventID:      fmt.Sprintf("evt-%04d-1", i+1),
		}
		if c := onlyCurrency[bank]; c != "" {
			evs[i].Currency = c
		}
		if named {
			evs[i].Bank = bank
		}
		st.Amounts[evs[i].SettlementID] = evs[i].AmountCents
		st.First = append(st.First, mustLine(evs[i], false))
	}
	for i := range redeliveries {
		e := evs[rng.IntN(unique)]
		e.EventID = fmt.Sprintf("evt-redelivery-%d", i+1)
		st.Again = append(st.Again, mustLine(e, true))
	}
	for _, k := range rng.Perm(unique)[:min(conflicts, unique)] {
		e := evs[k]
		e.AmountCents += 100 + rng.Int64N(10_000)
		e.EventID = fmt.Sprintf("evt-%s-tampered", e.SettlementID)
		st.ConflictIDs = append(st.ConflictIDs, e.SettlementID)
		st.Again = append(st.Again, mustLine(e, false))
	}
	st.Conflicts = len(st.ConflictIDs)
	rng.Shuffle(len(st.Again), func(i, j int) { st.Again[i], st.Again[j] = st.Again[j], st.Again[i] })
	return st
}

// Total is the number of events in the stream.
func (s Stream) Total() int { return len(s.First) + len(s.Again) }

// NDJSON joins lines into an NDJSON body.
func NDJSON(lines [][]byte) []byte {
	return append(bytes.Join(lines, []byte("\n")), '\n')
}

// mustLine encodes e; reordered writes the keys in another order with
// extra spaces, as another producer would, which must not change the
// payload hash.
func mustLine(e intake.Event, reordered bool) []byte {
	if !reordered {
		b, err := json.Marshal(e)
		if err != nil {
			panic(err)
		}
		return b
	}
	bank := ""
	if e.Bank != "" {
		bank = fmt.Sprintf(`, "bank": %q`, e.Bank)
	}
	return fmt.Appendf(nil, `{ "event_id": %q, "beneficiary": %q, "currency": %q, "amount_cents": %d, "account_id": %q, "settlement_id": %q, "occurred_at": %q%s }`,
		e.EventID, e.Beneficiary, e.Currency, e.AmountCents, e.AccountID, e.SettlementID, e.OccurredAt.Format(time.RFC3339), bank)
}
