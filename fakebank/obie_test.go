package fakebank_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
)

// TestOBIEConsentThenPayment walks the whole flow against Open Banking's
// OpenAPI document: a consent awaiting authorisation keeps the payment
// refused; once authorised, the payment is made and consumes it; replays
// answer 201 with the current resource; another body under a key is
// refused; the payment's status progresses.
func TestOBIEConsentThenPayment(t *testing.T) {
	t.Parallel()
	ob := setupOB(t, fakebank.Options{Faults: fakebank.Faults{ConsentDelayMS: 1000, SettleDelayMS: 1000}})

	c := ob.postConsent(t, "consent-key-1", consentBody("ref-1", "165.88"))
	if c.status != http.StatusCreated || c.get(t, "Data", "Status") != "AwaitingAuthorisation" {
		t.Fatalf("consent: %d %s", c.status, c.body)
	}
	cid := c.get(t, "Data", "ConsentId")
	if self := c.get(t, "Links", "Self"); self != ob.url+"/open-banking/v3.1/pisp/domestic-payment-consents/"+cid {
		t.Errorf("Links.Self %q", self)
	}
	if a := c.get(t, "Data", "Initiation", "InstructedAmount", "Amount"); a != "165.88" {
		t.Errorf("the consent's amount reads %q", a)
	}

	// Awaiting authorisation: the payment is refused, nothing is made.
	p := ob.postPayment(t, "pay-key-1", paymentBody(cid, "ref-1", "165.88"))
	if p.status != http.StatusBadRequest || p.errorCode(t) != fakebank.OBResourceInvalidConsent {
		t.Fatalf("payment under an awaiting consent: %d %s", p.status, p.body)
	}
	ob.clock.Advance(999 * time.Millisecond)
	if p := ob.postPayment(t, "pay-key-1", paymentBody(cid, "ref-1", "165.88")); p.status != http.StatusBadRequest {
		t.Fatalf("payment a millisecond before authorisation: %d %s", p.status, p.body)
	}
	if st := ob.bank.Stats(); st.Payments != 0 {
		t.Fatalf("stats %+v: a refused payment was made", st)
	}
	ob.clock.Advance(time.Millisecond)
	if g := ob.getConsent(t, cid); g.status != http.StatusOK || g.get(t, "Data", "Status") != "Authorised" {
		t.Fatalf("consent after consent_delay_ms: %d %s", g.status, g.body)
	}

	// Another Initiation than the consent's is refused.
	if p := ob.postPayment(t, "pay-key-x", paymentBody(cid, "ref-1", "165.89")); p.status != http.StatusBadRequest || p.errorCode(t) != fakebank.OBResourceConsentMismatch {
		t.Fatalf("payment with another amount: %d %s", p.status, p.body)
	}

	p = ob.postPayment(t, "pay-key-1", paymentBody(cid, "ref-1", "165.88"))
	if p.status != http.StatusCreated || p.get(t, "Data", "Status") != "Pending" || p.get(t, "Data", "ConsentId") != cid {
		t.Fatalf("payment: %d %s", p.status, p.body)
	}
	pid := p.get(t, "Data", "DomesticPaymentId")
	if g := ob.getConsent(t, cid); g.get(t, "Data", "Status") != "Consumed" {
		t.Errorf("consent after the payment: %s", g.body)
	}

	// Statuses progress with settle_delay_ms; a replay is 201 with the
	// current resource.
	for _, step := range []struct {
		advance time.Duration
		status  string
	}{
		{0, "Pending"},
		{500 * time.Millisecond, "AcceptedSettlementInProcess"},
		{500 * time.Millisecond, "AcceptedSettlementCompleted"},
		{500 * time.Millisecond, "AcceptedCreditSettlementCompleted"},
	} {
		ob.clock.Advance(step.advance)
		if g := ob.getPayment(t, pid); g.status != http.StatusOK || g.get(t, "Data", "Status") != step.status {
			t.Fatalf("after %v more: %d %s, want %s", step.advance, g.status, g.body, step.status)
		}
		r := ob.postPayment(t, "pay-key-1", paymentBody(cid, "ref-1", "165.88"))
		if r.status != http.StatusCreated || r.get(t, "Data", "DomesticPaymentId") != pid || r.get(t, "Data", "Status") != step.status {
			t.Fatalf("replay: %d %s, want 201 with %s %s", r.status, r.body, pid, step.status)
		}
	}

	// The same key with another body is refused and changes nothing.
	r := ob.postPayment(t, "pay-key-1", paymentBody(cid, "ref-1", "1.00"))
	if r.status != http.StatusBadRequest || r.errorCode(t) != fakebank.OBHeaderInvalid || r.get(t, "Errors", "Path") != "x-idempotency-key" {
		t.Fatalf("another body under the key: %d %s", r.status, r.body)
	}
	// A new key under the consumed consent pays nothing.
	if r := ob.postPayment(t, "pay-key-2", paymentBody(cid, "ref-1", "165.88")); r.status != http.StatusBadRequest || r.errorCode(t) != fakebank.OBResourceInvalidConsent {
		t.Fatalf("a second payment under a consumed consent: %d %s", r.status, r.body)
	}

	// The consent's key: a replay is the current consent, another body is
	// refused.
	if r := ob.postConsent(t, "consent-key-1", consentBody("ref-1", "165.88")); r.status != http.StatusCreated || r.get(t, "Data", "ConsentId") != cid || r.get(t, "Data", "Status") != "Consumed" {
		t.Fatalf("consent replay: %d %s", r.status, r.body)
	}
	if r := ob.postConsent(t, "consent-key-1", consentBody("ref-1", "1.00")); r.status != http.StatusBadRequest || r.errorCode(t) != fakebank.OBHeaderInvalid {
		t.Fatalf("consent key with another body: %d %s", r.status, r.body)
	}

	// Ids the bank does not hold are 400, as the profile requires.
	for _, a := range []obAnswer{ob.getPayment(t, "pay_000000000099"), ob.getConsent(t, "cns_000000000099"), ob.getPayment(t, "nonsense")} {
		if a.status != http.StatusBadRequest || a.errorCode(t) != fakebank.OBResourceNotFound {
			t.Errorf("unknown id: %d %s", a.status, a.body)
		}
	}

	want := fakebank.Stats{Payments: 1, Replays: 4, KeyReuseConflicts: 1, MaxExecutionsPerKey: 1, MaxPaymentsPerReference: 1}
	if st := ob.bank.Stats(); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if cs := ob.bank.ConsentStats(); cs != (fakebank.ConsentStats{Consents: 1, ConsentReplays: 1, ConsentKeyReuseConflicts: 1}) {
		t.Errorf("consent stats %+v", cs)
	}
}

// TestOBIEConsentRejectedOrAwaitingForEver: consent_reject_rate rejects a
// consent once consent_delay_ms has passed, the admin endpoint rejects
// one at once, and a consent under a huge delay stays awaiting; no
// payment is made under any of them.
func TestOBIEConsentRejectedOrAwaitingForEver(t *testing.T) {
	t.Parallel()
	ob := setupOB(t, fakebank.Options{Faults: fakebank.Faults{ConsentDelayMS: 10, ConsentRejectRate: 1}})
	rejected := ob.mustConsent(t, "rej-1", "10.00")
	ob.clock.Advance(10 * time.Millisecond)
	if g := ob.getConsent(t, rejected); g.get(t, "Data", "Status") != "Rejected" {
		t.Fatalf("consent at consent_reject_rate 1: %s", g.body)
	}
	if p := ob.postPayment(t, "p-rej-1", paymentBody(rejected, "rej-1", "10.00")); p.status != http.StatusBadRequest || p.errorCode(t) != fakebank.OBResourceInvalidConsent {
		t.Fatalf("payment under a rejected consent: %d %s", p.status, p.body)
	}

	// A year: awaiting for as long as any test runs.
	if err := ob.bank.SetFaults(fakebank.Faults{ConsentDelayMS: 365 * 24 * 3600 * 1000}); err != nil {
		t.Fatal(err)
	}
	forever := ob.mustConsent(t, "wait-1", "10.00")
	byAdmin := ob.mustConsent(t, "admin-1", "10.00")
	ob.clock.Advance(48 * time.Hour)
	if g := ob.getConsent(t, forever); g.get(t, "Data", "Status") != "AwaitingAuthorisation" {
		t.Fatalf("consent two days in: %s", g.body)
	}
	if p := ob.postPayment(t, "p-wait-1", paymentBody(forever, "wait-1", "10.00")); p.status != http.StatusBadRequest || p.errorCode(t) != fakebank.OBResourceInvalidConsent {
		t.Fatalf("payment under an awaiting consent: %d %s", p.status, p.body)
	}

	// The customer rejects at once, through the admin API.
	res, err := http.Post(ob.url+"/admin/consents/"+byAdmin+"/reject", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("admin reject: %d", res.StatusCode)
	}
	if g := ob.getConsent(t, byAdmin); g.get(t, "Data", "Status") != "Rejected" {
		t.Fatalf("consent rejected by the admin API: %s", g.body)
	}
	if err := ob.bank.DecideConsent(byAdmin, true); err == nil {
		t.Error("a rejected consent was authorised after all")
	}
	if err := ob.bank.DecideConsent(forever, true); err != nil {
		t.Fatal(err)
	}
	if p := ob.postPayment(t, "p-wait-1", paymentBody(forever, "wait-1", "10.00")); p.status != http.StatusCreated {
		t.Fatalf("payment once authorised: %d %s", p.status, p.body)
	}
	if st := ob.bank.Stats(); st.Payments != 1 || st.MaxPaymentsPerReference != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestOBIEAmountsByExponent: amounts are decimal strings converted
// exactly by the currency's ISO 4217 exponent; one that is not a whole
// number of minor units, or in a currency the bank does not know, is
// refused.
func TestOBIEAmountsByExponent(t *testing.T) {
	t.Parallel()
	ob := setupOB(t, fakebank.Options{})
	c := ob.invalidClient(t)
	for _, tc := range []struct {
		amount, currency string
		minor            int64
		code             string
	}{
		{"12.5", "GBP", 1250, ""},
		{"12.500", "GBP", 1250, ""},
		{"7", "JPY", 7, ""},
		{"1.234", "KWD", 1234, ""},
		{"12.505", "GBP", 0, fakebank.OBFieldInvalid},
		{"7.5", "JPY", 0, fakebank.OBFieldInvalid},
		{"0.00", "GBP", 0, fakebank.OBFieldInvalid},
		{"1.00", "XQQ", 0, fakebank.OBUnsupportedCurrency},
	} {
		body := consentBody("amt-"+tc.amount+tc.currency, tc.amount)
		body["Data"].(obj)["Initiation"].(obj)["InstructedAmount"] = obj{"Amount": tc.amount, "Currency": tc.currency}
		client := ob.http
		if tc.code != "" {
			client = c
		}
		a := ob.do(t, client, request{method: http.MethodPost, path: "/domestic-payment-consents", key: "k-" + tc.amount + tc.currency, body: body})
		if tc.code != "" {
			if a.status != http.StatusBadRequest || a.errorCode(t) != tc.code {
				t.Errorf("%s %s: %d %s, want 400 %s", tc.amount, tc.currency, a.status, a.body, tc.code)
			}
			continue
		}
		if a.status != http.StatusCreated {
			t.Errorf("%s %s: %d %s", tc.amount, tc.currency, a.status, a.body)
			continue
		}
		got, err := fakebank.FormatOBAmount(tc.minor, tc.currency)
		if err != nil || got == "" {
			t.Fatal(err)
		}
		cid := a.get(t, "Data", "ConsentId")
		p := ob.do(t, ob.http, request{method: http.MethodPost, path: "/domestic-payments", key: "p-" + tc.amount + tc.currency,
			body: obj{"Data": obj{"ConsentId": cid, "Initiation": body["Data"].(obj)["Initiation"]}, "Risk": body["Risk"]}})
		if p.status != http.StatusCreated {
			t.Fatalf("%s %s payment: %d %s", tc.amount, tc.currency, p.status, p.body)
		}
		pm, ok := ob.bank.PaymentByID(p.get(t, "Data", "DomesticPaymentId"))
		if !ok || pm.AmountCents != tc.minor || pm.Currency != tc.currency {
			t.Errorf("%s %s: booked %+v, want %d minor units (%s)", tc.amount, tc.currency, pm, tc.minor, got)
		}
	}
}

// TestOBIERefusesWhatTheProfileRefuses: required headers, media types and
// malformed bodies get the profile's status and the OBIE error shape
// (validated against the document), and nothing is created.
func TestOBIERefusesWhatTheProfileRefuses(t *testing.T) {
	t.Parallel()
	ob := setupOB(t, fakebank.Options{})
	c := ob.invalidClient(t)
	good := consentBody("hdr-1", "1.00")
	for _, tc := range []struct {
		name   string
		rq     request
		status int
		code   string
	}{
		{"no bearer token", request{noAuth: true}, http.StatusUnauthorized, ""},
		{"no idempotency key", request{key: "-"}, http.StatusBadRequest, fakebank.OBHeaderMissing},
		{"41-character key", request{key: strings.Repeat("k", 41)}, http.StatusBadRequest, fakebank.OBHeaderInvalid},
		{"not JSON", request{raw: []byte("Data=1")}, http.StatusBadRequest, fakebank.OBResourceInvalidFormat},
		{"unknown field", request{raw: []byte(`{"Data":{"Initiation":{}},"Risk":{},"Colour":"blue"}`)}, http.StatusBadRequest, fakebank.OBFieldUnexpected},
		{"wrong type", request{raw: []byte(`{"Data":{"Initiation":{"InstructedAmount":{"Amount":12.5}}},"Risk":{}}`)}, http.StatusBadRequest, fakebank.OBFieldInvalid},
		{"no Risk", request{body: obj{"Data": good["Data"]}}, http.StatusBadRequest, fakebank.OBFieldMissing},
		{"no EndToEndIdentification", request{body: func() obj {
			b := consentBody("x", "1.00")
			delete(b["Data"].(obj)["Initiation"].(obj), "EndToEndIdentification")
			return b
		}()}, http.StatusBadRequest, fakebank.OBFieldMissing},
		{"36-character EndToEndIdentification", request{body: consentBody(strings.Repeat("r", 36), "1.00")}, http.StatusBadRequest, fakebank.OBFieldInvalid},
		{"another scheme", request{body: func() obj {
			b := consentBody("x", "1.00")
			b["Data"].(obj)["Initiation"].(obj)["CreditorAccount"].(obj)["SchemeName"] = "UK.OBIE.PAN"
			return b
		}()}, http.StatusBadRequest, fakebank.OBUnsupportedScheme},
		{"a short sort code account", request{body: func() obj {
			b := consentBody("x", "1.00")
			b["Data"].(obj)["Initiation"].(obj)["CreditorAccount"].(obj)["Identification"] = "0808002132569"
			return b
		}()}, http.StatusBadRequest, fakebank.OBFieldInvalid},
		{"text/plain", request{header: map[string]string{"Content-Type": "text/plain"}}, http.StatusUnsupportedMediaType, ""},
		{"Accept text/html", request{header: map[string]string{"Accept": "text/html"}}, http.StatusNotAcceptable, ""},
	} {
		rq := tc.rq
		rq.method, rq.path = http.MethodPost, "/domestic-payment-consents"
		switch rq.key {
		case "":
			rq.key = "key-" + strings.ReplaceAll(tc.name, " ", "-")
		case "-":
			rq.key = ""
		}
		if rq.body == nil && rq.raw == nil {
			rq.body = good
		}
		a := ob.do(t, c, rq)
		if a.status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, a.status, a.body, tc.status)
			continue
		}
		if tc.code != "" && a.errorCode(t) != tc.code {
			t.Errorf("%s: %s, want %s", tc.name, a.body, tc.code)
		}
	}
	if a := ob.do(t, c, request{method: http.MethodGet, path: "/domestic-payments/pay_000000000001", noAuth: true}); a.status != http.StatusUnauthorized || len(a.body) != 0 {
		t.Errorf("GET without a token: %d %q", a.status, a.body)
	}
	if cs := ob.bank.ConsentStats(); cs.Consents != 0 {
		t.Errorf("consent stats %+v: a refused request created a consent", cs)
	}
	// Nothing was kept under the keys of refused requests.
	if a := ob.postConsent(t, "key-unknown-field", good); a.status != http.StatusCreated {
		t.Errorf("the key of a refused request: %d %s", a.status, a.body)
	}
}
