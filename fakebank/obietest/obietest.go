// Package obietest holds test support for UK Open Banking (the fakebank's
// obie profile and the connector that speaks to it): the OpenAPI document
// of Payment Initiation v3.1.11 (../shared/specs beside the repository)
// as an openapitest.Document, whose Validator checks every request and
// response passing through it against the document, and throwaway keys
// and certificates for message signing and mutual TLS.
//
// It is test support: nothing in settle's binaries may import it.
package obietest

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/settle/settle/internal/testsupport/openapitest"
)

// SpecFile is the document, in ../shared/specs beside the repository.
const SpecFile = "obie-payment-initiation-3.1.11.yaml"

// BasePath is the base path of the document's servers.
const BasePath = "/open-banking/v3.1/pisp"

// document is the Payment Initiation document, on the domestic payment
// endpoints. The authorisation server's requests (/authorize, /token:
// OAuth 2.0, RFC 6749, which the document does not describe) pass a
// Validator unvalidated.
var document = &openapitest.Document{
	File: SpecFile,
	Name: "Open Banking's OpenAPI document",
	Base: BasePath,
	Templates: []openapitest.Template{
		{Prefix: "/domestic-payment-consents/", Param: "ConsentId"},
		{Prefix: "/domestic-payments/", Param: "DomesticPaymentId"},
	},
	Prepare:       goPatterns,
	Authenticate:  requireBearer,
	RegexCompiler: RegexCompiler,
	Unvalidated:   func(r *http.Request) bool { return r.URL.Path == "/token" || r.URL.Path == "/authorize" },
}

// Spec loads the document once per test binary. A missing document fails
// the test: it is the other party's word, and a test that cannot read it
// proves nothing.
func Spec(t testing.TB) *openapi3.T {
	t.Helper()
	return document.Load(t)
}

// lookAhead is the one pattern of the document Go's regexp cannot compile
// (x-idempotency-key's: no white space at either end), and goLookAhead
// its equivalent.
const (
	lookAhead   = `^(?!\s)(.*)(\S)$`
	goLookAhead = `^\S(.*\S)?$`
)

// RegexCompiler compiles the document's patterns with Go's regexp, the
// look-ahead rewritten into its equivalent.
func RegexCompiler(expr string) (openapi3.RegexMatcher, error) {
	if expr == lookAhead {
		expr = goLookAhead
	}
	return regexp.Compile(expr)
}

// goPatterns rewrites the look-ahead of the document's parameters, which
// kin-openapi validates without Options.RegexCompiler.
func goPatterns(doc *openapi3.T) {
	for _, p := range doc.Components.Parameters {
		if p.Value != nil && p.Value.Schema != nil && p.Value.Schema.Value != nil && p.Value.Schema.Value.Pattern == lookAhead {
			p.Value.Schema.Value.Pattern = goLookAhead
		}
	}
}

// Route finds the operation of the document serving r: the domestic
// payment endpoints, under BasePath.
func Route(doc *openapi3.T, r *http.Request) (*routers.Route, map[string]string, error) {
	return document.Route(doc, r)
}

// requireBearer is the document's security (OAuth 2 client credentials or
// authorization code): a request must carry a bearer token.
func requireBearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	h := in.RequestValidationInput.Request.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(h, "Bearer "); !ok || strings.TrimSpace(tok) == "" {
		return fmt.Errorf("security scheme %s: no bearer token in Authorization", in.SecuritySchemeName)
	}
	return nil
}

// Validator checks every request and response that passes through it
// against the document (required headers included).
type Validator = openapitest.Validator

// ValidateRequest checks r with its body against doc and returns the
// input its response is validated with (nil when r is no operation of
// the document).
func ValidateRequest(doc *openapi3.T, r *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	return document.ValidateRequest(doc, r, body)
}

// ValidateResponse checks an answer to the request of in against the
// document: a status it declares for the operation, its required headers
// and its body.
func ValidateResponse(in *openapi3filter.RequestValidationInput, status int, header http.Header, body []byte) error {
	return document.ValidateResponse(in, status, header, body)
}

// NewValidator returns a Validator over next (default: a clone of
// http.DefaultTransport) that fails t, when it ends, on every violation
// seen, and on no request having been checked. Use it as the Transport of
// the HTTP client that speaks to the bank.
func NewValidator(t testing.TB, next http.RoundTripper) *Validator {
	t.Helper()
	return document.NewValidator(t, next)
}
