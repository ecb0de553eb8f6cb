package stripe_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/connectortest"
	"github.com/settle/settle/bankclient/stripe"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/fakebanktest"
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

// stripeSpec loads the document once per test binary. Missing, it skips
// the test, or fails it under CI=true.
func stripeSpec(t *testing.T) *openapi3.T {
	t.Helper()
	spec.once.Do(func() {
		root, err := repoRoot()
		if err != nil {
			spec.err = err
			return
		}
		spec.path = filepath.Join(root, "..", "shared", "specs", specFile)
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

// route finds the operation of the document serving r: the payout
// endpoints the connector uses.
func route(doc *openapi3.T, r *http.Request) (*routers.Route, map[string]string, error) {
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

// validator checks every request and response that passes through it
// against the document; what violates it is collected in errs.
type validator struct {
	doc  *openapi3.T
	next http.RoundTripper

	mu   sync.Mutex
	errs []string
	n    int
}

func (v *validator) fail(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, fmt.Sprintf(format, args...))
}

func (v *validator) RoundTrip(r *http.Request) (*http.Response, error) {
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
	rt, params, err := route(v.doc, r)
	if err != nil {
		v.fail("request: %v", err)
		return v.next.RoundTrip(r)
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
	resp, err := v.next.RoundTrip(r)
	if err != nil {
		return nil, err
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
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		v.fail("response %d to %s %s: %s: %v", resp.StatusCode, r.Method, r.URL.RequestURI(), data, err)
	}
	return resp, nil
}

// newValidator returns a validator that fails t, when it ends, on every
// violation seen, and on none having been checked.
func newValidator(t *testing.T) *validator {
	t.Helper()
	v := &validator{doc: stripeSpec(t), next: http.DefaultTransport.(*http.Transport).Clone()}
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

// TestConformanceAgainstStripesSpec runs the conformance suite with every
// request the connector sends and every response the stripe profile gives
// validated against Stripe's OpenAPI document.
func TestConformanceAgainstStripesSpec(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	tg := target
	tg.Options.HTTPClient = &http.Client{Transport: v}
	connectortest.Run(t, tg)
}

// TestListPagesAgainstStripesSpec pages through the payout list, and asks
// for a payout Stripe does not hold, through the validator.
func TestListPagesAgainstStripesSpec(t *testing.T) {
	t.Parallel()
	v := newValidator(t)
	bank, u := fakebanktest.NewServer(t, fakebank.Options{Seed: 1, Faults: bankclient.Faults{SettleDelayMS: 1}, Profile: "stripe"})
	c, err := stripe.New(u, bankclient.Options{Token: "sk_test_x", Account: "acct_1Test", HTTPClient: &http.Client{Transport: v}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 5 {
		ref := fmt.Sprintf("list-%d", i)
		if _, err := c.Send(ctx, bankclient.KeyFor(ref), target.Request(ref)); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	for p, err := range bankclient.Payments(ctx, c, 2) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, p.Reference)
	}
	if got := strings.Join(seen, ","); got != "list-4,list-3,list-2,list-1,list-0" {
		t.Errorf("the list, two a page: %s; want every payout once, newest first", got)
	}
	if _, err := c.StatusByID(ctx, "pay_000000000099"); err == nil {
		t.Error("an unknown payout was found")
	}
	if st := bank.Stats(); st.Payments != 5 {
		t.Errorf("bank %+v", st)
	}
}

// TestValidatorRefusesWhatStripeWould: a request outside the document
// (a string amount, an unknown parameter's shape) is caught, so a
// connector that sent one would fail the tests above.
func TestValidatorRefusesWhatStripeWould(t *testing.T) {
	t.Parallel()
	doc := stripeSpec(t)
	for _, body := range []string{
		"amount=ten&currency=eur",
		"currency=eur", // amount is required
	} {
		r, _ := http.NewRequest(http.MethodPost, "https://api.stripe.com/v1/payouts", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rt, params, err := route(doc, r)
		if err != nil {
			t.Fatal(err)
		}
		err = openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
			Request: r, PathParams: params, Route: rt,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		})
		if err == nil {
			t.Errorf("POST /v1/payouts %q passes validation", body)
		}
	}
	// A response in settle's own error shape, not Stripe's.
	r, _ := http.NewRequest(http.MethodGet, "https://api.stripe.com/v1/payouts?limit=10", nil)
	rt, params, err := route(doc, r)
	if err != nil {
		t.Fatal(err)
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: rt,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		t.Fatalf("a plain list request: %v", err)
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: http.StatusTooManyRequests,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   io.NopCloser(strings.NewReader(`{"error":"rate_limited","reason":"slow down"}`)),
	})
	if err == nil {
		t.Error("an error body in settle's shape passes as Stripe's")
	}
}
