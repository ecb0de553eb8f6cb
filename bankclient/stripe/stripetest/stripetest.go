// Package stripetest holds test support for the Stripe connector:
// Stripe's OpenAPI document (../shared/specs beside the repository),
// loaded once per test binary, and an http.RoundTripper that validates
// every request and response passing through it against the document.
//
// It is test support: nothing in settle's binaries may import it.
package stripetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/settle/settle/internal/testsupport/settletest"
)

// The Stripe OpenAPI document (../shared/specs beside the repository):
// the other party's word on every request the connector sends and every
// response the fakebank's stripe profile gives.
const specFile = "stripe-openapi-spec3.yaml"

var spec struct {
	once sync.Once
	doc  *openapi3.T
	err  error
	path string
}

// Spec loads the document once per test binary. Missing, it skips
// the test, or fails it under CI=true.
func Spec(t *testing.T) *openapi3.T {
	t.Helper()
	spec.once.Do(func() {
		path, err := settletest.SpecPath(specFile)
		if err != nil {
			spec.err = err
			return
		}
		spec.path = path
		if _, err := os.Stat(spec.path); err != nil {
			spec.err = err
			return
		}
		loader := openapi3.NewLoader()
		spec.doc, spec.err = loader.LoadFromFile(spec.path)
		if spec.err == nil {
			formArrays(spec.doc)
		}
	})
	if spec.err != nil {
		if os.IsNotExist(spec.err) && os.Getenv("CI") != "true" {
			t.Skipf("Stripe's OpenAPI document is not at %s: %v", spec.path, spec.err)
		}
		t.Fatalf("loading Stripe's OpenAPI document %s: %v", spec.path, spec.err)
	}
	return spec.doc
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

// Route finds the operation of the document serving r: the payout
// endpoints the connector uses.
func Route(doc *openapi3.T, r *http.Request) (*routers.Route, map[string]string, error) {
	path, params := r.URL.Path, map[string]string{}
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/payouts/"); ok && !strings.Contains(id, "/") {
		path, params["payout"] = "/v1/payouts/{payout}", id
	}
	item := doc.Paths.Value(path)
	if item == nil {
		return nil, nil, fmt.Errorf("%s %s is no path of Stripe's API", r.Method, r.URL.Path)
	}
	op := item.GetOperation(r.Method)
	if op == nil {
		return nil, nil, fmt.Errorf("%s %s is no operation of Stripe's API", r.Method, r.URL.Path)
	}
	return &routers.Route{Spec: doc, Path: path, PathItem: item, Method: r.Method, Operation: op}, params, nil
}

// Validator checks every request and response that passes through it
// against the document; what violates it fails the test.
type Validator struct {
	doc  *openapi3.T
	next http.RoundTripper

	mu   sync.Mutex
	errs []string
	n    int
}

func (v *Validator) fail(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, fmt.Sprintf(format, args...))
}

func (v *Validator) RoundTrip(r *http.Request) (*http.Response, error) {
	return settletest.RoundTripBodies(v.next, r, func(r *http.Request, body []byte) func(*http.Response, []byte) {
		rt, params, err := Route(v.doc, r)
		if err != nil {
			v.fail("request: %v", err)
			return nil
		}
		in := &openapi3filter.RequestValidationInput{
			Request: r.Clone(context.Background()), PathParams: params, Route: rt,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
		}
		in.Request.Body = io.NopCloser(bytes.NewReader(body))
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			v.fail("request %s %s %s: %v", r.Method, r.URL.RequestURI(), body, err)
		}
		v.mu.Lock()
		v.n++
		v.mu.Unlock()
		return func(resp *http.Response, data []byte) {
			out := &openapi3filter.ResponseValidationInput{
				RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
				Body:    io.NopCloser(bytes.NewReader(data)),
				Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
			}
			if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
				v.fail("response %d to %s %s: %s: %v", resp.StatusCode, r.Method, r.URL.RequestURI(), data, err)
			}
		}
	})
}

// NewValidator returns a Validator that fails t, when it ends, on every
// violation seen, and on no request having been checked. Use it as the
// Transport of the connector's HTTP client.
func NewValidator(t *testing.T) *Validator {
	t.Helper()
	v := &Validator{doc: Spec(t), next: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, e := range v.errs {
			t.Errorf("against Stripe's OpenAPI document: %s", e)
		}
		if v.n == 0 {
			t.Error("no request went through the validator")
		}
	})
	return v
}
