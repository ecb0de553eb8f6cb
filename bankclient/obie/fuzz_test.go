package obie

import (
	"net/http"
	"testing"
	"time"

	"github.com/settle/settle/bankclient/obie/obwire"
)

// FuzzAnswers: whatever the bank answers, parsing and classifying it
// never panics, and a payment read from it has an id, a positive amount
// and a status of the contract.
func FuzzAnswers(f *testing.F) {
	for _, s := range []string{
		`{"Data":{"DomesticPaymentId":"p","ConsentId":"c","Status":"Pending","Initiation":{"EndToEndIdentification":"r","InstructedAmount":{"Amount":"1.00","Currency":"GBP"},"CreditorAccount":{"SchemeName":"UK.OBIE.IBAN","Identification":"x","Name":"n"}}}}`,
		`{"Data":{"ConsentId":"c","Status":"Authorised","CreationDateTime":"2026-01-01T00:00:00Z","Initiation":{"InstructedAmount":{"Amount":"0.001","Currency":"KWD"}}}}`,
		`{"Code":"400","Message":"m","Errors":[{"ErrorCode":"UK.OBIE.Field.Invalid","Message":"m","Path":"x-idempotency-key"}]}`,
		`{"Data":null}`, `[]`, `{"Data":{"Initiation":{}}}`, `{{{{`, ``, `{"a":1,"a":2}`,
	} {
		f.Add(s, 201)
		f.Add(s, 400)
	}
	in := Initiation{EndToEndIdentification: "r", InstructedAmount: obwire.Amount{Amount: "1.00", Currency: "GBP"}, CreditorAccount: obwire.Account{SchemeName: obSchemeIBAN, Identification: "x"}}
	f.Fuzz(func(t *testing.T, body string, status int) {
		a := httpAnswer{status: status, header: http.Header{}, body: []byte(body)}
		for _, want := range []*Initiation{nil, &in} {
			if p, err := parsePayment(a.body, "c", want); err == nil && (p.ID == "" || p.AmountCents <= 0 || !p.Status.Valid()) {
				t.Errorf("parsePayment(%q) = %+v", body, p)
			}
			if c, err := parseConsent(a.body, want); err == nil && (c.ID == "" || c.Status == "") {
				t.Errorf("parseConsent(%q) = %+v", body, c)
			}
		}
		for _, ans := range []answer{classifyPost(a), classifyGet(a), classifyOther(a)} {
			if ans.err == nil || ans.outcome == "" {
				t.Errorf("status %d %q classified as %+v", status, body, ans)
			}
		}
		_ = createdBefore(a.body, time.Now())
	})
}
