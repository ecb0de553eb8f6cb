// Package obietest holds test support for the Open Banking connector: the
// Payment Initiation OpenAPI document v3.1.11 (../shared/specs beside the
// repository), loaded once per test binary, and an http.RoundTripper that
// validates every request passing through it (and, if asked, every
// response) against the document, headers included.
//
// It is test support: nothing in settle's binaries may import it.
package obietest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// SpecFile is the document, in ../shared/specs beside the repository: the
// other party's word on every request the connector sends.
const SpecFile = "obie-payment-initiation-3.1.11.yaml"

// ServerPath is the document's server: where the resources live.
const ServerPath = "/open-banking/v3.1/pisp"

var spec struct {
	once sync.Once
	doc  *openapi3.T
	err  error
	path string
}

// Spec loads the document once per test binary. Missing, it skips the
// test, or fails it under CI=true.
func Spec(t testing.TB) *openapi3.T {
	t.Helper()
	spec.once.Do(func() {
		root, err := repoRoot()
		if err != nil {
			spec.err = err
			return
		}
		spec.path = filepath.Join(root, "..", "shared", "specs", SpecFile)
		if _, err := os.Stat(spec.path); err != nil {
			spec.err = err
			return
		}
		spec.doc, spec.err = openapi3.NewLoader().LoadFromFile(spec.path)
	})
	if spec.err != nil {
		if os.IsNotExist(spec.err) && os.Getenv("CI") != "true" {
			t.Skipf("the Open Banking OpenAPI document is not at %s: %v", spec.path, spec.err)
		}
		t.Fatalf("loading the Open Banking OpenAPI document %s: %v", spec.path, spec.err)
	}
	return spec.doc
}

// repoRoot is the directory of go.mod above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}

// lookaheads translates the document's patterns that Go's regexp cannot
// compile (it has no lookahead) into equivalent ones it can. The one in
// the document is x-idempotency-key's, ^(?!\s)(.*)(\S)$: a first
// character that is not a space, any characters but a newline, a last one
// that is not a space; that is one non-space character, or a non-space,
// anything, and a non-space.
var lookaheads = map[string]string{
	`^(?!\s)(.*)(\S)$`: `^(?:\S|\S.*\S)$`,
}

// RegexCompiler compiles the document's patterns, translating those in
// lookaheads; any other pattern Go cannot compile is an error, so nothing
// escapes validation unnoticed.
func RegexCompiler(expr string) (openapi3.RegexMatcher, error) {
	if re, err := regexp.Compile(expr); err == nil {
		return re, nil
	}
	if tr, ok := lookaheads[expr]; ok {
		return regexp.Compile(tr)
	}
	return nil, fmt.Errorf("pattern %q has no Go equivalent here", expr)
}

// FilterOptions are the validation options of the document: every
// pattern, in bodies and in parameters, compiled by RegexCompiler; no
// authentication check (the token is the bank's business).
func FilterOptions() *openapi3filter.Options {
	return &openapi3filter.Options{
		AuthenticationFunc:      openapi3filter.NoopAuthenticationFunc,
		MultiError:              true,
		IncludeResponseStatus:   true,
		RegexCompiler:           RegexCompiler,
		SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.SetSchemaRegexCompiler(RegexCompiler)},
	}
}

// Route finds the operation of the document serving r, whose path is the
// server path (ServerPath, after any prefix) and a path of the document.
func Route(doc *openapi3.T, r *http.Request) (*routers.Route, map[string]string, error) {
	i := strings.Index(r.URL.Path, ServerPath)
	if i < 0 {
		return nil, nil, fmt.Errorf("%s %s is not under the server path %s", r.Method, r.URL.Path, ServerPath)
	}
	rest := r.URL.Path[i+len(ServerPath):]
	for _, tmpl := range doc.Paths.InMatchingOrder() {
		params, ok := match(tmpl, rest)
		if !ok {
			continue
		}
		item := doc.Paths.Value(tmpl)
		op := item.GetOperation(r.Method)
		if op == nil {
			return nil, nil, fmt.Errorf("%s %s is no operation of the document", r.Method, tmpl)
		}
		return &routers.Route{Spec: doc, Path: tmpl, PathItem: item, Method: r.Method, Operation: op}, params, nil
	}
	return nil, nil, fmt.Errorf("%s %s is no path of the document", r.Method, rest)
}

// match matches path against a template of the document.
func match(tmpl, path string) (map[string]string, bool) {
	ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(ts) != len(ps) {
		return nil, false
	}
	params := map[string]string{}
	for i, t := range ts {
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
			if ps[i] == "" {
				return nil, false
			}
			params[t[1:len(t)-1]] = ps[i]
			continue
		}
		if t != ps[i] {
			return nil, false
		}
	}
	return params, true
}

// Validator checks every request that passes through it, and when
// Responses is set every response, against the document; what violates
// it fails the test.
type Validator struct {
	// Responses: validate the answers too.
	Responses bool

	doc  *openapi3.T
	next http.RoundTripper

	mu   sync.Mutex
	errs []string
	seen map[string]int
}

func (v *Validator) fail(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, fmt.Sprintf(format, args...))
}

// Seen returns how many requests of each operation (its operationId) went
// through the validator.
func (v *Validator) Seen() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int, len(v.seen))
	for k, n := range v.seen {
		out[k] = n
	}
	return out
}

// RoundTrip implements http.RoundTripper.
func (v *Validator) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		_ = r.Body.Close()
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	rt, params, err := Route(v.doc, r)
	if err != nil {
		v.fail("request: %v", err)
		return v.next.RoundTrip(r)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: r.Clone(context.Background()), PathParams: params, Route: rt,
		Options: FilterOptions(),
	}
	in.Request.Body = io.NopCloser(bytes.NewReader(body))
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		v.fail("request %s %s %s: %v", r.Method, r.URL.RequestURI(), body, err)
	}
	v.mu.Lock()
	v.seen[rt.Operation.OperationID]++
	v.mu.Unlock()
	resp, err := v.next.RoundTrip(r)
	if err != nil || !v.Responses {
		return resp, err
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body:    io.NopCloser(bytes.NewReader(data)),
		Options: FilterOptions(),
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		v.fail("response %d to %s %s: %s: %v", resp.StatusCode, r.Method, r.URL.RequestURI(), data, err)
	}
	return resp, nil
}

// NewValidator returns a Validator in front of next (nil: a clone of
// http.DefaultTransport) that fails t, when it ends, on every violation
// seen, and on no request having been checked. Use it as the Transport of
// the connector's HTTP client.
func NewValidator(t testing.TB, next http.RoundTripper) *Validator {
	t.Helper()
	if next == nil {
		next = http.DefaultTransport.(*http.Transport).Clone()
	}
	v := &Validator{doc: Spec(t), next: next, seen: map[string]int{}}
	t.Cleanup(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, e := range v.errs {
			t.Errorf("against the Open Banking OpenAPI document: %s", e)
		}
		if len(v.seen) == 0 {
			t.Error("no request went through the validator")
		}
	})
	return v
}
