// Package openapitest checks HTTP exchanges against the OpenAPI document
// of the other party (Stripe's, Open Banking's): it loads the document
// once per test binary from ../shared/specs beside the repository, finds
// the operation a request is for, and validates requests and responses
// with kin-openapi, as an http.RoundTripper that fails the test on every
// violation. bankclient/stripe/stripetest and fakebank/obietest each
// describe their document with a Document.
//
// It is test support: nothing in settle's binaries may import it.
package openapitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/settle/settle/internal/testsupport/settletest"
)

// Document is one OpenAPI document in ../shared/specs and what a test
// needs to know to validate against it. Declare it as a package variable:
// it loads its file once.
type Document struct {
	// File is the document's file name in ../shared/specs; Name says
	// whose it is in failures ("Stripe's OpenAPI document").
	File, Name string
	// Base is the base path of the document's servers ("" for none).
	// Templates are its paths that end in one parameter.
	Base      string
	Templates []Template
	// Prepare, when set, adjusts the loaded document to what kin-openapi
	// can validate.
	Prepare func(*openapi3.T)
	// Authenticate checks a request's security scheme (nil: anything
	// passes). RegexCompiler compiles the document's patterns (nil:
	// kin-openapi's own).
	Authenticate  openapi3filter.AuthenticationFunc
	RegexCompiler openapi3.RegexCompilerFunc
	// Unvalidated, when set, picks the requests a Validator passes on
	// unchecked: those to servers the document does not describe.
	Unvalidated func(*http.Request) bool

	once sync.Once
	doc  *openapi3.T
	err  error
	path string
}

// Template is a path of a document ending in one parameter: a request
// for Prefix+id (id not empty, without a slash) is for the path
// Prefix+"{Param}", with Param id.
type Template struct {
	Prefix, Param string
}

// Load returns the document, loaded once per test binary. A missing or
// unreadable document fails t: it is the other party's word, and a test
// that cannot read it proves nothing.
func (d *Document) Load(t testing.TB) *openapi3.T {
	t.Helper()
	d.once.Do(func() {
		if d.path, d.err = settletest.SpecPath(d.File); d.err != nil {
			return
		}
		d.doc, d.err = openapi3.NewLoader().LoadFromFile(d.path)
		if d.err == nil && d.Prepare != nil {
			d.Prepare(d.doc)
		}
	})
	if d.err != nil {
		t.Fatalf("loading %s %s (it must be there, beside the repository): %v", d.Name, d.path, d.err)
	}
	return d.doc
}

// Route finds the operation of doc (d's, loaded) that serves r.
func (d *Document) Route(doc *openapi3.T, r *http.Request) (*routers.Route, map[string]string, error) {
	rest, ok := strings.CutPrefix(r.URL.Path, d.Base)
	if !ok {
		return nil, nil, fmt.Errorf("%s %s is not under the server %s of %s", r.Method, r.URL.Path, d.Base, d.Name)
	}
	path, params := rest, map[string]string{}
	for _, p := range d.Templates {
		if id, ok := strings.CutPrefix(rest, p.Prefix); ok && id != "" && !strings.Contains(id, "/") {
			path, params[p.Param] = p.Prefix+"{"+p.Param+"}", id
		}
	}
	item := doc.Paths.Value(path)
	if item == nil {
		return nil, nil, fmt.Errorf("%s %s is no path of %s", r.Method, r.URL.Path, d.Name)
	}
	op := item.GetOperation(r.Method)
	if op == nil {
		return nil, nil, fmt.Errorf("%s %s is no operation of %s", r.Method, r.URL.Path, d.Name)
	}
	return &routers.Route{Spec: doc, Path: path, PathItem: item, Method: r.Method, Operation: op}, params, nil
}

// ValidateRequest checks r with its body against doc (d's, loaded) and
// returns the input its response is validated with (nil when r is no
// operation of the document).
func (d *Document) ValidateRequest(doc *openapi3.T, r *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	rt, params, err := d.Route(doc, r)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	auth := d.Authenticate
	if auth == nil {
		auth = openapi3filter.NoopAuthenticationFunc
	}
	in := &openapi3filter.RequestValidationInput{
		Request: r.Clone(context.Background()), PathParams: params, Route: rt,
		Options: &openapi3filter.Options{AuthenticationFunc: auth, MultiError: true, RegexCompiler: d.RegexCompiler},
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
func (d *Document) ValidateResponse(in *openapi3filter.RequestValidationInput, status int, header http.Header, body []byte) error {
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, RegexCompiler: d.RegexCompiler},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("response %d to %s %s: %s: %w", status, in.Request.Method, in.Request.URL.RequestURI(), body, err)
	}
	return nil
}

// Validator checks every request and response that passes through it
// against its document; what violates it fails the test.
type Validator struct {
	d    *Document
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

// NewValidator returns a Validator of d's over next (nil: a clone of
// http.DefaultTransport) that fails t, when it ends, on every violation
// seen, and on no request having been checked. Use it as the Transport
// of the HTTP client that speaks to the bank.
func (d *Document) NewValidator(t testing.TB, next http.RoundTripper) *Validator {
	t.Helper()
	if next == nil {
		next = http.DefaultTransport.(*http.Transport).Clone()
	}
	v := &Validator{d: d, doc: d.Load(t), next: next}
	t.Cleanup(func() {
		for _, e := range v.Errors() {
			t.Errorf("against %s: %s", d.Name, e)
		}
		if v.Checked() == 0 {
			t.Error("no request went through the validator")
		}
	})
	return v
}

func (v *Validator) fail(err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, err.Error())
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

// ValidateRequest checks r with its body against the document and returns
// the input its response is validated with.
func (v *Validator) ValidateRequest(r *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	return v.d.ValidateRequest(v.doc, r, body)
}

// RoundTrip validates r, sends it with the next transport and validates
// the answer; the document's Unvalidated requests pass unchecked.
func (v *Validator) RoundTrip(r *http.Request) (*http.Response, error) {
	if v.d.Unvalidated != nil && v.d.Unvalidated(r) {
		return v.next.RoundTrip(r)
	}
	return settletest.RoundTripBodies(v.next, r, func(r *http.Request, body []byte) func(*http.Response, []byte) {
		in, err := v.ValidateRequest(r, body)
		if err != nil && !v.InvalidRequests {
			v.fail(err)
		}
		v.mu.Lock()
		v.n++
		v.mu.Unlock()
		if in == nil {
			return nil
		}
		return func(resp *http.Response, data []byte) {
			if err := v.d.ValidateResponse(in, resp.StatusCode, resp.Header, data); err != nil {
				v.fail(err)
			}
		}
	})
}
