package submit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/internal/settlecmd/submit"
)

// fakeAPI mimics the answers of POST /v1/settlements (DESIGN.md section 6)
// closely enough to test the client: 201 new, 200 same payload again, 409
// another payload, 422 without amount_cents. Settlement ids starting with
// "flaky" get a 503 with Retry-After on their first attempt, and ids
// starting with "drop" lose their first connection.
type fakeAPI struct {
	mu       sync.Mutex
	seen     map[string]string
	attempts map[string]int
	token    string
}

func newFakeAPI(t *testing.T, token string) (*fakeAPI, *httptest.Server) {
	t.Helper()
	f := &fakeAPI{seen: map[string]string{}, attempts: map[string]int{}, token: token}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/settlements" {
		http.NotFound(w, r)
		return
	}
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var ev map[string]any
	if err := json.Unmarshal(body, &ev); err != nil {
		problem(w, 400, `{"title":"malformed event","detail":"body is not JSON"}`)
		return
	}
	id, _ := ev["settlement_id"].(string)
	if _, ok := ev["amount_cents"]; !ok {
		problem(w, 422, `{"title":"invalid event","field":"amount_cents","detail":"missing"}`)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts[id]++
	switch {
	case strings.HasPrefix(id, "flaky") && f.attempts[id] == 1:
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case strings.HasPrefix(id, "drop") && f.attempts[id] == 1:
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		conn.Close()
		return
	}
	delete(ev, "event_id")
	canon, _ := json.Marshal(ev)
	prev, ok := f.seen[id]
	switch {
	case !ok:
		f.seen[id] = string(canon)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"state":"pending","replayed":false}`))
	case prev == string(canon):
		w.Header().Set("Idempotent-Replayed", "true")
		_, _ = w.Write([]byte(`{"state":"pending","replayed":true}`))
	default:
		problem(w, 409, `{"title":"conflict","detail":"settlement_id already received with another payload","stored_hash":"sha256:a","incoming_hash":"sha256:b"}`)
	}
}

func problem(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// input has 10 non-blank lines: 4 created, 2 replayed, 1 conflict, 3 invalid
// (not JSON, truncated JSON, missing amount), plus blank lines.
const input = `{"settlement_id":"a","account_id":"x","amount_cents":100,"currency":"EUR","beneficiary":"b"}
{"settlement_id":"flaky-1","account_id":"x","amount_cents":100,"currency":"EUR","beneficiary":"b"}

not json at all
{"settlement_id":"a","account_id":"x","amount_cents":100,"currency":"EUR","beneficiary":"b","event_id":"redelivery"}
{"settlement_id":"drop-1","account_id":"x","amount_cents":5,"currency":"EUR","beneficiary":"b"}
{"settlement_id":"c","account_id":"x","amount_cents":100,"currency":"EUR"
{"settlement_id":"d","account_id":"x","currency":"EUR","beneficiary":"b"}
{"settlement_id":"a","account_id":"x","amount_cents":999,"currency":"EUR","beneficiary":"b"}
{"settlement_id":"e","account_id":"x","amount_cents":100,"currency":"EUR","beneficiary":"b"}
   
{"settlement_id":"e","account_id":"x","amount_cents":100,"currency":"EUR","beneficiary":"b"}
`

func TestRunCountsEveryLine(t *testing.T) {
	t.Parallel()
	_, srv := newFakeAPI(t, "tok")
	var mu sync.Mutex
	seenLines := map[int]bool{}
	sum, err := submit.Run(context.Background(), strings.NewReader(input), submit.Options{
		URL: srv.URL, Token: "tok", Concurrency: 1, InitialBackoff: time.Millisecond,
		OnResult: func(r submit.Result) {
			mu.Lock()
			defer mu.Unlock()
			if seenLines[r.Line] {
				t.Errorf("line %d reported twice", r.Line)
			}
			seenLines[r.Line] = true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := submit.Summary{Lines: 10, Created: 4, Replayed: 2, Conflict: 1, Invalid: 3, Errors: 0, Retries: 2}
	got := sum
	got.Problems, got.DurationSeconds = nil, 0
	if got.Lines != want.Lines || got.Created != want.Created || got.Replayed != want.Replayed ||
		got.Conflict != want.Conflict || got.Invalid != want.Invalid || got.Errors != want.Errors || got.Retries != want.Retries {
		t.Errorf("summary = %+v, want %+v", got, want)
	}
	var lines []int
	for _, p := range sum.Problems {
		lines = append(lines, p.Line)
	}
	if want := []int{4, 7, 8, 9}; !equal(lines, want) {
		t.Errorf("problem lines = %v, want %v (%+v)", lines, want, sum.Problems)
	}
	if sum.Problems[0].Detail != "line is not valid JSON" || sum.Problems[3].Outcome != submit.Conflict ||
		!strings.Contains(sum.Problems[2].Detail, "amount_cents") {
		t.Errorf("problems = %+v", sum.Problems)
	}
	if sum.OK() {
		t.Error("OK() = true with invalid lines")
	}
}

func TestRunConcurrentlyGivesTheSameCounts(t *testing.T) {
	t.Parallel()
	_, srv := newFakeAPI(t, "")
	var b strings.Builder
	for i := range 200 {
		line := `{"settlement_id":"s` + string(rune('a'+i%50)) + `","account_id":"x","amount_cents":1,"currency":"EUR","beneficiary":"b"}`
		b.WriteString(line + "\n")
	}
	sum, err := submit.Run(context.Background(), strings.NewReader(b.String()), submit.Options{URL: srv.URL, Concurrency: 16})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Lines != 200 || sum.Created != 50 || sum.Replayed != 150 || !sum.OK() {
		t.Errorf("summary = %+v, want 50 created and 150 replayed of 200", sum)
	}
}

func TestRunStopsOnABadToken(t *testing.T) {
	t.Parallel()
	_, srv := newFakeAPI(t, "right")
	_, err := submit.Run(context.Background(), strings.NewReader(input), submit.Options{URL: srv.URL, Token: "wrong"})
	if !errors.Is(err, submit.ErrFatal) {
		t.Errorf("err = %v, want ErrFatal", err)
	}
}

func TestRunReportsAnUnreachableAPI(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	sum, err := submit.Run(context.Background(), strings.NewReader(input), submit.Options{
		URL: url, RetryFor: 50 * time.Millisecond, InitialBackoff: time.Millisecond,
	})
	if !errors.Is(err, submit.ErrNoAnswer) {
		t.Errorf("err = %v, want ErrNoAnswer", err)
	}
	if sum.Errors != 8 || sum.Invalid != 2 {
		t.Errorf("summary = %+v, want 8 errors (sent, unanswered) and 2 invalid (not JSON, refused locally)", sum)
	}
}

func TestReadLinesRefusesOverlongLinesAndKeepsGoing(t *testing.T) {
	t.Parallel()
	long := `{"x":"` + strings.Repeat("y", submit.MaxLineBytes) + `"}`
	in := "{}\n" + long + "\r\n\n{\"a\":1}"
	type line struct {
		n       int
		text    string
		tooLong bool
	}
	var got []line
	if err := submit.ReadLines(strings.NewReader(in), func(n int, b []byte, tooLong bool) bool {
		text := string(b)
		if tooLong {
			text = ""
		}
		got = append(got, line{n, text, tooLong})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	want := []line{{1, "{}", false}, {2, "", true}, {4, `{"a":1}`, false}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
