// Package obietest holds test support for UK Open Banking (the fakebank's
// obie profile and the connector that speaks to it): the OpenAPI document
// of Payment Initiation v3.1.11 (../shared/specs beside the repository),
// loaded once per test binary, an http.RoundTripper that validates every
// request and response passing through it against the document, and
// throwaway keys and certificates for message signing and mutual TLS.
//
// It is test support: nothing in settle's binaries may import it.
package obietest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/settle/settle/internal/testsupport/settletest"
)

// SpecFile is the document, in ../shared/specs beside the repository.
const SpecFile = "obie-payment-initiation-3.1.11.yaml"

// BasePath is the base path of the document's servers.
const BasePath = "/open-banking/v3.1/pisp"

var spec struct {
	once sync.Once
	doc  *openapi3.T
	err  error
	path string
}

// Spec loads the document once per test binary. A missing document fails
// the test: it is the other party's word, and a test that cannot read it
// proves nothing.
func Spec(t testing.TB) *openapi3.T {
	t.Helper()
	spec.once.Do(func() {
		path, err := settletest.SpecPath(SpecFile)
		if err != nil {
			spec.err = err
			return
		}
		spec.path = path
		spec.doc, spec.err = openapi3.NewLoader().LoadFromFile(spec.path)
		if spec.err == nil {
			goPatterns(spec.doc)
		}
	})
	if spec.err != nil {
		t.Fatalf("loading Open Banking's OpenAPI document %s (it must be there, beside the repository): %v", spec.path, spec.err)
	}
	return spec.doc
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
	rest, ok := strings.CutPrefix(r.URL.Path, BasePath)
	if !ok {
		return nil, nil, fmt.Errorf("%s %s is not under the document's server %s", r.Method, r.URL.Path, BasePath)
	}
	path, params := rest, map[string]string{}
	for _, p := range []struct{ prefix, param string }{
		{"/domestic-payment-consents/", "ConsentId"},
		{"/domestic-payments/", "DomesticPaymentId"},
	} {
		if id, ok := strings.CutPrefix(rest, p.prefix); ok && id != "" && !strings.Contains(id, "/") {
			path, params[p.param] = p.prefix+"{"+p.param+"}", id
		}
	}
	item := doc.Paths.Value(path)
	if item == nil {
		return nil, nil, fmt.Errorf("%s %s is no path of the document", r.Method, r.URL.Path)
	}
	op := item.GetOperation(r.Method)
	if op == nil {
		return nil, nil, fmt.Errorf("%s %s is no operation of the document", r.Method, r.URL.Path)
	}
	return &routers.Route{Spec: doc, Path: path, PathItem: item, Method: r.Method, Operation: op}, params, nil
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
// against the document (required headers included); what violates it
// fails the test.
type Validator struct {
	doc  *openapi3.T
	next http.RoundTripper

	// InvalidRequests, when set, expects the requests to break the
	// document (a test of the bank's refusals): their violations are not
	// failures, and their answers are still validated.
	InvalidRequests bool

	mu   sync.Mutex
	errs []string
	n    int
}

func (v *Validator) fail(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, fmt.Sprintf(format, args...))
}

// Checked returns how many exchanges passed through the validator.
func (v *Validator) Checked() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n
}

// Errors returns the violations seen so far.
func (v *Validator) Errors() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

// RoundTrip validates r, sends it with the next transport and validates
// the answer.
// The authorisation server's requests (/authorize, /token: OAuth 2.0,
// RFC 6749, which the document does not describe) pass unvalidated.
func (v *Validator) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/token" || r.URL.Path == "/authorize" {
		return v.next.RoundTrip(r)
	}
	return settletest.RoundTripBodies(v.next, r, func(r *http.Request, body []byte) func(*http.Response, []byte) {
		in, err := v.ValidateRequest(r, body)
		if err != nil && !v.InvalidRequests {
			v.fail("%v", err)
		}
		v.mu.Lock()
		v.n++
		v.mu.Unlock()
		if in == nil {
			return nil
		}
		return func(resp *http.Response, data []byte) {
			if err := ValidateResponse(in, resp.StatusCode, resp.Header, data); err != nil {
				v.fail("%v", err)
			}
		}
	})
}

// ValidateRequest checks r with its body against the document and returns
// the input its response is validated with.
func (v *Validator) ValidateRequest(r *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	return ValidateRequest(v.doc, r, body)
}

// ValidateRequest checks r with its body against doc and returns the
// input its response is validated with (nil when r is no operation of
// the document).
func ValidateRequest(doc *openapi3.T, r *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	rt, params, err := Route(doc, r)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: r.Clone(context.Background()), PathParams: params, Route: rt,
		Options: &openapi3filter.Options{AuthenticationFunc: requireBearer, MultiError: true, RegexCompiler: RegexCompiler},
	}
	in.Request.Body = io.NopCloser(bytes.NewReader(body))
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		return in, fmt.Errorf("request %s %s %s: %w", r.Method, r.URL.RequestURI(), body, err)
	}
	return in, nil
}

// ValidateResponse checks an answer to the request of in against the
// document: a status it declares for the operation, its required headers
// and its body.
func ValidateResponse(in *openapi3filter.RequestValidationInput, status int, header http.Header, body []byte) error {
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, RegexCompiler: RegexCompiler},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("response %d to %s %s: %s: %w", status, in.Request.Method, in.Request.URL.RequestURI(), body, err)
	}
	return nil
}

// NewValidator returns a Validator over next (default: a clone of
// http.DefaultTransport) that fails t, when it ends, on every violation
// seen, and on no request having been checked. Use it as the Transport of
// the HTTP client that speaks to the bank.
func NewValidator(t testing.TB, next http.RoundTripper) *Validator {
	t.Helper()
	if next == nil {
		next = http.DefaultTransport.(*http.Transport).Clone()
	}
	v := &Validator{doc: Spec(t), next: next}
	t.Cleanup(func() {
		for _, e := range v.Errors() {
			t.Errorf("against Open Banking's OpenAPI document: %s", e)
		}
		if v.Checked() == 0 {
			t.Error("no request went through the validator")
		}
	})
	return v
}
