// Package stripetest holds test support for the Stripe connector:
// Stripe's OpenAPI document (../shared/specs beside the repository) as an
// openapitest.Document, whose Validator checks every request and response
// passing through it against the document.
//
// It is test support: nothing in settle's binaries may import it.
package stripetest

import (
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"

	"github.com/settle/settle/internal/testsupport/openapitest"
)

// document is Stripe's OpenAPI document (stripe-openapi-spec3.yaml in
// ../shared/specs): the other party's word on every request the connector
// sends and every response the fakebank's stripe profile gives, on the
// payout endpoints the connector uses.
var document = &openapitest.Document{
	File:      "stripe-openapi-spec3.yaml",
	Name:      "Stripe's OpenAPI document",
	Templates: []openapitest.Template{{Prefix: "/v1/payouts/", Param: "payout"}},
	Prepare:   formArrays,
}

// Spec loads the document once per test binary; missing, it fails t.
func Spec(t testing.TB) *openapi3.T {
	t.Helper()
	return document.Load(t)
}

// formArrays reads the array query parameters Stripe declares as
// deepObject (expand, for one: Stripe sends expand[]=a&expand[]=b) as
// form arrays: kin-openapi cannot decode a deepObject array and refuses
// every request of such an operation, sent or not. The connector sends
// none of them, so nothing it sends escapes validation.
func formArrays(doc *openapi3.T) {
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, p := range op.Parameters {
				if p.Value != nil && p.Value.In == openapi3.ParameterInQuery && p.Value.Style == openapi3.SerializationDeepObject &&
					p.Value.Schema != nil && p.Value.Schema.Value != nil && p.Value.Schema.Value.Type.Is(openapi3.TypeArray) {
					p.Value.Style = openapi3.SerializationForm
				}
			}
		}
	}
}

// Route finds the operation of the document serving r.
func Route(doc *openapi3.T, r *http.Request) (*routers.Route, map[string]string, error) {
	return document.Route(doc, r)
}

// NewValidator returns a Validator that fails t, when it ends, on every
// violation seen, and on no request having been checked. Use it as the
// Transport of the connector's HTTP client.
func NewValidator(t testing.TB) *openapitest.Validator {
	t.Helper()
	return document.NewValidator(t, nil)
}
