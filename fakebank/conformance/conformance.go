// Package conformance is the bank protocol's conformance suite (DESIGN.md
// section 7): one table of cases that any server claiming to speak the
// protocol must pass, run against a base URL. fakebank's tests run it
// in-process and against `settle fakebank` as a subprocess.
//
// The suite owns no bank. It drives the bank only over HTTP, resets the fault
// profile to zero before each case through the admin API and restores the
// profile it found when it ends. It must never be pointed at a bank whose
// stats matter afterwards: some cases deliberately pay one reference twice,
// so max_payments_per_reference ends at 2 or more.
package conformance

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
)

// testCase is one conformance case. Cases run one after another on the
// same bank, each starting from an all-zero fault profile.
type testCase struct {
	name string
	run  func(t *testing.T, c *client)
}

// Run runs every case of the suite against the bank at baseURL. The cases
// run serially because they change the bank's global fault profile.
func Run(t *testing.T, baseURL string) {
	t.Helper()
	c := newClient(t, baseURL)
	orig := c.faults(t)
	t.Cleanup(func() { c.setFaults(t, orig) })
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			c.setFaults(t, fakebank.Faults{})
			tc.run(t, c)
		})
	}
}

// hour is a settle delay long enough that a payment stays accepted for the
// whole suite.
const hour = int64(time.Hour / time.Millisecond)

// cases returns the suite's table of cases.
func cases() []testCase {
	return []testCase{
		{"missing idempotency key is 400", func(t *testing.T, c *client) {
			before := c.stats(t).Payments
			r := c.postRaw(t, "", mustJSON(t, c.newRequest()))
			if r.status != http.StatusBadRequest {
				t.Fatalf("want 400, got %s", r)
			}
			r.errorBody(t)
			if after := c.stats(t).Payments; after != before {
				t.Fatalf("payments went from %d to %d", before, after)
			}
		}},

		{"new key creates an accepted payment", func(t *testing.T, c *client) {
			c.setFaults(t, fakebank.Faults{SettleDelayMS: hour})
			key, req := c.unique("key"), c.newRequest()
			p := c.create(t, key, req)
			checkPayment(t, p, key, req)
			if p.Status != bankclient.StatusAccepted {
				t.Fatalf("status: want accepted, got %q", p.Status)
			}
			got := c.mustByKey(t, key)
			if got.ID != p.ID || got.Status != bankclient.StatusAccepted {
				t.Fatalf("by-key: want %s accepted, got %s %s", p.ID, got.ID, got.Status)
			}
			checkPayment(t, got, key, req)
		}},

		{"payment settles after the settle delay without being polled", func(t *testing.T, c *client) {
			key, req := c.unique("key"), c.newRequest()
			c.create(t, key, req)
			eventually(t, "the payment is settled", func() bool {
				return c.mustByKey(t, key).Status == bankclient.StatusSettled
			})
		}},

		{"settlement failure rate 1 settles as failed", func(t *testing.T, c *client) {
			c.setFaults(t, fakebank.Faults{SettlementFailureRate: 1})
			key, req := c.unique("key"), c.newRequest()
			c.create(t, key, req)
			var p bankclient.Payment
			eventually(t, "the payment is final", func() bool {
				p = c.mustByKey(t, key)
				return p.Status.Final()
			})
			if p.Status != bankclient.StatusFailed || p.FailureReason == "" {
				t.Fatalf("want failed with a reason, got %q %q", p.Status, p.FailureReason)
			}
		}},

		{"same key and body replays the payment", func(t *testing.T, c *client) {
			key, req := c.unique("key"), c.newRequest()
			first := c.create(t, key, req)
			before := c.stats(t)
			r := c.post(t, key, req)
			if r.status != http.StatusOK {
				t.Fatalf("replay: want 200, got %s", r)
			}
			if h := r.header.Get("Idempotent-Replayed"); h != "true" {
				t.Fatalf("replay: Idempotent-Replayed = %q, want true", h)
			}
			var again bankclient.Payment
			r.decode(t, &again)
			if again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) {
				t.Fatalf("replay: want payment %s, got %s", first.ID, again.ID)
			}
			checkPayment(t, again, key, req)
			after := c.stats(t)
			if after.Payments != before.Payments || after.Replays != before.Replays+1 {
				t.Fatalf("stats: payments %d→%d (want same), replays %d→%d (want +1)",
					before.Payments, after.Payments, before.Replays, after.Replays)
			}
		}},

		{"replay ignores JSON formatting and key order", func(t *testing.T, c *client) {
			key, req := c.unique("key"), c.newRequest()
			first := c.create(t, key, req)
			body := `{ "reference": "` + req.Reference + `", "currency": "EUR",
				"creditor_account": "` + req.CreditorAccount + `", "debtor_account": "` + req.DebtorAccount + `",
				"amount_cents": 12345 }`
			r := c.postRaw(t, key, []byte(body))
			if r.status != http.StatusOK {
				t.Fatalf("want 200, got %s", r)
			}
			var p bankclient.Payment
			r.decode(t, &p)
			if p.ID != first.ID {
				t.Fatalf("want payment %s, got %s", first.ID, p.ID)
			}
		}},

		{"same key with another body is idempotency_key_reuse", func(t *testing.T, c *client) {
			key, req := c.unique("key"), c.newRequest()
			first := c.create(t, key, req)
			before := c.stats(t)
			other := req
			other.AmountCents++
			r := c.post(t, key, other)
			if r.status != http.StatusUnprocessableEntity {
				t.Fatalf("want 422, got %s", r)
			}
			if e := r.errorBody(t); e.Error != settle.ErrorCodeKeyReuse {
				t.Fatalf("want error %q, got %q", settle.ErrorCodeKeyReuse, e.Error)
			}
			after := c.stats(t)
			if after.Payments != before.Payments || after.KeyReuseConflicts != before.KeyReuseConflicts+1 {
				t.Fatalf("stats: payments %d→%d (want same), key_reuse_conflicts %d→%d (want +1)",
					before.Payments, after.Payments, before.KeyReuseConflicts, after.KeyReuseConflicts)
			}
			if p := c.mustByKey(t, key); p.ID != first.ID || p.AmountCents != req.AmountCents {
				t.Fatalf("by-key after conflict: want %s of %d, got %s of %d", first.ID, req.AmountCents, p.ID, p.AmountCents)
			}
		}},

		{"concurrent identical requests create one payment", func(t *testing.T, c *client) {
			key, req := c.unique("key"), c.newRequest()
			body := mustJSON(t, req)
			const n = 16
			var wg sync.WaitGroup
			results := make([]response, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					results[i], errs[i] = c.do(context.Background(), http.MethodPost, "/v1/payments",
						map[string]string{"Idempotency-Key": key}, body)
				})
			}
			wg.Wait()
			created, ids := 0, map[string]bool{}
			for i, r := range results {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				var p bankclient.Payment
				switch r.status {
				case http.StatusCreated:
					created++
				case http.StatusOK:
				default:
					t.Fatalf("want 201 or 200, got %s", r)
				}
				r.decode(t, &p)
				ids[p.ID] = true
			}
			if created != 1 || len(ids) != 1 {
				t.Fatalf("want exactly one 201 and one payment id, got %d created, ids %v", created, ids)
			}
		}},

		{"reject rate 1 rejects definitively, pinned to the key", func(t *testing.T, c *client) {
			before := c.stats(t).Payments
			c.setFaults(t, fakebank.Faults{RejectRate: 1})
			key, req := c.unique("key"), c.newRequest()
			r := c.post(t, key, req)
			if r.status != http.StatusUnprocessableEntity {
				t.Fatalf("want 422, got %s", r)
			}
			if e := r.errorBody(t); e.Error != settle.ErrorCodeRejected {
				t.Fatalf("want error %q, got %q", settle.ErrorCodeRejected, e.Error)
			}
			c.setFaults(t, fakebank.Faults{})
			r = c.post(t, key, req)
			if r.status != http.StatusUnprocessableEntity || r.errorBody(t).Error != settle.ErrorCodeRejected {
				t.Fatalf("retry after the rejection: want 422 rejected, got %s", r)
			}
			if r := c.byKey(t, key); r.status != http.StatusNotFound {
				t.Fatalf("by-key of a rejected request: want 404, got %s", r)
			}
			if after := c.stats(t).Payments; after != before {
				t.Fatalf("payments went from %d to %d", before, after)
			}
		}},

		{"invalid requests get a clear 4xx and create nothing", func(t *testing.T, c *client) {
			before := c.stats(t).Payments
			valid := string(mustJSON(t, c.newRequest()))
			withAmount := func(a string) string {
				return `{"amount_cents":` + a + `,"currency":"EUR","debtor_account":"D","creditor_account":"C","reference":"` + c.unique("ref") + `"}`
			}
			bodies := []struct {
				name   string
				body   string
				status int
				code   string
			}{
				{"malformed JSON", `{"amount_cents":`, 400, ""},
				{"not an object", `[1,2]`, 400, ""},
				{"empty body", ``, 400, ""},
				{"unknown field", strings.Replace(valid, `{`, `{"colour":"red",`, 1), 400, ""},
				{"trailing data", valid + `{}`, 400, ""},
				{"fractional amount", withAmount("12.5"), 400, ""},
				{"amount as string", withAmount(`"100"`), 400, ""},
				{"amount overflowing int64", withAmount("92233720368547758070"), 400, ""},
				{"oversize body", `{"reference":"` + strings.Repeat("x", 70<<10) + `"}`, 413, ""},
				{"zero amount", withAmount("0"), 422, settle.ErrorCodeRejected},
				{"negative amount", withAmount("-5"), 422, settle.ErrorCodeRejected},
				{"lower-case currency", strings.Replace(valid, `"EUR"`, `"eur"`, 1), 422, settle.ErrorCodeRejected},
				{"four-letter currency", strings.Replace(valid, `"EUR"`, `"EURO"`, 1), 422, settle.ErrorCodeRejected},
				{"missing reference", `{"amount_cents":1,"currency":"EUR","debtor_account":"D","creditor_account":"C"}`, 422, settle.ErrorCodeRejected},
			}
			for _, tc := range bodies {
				r := c.postRaw(t, c.unique("key"), []byte(tc.body))
				if r.status != tc.status {
					t.Errorf("%s: want %d, got %s", tc.name, tc.status, r)
					continue
				}
				if e := r.errorBody(t); tc.code != "" && e.Error != tc.code {
					t.Errorf("%s: want error %q, got %q", tc.name, tc.code, e.Error)
				}
			}
			if r := c.postRaw(t, "bad key", []byte(valid)); r.status != http.StatusBadRequest {
				t.Errorf("key with a space: want 400, got %s", r)
			}
			if after := c.stats(t).Payments; after != before {
				t.Fatalf("payments went from %d to %d", before, after)
			}
		}},

		{"by-key of an unknown key is 404 not_found", func(t *testing.T, c *client) {
			r := c.byKey(t, c.unique("never-seen"))
			if r.status != http.StatusNotFound {
				t.Fatalf("want 404, got %s", r)
			}
			if e := r.errorBody(t); e.Error != "not_found" {
				t.Fatalf("want error not_found, got %q", e.Error)
			}
		}},

		{"statement lists every payment in creation order with stable cursors", func(t *testing.T, c *client) {
			c.setFaults(t, fakebank.Faults{SettleDelayMS: hour})
			var mine []bankclient.Payment
			var reqs []bankclient.PaymentRequest
			for i := range 5 {
				req := c.newRequest()
				req.AmountCents = int64(100 + i)
				reqs = append(reqs, req)
				mine = append(mine, c.create(t, c.unique("key"), req))
			}
			big := c.statement(t, 1000)
			small := c.statement(t, 2)
			if !slices.Equal(ids(big), ids(small)) {
				t.Fatalf("pages of 1000 and of 2 disagree: %d vs %d payments", len(big), len(small))
			}
			if seen := ids(big); len(seen) != len(uniq(seen)) {
				t.Fatal("statement lists a payment twice")
			}
			byID := map[string]bankclient.Payment{}
			pos := map[string]int{}
			for i, p := range big {
				byID[p.ID], pos[p.ID] = p, i
			}
			last := -1
			for i, m := range mine {
				p, ok := byID[m.ID]
				if !ok {
					t.Fatalf("payment %s missing from the statement", m.ID)
				}
				if pos[m.ID] <= last {
					t.Fatalf("payment %s out of creation order", m.ID)
				}
				last = pos[m.ID]
				if p.Reference != reqs[i].Reference || p.AmountCents != reqs[i].AmountCents ||
					p.Currency != reqs[i].Currency || !p.Status.Valid() {
					t.Fatalf("statement entry %+v does not match request %+v", p, reqs[i])
				}
			}
		}},

		{"statement rejects bad parameters", func(t *testing.T, c *client) {
			for _, q := range []string{"limit=0", "limit=-1", "limit=1001", "limit=abc", "after=nonsense", "after=-1", "after=999999999999"} {
				r := c.must(t, http.MethodGet, "/v1/statement?"+q, nil, nil)
				if r.status != http.StatusBadRequest {
					t.Errorf("%s: want 400, got %s", q, r)
					continue
				}
				r.errorBody(t)
			}
			r := c.must(t, http.MethodGet, "/v1/statement", nil, nil)
			if r.status != http.StatusOK {
				t.Fatalf("no parameters: want 200, got %s", r)
			}
			var pg bankclient.StatementPage
			r.decode(t, &pg)
			if len(pg.Payments) > 100 {
				t.Fatalf("default limit: want at most 100 payments, got %d", len(pg.Payments))
			}
		}},

		{"PUT /admin/faults replaces the whole profile and validates it", func(t *testing.T, c *client) {
			full := fakebank.Faults{
				FailBeforeRate: 0.01, DropResponseRate: 0.02, StatusErrorRate: 0.03, RejectRate: 0.04,
				SettlementFailureRate: 0.05, LatencyMinMS: 0, LatencyMaxMS: 1, SettleDelayMS: 7, KeyTTLMS: hour,
			}
			c.setFaults(t, full)
			if got := c.faults(t); got != full {
				t.Fatalf("GET after PUT: want %+v, got %+v", full, got)
			}
			r := c.must(t, http.MethodPut, "/admin/faults", nil, []byte(`{"settle_delay_ms":9}`))
			if r.status != http.StatusOK {
				t.Fatalf("partial PUT: want 200, got %s", r)
			}
			if got, want := c.faults(t), (fakebank.Faults{SettleDelayMS: 9}); got != want {
				t.Fatalf("absent fields must become 0: want %+v, got %+v", want, got)
			}
			for _, body := range []string{
				`{"reject_rate":1.5}`, `{"fail_before_rate":-0.1}`, `{"latency_min_ms":10,"latency_max_ms":5}`,
				`{"settle_delay_ms":-1}`, `{"key_ttl_ms":-1}`, `{"rejct_rate":0.5}`, `{"reject_rate":`, `{"reject_rate":"high"}`,
			} {
				r := c.must(t, http.MethodPut, "/admin/faults", nil, []byte(body))
				if r.status != http.StatusBadRequest {
					t.Errorf("PUT %s: want 400, got %s", body, r)
				}
			}
			if got, want := c.faults(t), (fakebank.Faults{SettleDelayMS: 9}); got != want {
				t.Fatalf("an invalid PUT changed the profile to %+v", got)
			}
		}},

		{"fail_before rate 1 answers 5xx and creates nothing", func(t *testing.T, c *client) {
			before := c.stats(t).Payments
			c.setFaults(t, fakebank.Faults{FailBeforeRate: 1})
			key := c.unique("key")
			r := c.post(t, key, c.newRequest())
			if r.status < 500 {
				t.Fatalf("want 5xx, got %s", r)
			}
			c.setFaults(t, fakebank.Faults{})
			if r := c.byKey(t, key); r.status != http.StatusNotFound {
				t.Fatalf("by-key after fail_before: want 404, got %s", r)
			}
			if after := c.stats(t).Payments; after != before {
				t.Fatalf("payments went from %d to %d", before, after)
			}
		}},

		{"drop_response rate 1 processes the payment but loses the answer", func(t *testing.T, c *client) {
			before := c.stats(t).Payments
			c.setFaults(t, fakebank.Faults{DropResponseRate: 1})
			var keys []string
			for range 8 {
				key := c.unique("key")
				keys = append(keys, key)
				r, err := c.do(context.Background(), http.MethodPost, "/v1/payments",
					map[string]string{"Idempotency-Key": key}, mustJSON(t, c.newRequest()))
				if err == nil && r.status != http.StatusGatewayTimeout {
					t.Fatalf("want no answer or 504, got %s", r)
				}
			}
			c.setFaults(t, fakebank.Faults{})
			for _, key := range keys {
				c.mustByKey(t, key)
			}
			if after := c.stats(t).Payments; after != before+int64(len(keys)) {
				t.Fatalf("payments went from %d to %d, want +%d", before, after, len(keys))
			}
		}},

		{"status_error rate 1 fails status calls with 5xx", func(t *testing.T, c *client) {
			key := c.unique("key")
			c.create(t, key, c.newRequest())
			c.setFaults(t, fakebank.Faults{StatusErrorRate: 1})
			if r := c.byKey(t, key); r.status < 500 {
				t.Fatalf("want 5xx, got %s", r)
			}
			c.setFaults(t, fakebank.Faults{})
			c.mustByKey(t, key)
		}},

		{"latency holds the answer back and ends with the caller", func(t *testing.T, c *client) {
			c.setFaults(t, fakebank.Faults{LatencyMinMS: 1, LatencyMaxMS: 3})
			key := c.unique("key")
			c.create(t, key, c.newRequest())
			c.mustByKey(t, key)
			c.setFaults(t, fakebank.Faults{LatencyMinMS: hour, LatencyMaxMS: hour})
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := c.do(ctx, http.MethodGet, "/v1/payments/by-key/"+key, nil, nil)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("want the caller's deadline to end the call, got %v", err)
			}
		}},

		{"key TTL: a forgotten key creates a second payment", func(t *testing.T, c *client) {
			c.setFaults(t, fakebank.Faults{KeyTTLMS: 1})
			key, req := c.unique("key"), c.newRequest()
			first := c.create(t, key, req)
			eventually(t, "the bank forgets the key", func() bool {
				return c.byKey(t, key).status == http.StatusNotFound
			})
			c.setFaults(t, fakebank.Faults{})
			second := c.create(t, key, req)
			if second.ID == first.ID {
				t.Fatalf("want a new payment, got the old one %s", first.ID)
			}
			if got := c.mustByKey(t, key); got.ID != second.ID {
				t.Fatalf("by-key: want the new payment %s, got %s", second.ID, got.ID)
			}
			n := 0
			for _, p := range c.statement(t, 1000) {
				if p.Reference == req.Reference {
					n++
				}
			}
			if n != 2 {
				t.Fatalf("statement: want both payments of the reference, got %d", n)
			}
			s := c.stats(t)
			if s.MaxExecutionsPerKey < 2 || s.MaxPaymentsPerReference < 2 {
				t.Fatalf("stats: want max_executions_per_key and max_payments_per_reference >= 2, got %+v", s)
			}
		}},

		{"two keys for one reference are a double payment in the stats", func(t *testing.T, c *client) {
			req := c.newRequest()
			c.create(t, c.unique("key"), req)
			c.create(t, c.unique("key"), req)
			if s := c.stats(t); s.MaxPaymentsPerReference < 2 {
				t.Fatalf("want max_payments_per_reference >= 2, got %+v", s)
			}
		}},
	}
}

// checkPayment checks that p echoes the request it was created from.
func checkPayment(t *testing.T, p bankclient.Payment, key string, req bankclient.PaymentRequest) {
	t.Helper()
	switch {
	case p.ID == "":
		t.Fatalf("payment without an id: %+v", p)
	case p.IdempotencyKey != key:
		t.Fatalf("idempotency_key: want %q, got %q", key, p.IdempotencyKey)
	case p.Reference != req.Reference || p.AmountCents != req.AmountCents || p.Currency != req.Currency ||
		p.DebtorAccount != req.DebtorAccount || p.CreditorAccount != req.CreditorAccount:
		t.Fatalf("payment %+v does not echo request %+v", p, req)
	case !p.Status.Valid():
		t.Fatalf("invalid status %q", p.Status)
	case p.CreatedAt.IsZero():
		t.Fatalf("payment without created_at: %+v", p)
	}
}

func ids(ps []bankclient.Payment) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func uniq(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
