// Package submit posts NDJSON payout events to settle's HTTP API: the logic
// behind `settle submit` and the demo's producer.
//
// It reads one event per line, checks that each line is JSON (a line that is
// not is reported with its number and counted invalid, never skipped), and
// posts the events with bounded concurrency. Answers that are not definitive
// (connection errors, 429, 5xx) are retried with exponential backoff,
// honouring Retry-After: sending the same event again is safe, because the
// engine deduplicates on settlement_id. Every line ends in exactly one
// outcome: created, replayed, conflict, invalid, or error (no definitive
// answer within the retry budget).
//
// It must never drop a line without an outcome, never log or print the API
// token, and never decide anything about a settlement: the API does.
package submit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/settle/settle/internal/retryafter"
)

// MaxLineBytes is the longest event line sent: the API refuses bodies over
// 64 KiB (413), so longer lines are counted invalid without being sent.
const MaxLineBytes = 64 << 10

// MaxProblems caps the problems kept in a Summary; the counts stay exact.
const MaxProblems = 1000

// Outcome is what became of one line.
type Outcome string

// The outcomes of a line.
const (
	// Created: 201, a new settlement.
	Created Outcome = "created"
	// Replayed: 200, the settlement was already received with this payload.
	Replayed Outcome = "replayed"
	// Conflict: 409, the settlement_id was received with another payload;
	// the API recorded the conflict and did not apply the event.
	Conflict Outcome = "conflict"
	// Invalid: not JSON, too long, or refused by the API as invalid
	// (400, 413, 422).
	Invalid Outcome = "invalid"
	// Error: no definitive answer within the retry budget (or cancelled).
	// Submitting the line again is safe.
	Error Outcome = "error"
)

// ErrFatal is matched (errors.Is) when the API refused the run as a whole
// (bad token, wrong URL): no later line could succeed, so the run stops.
var ErrFatal = errors.New("the API refused the submission")

// ErrNoAnswer is matched when events were sent but the API never gave a
// definitive answer to any of them (unreachable, or always overloaded).
var ErrNoAnswer = errors.New("the API never answered")

// ErrPlainHTTP is matched when the token would travel over plain http to a
// host that is not this machine.
var ErrPlainHTTP = errors.New("refusing to send the API token over plain http to a host that is not this machine")

// Options configure a run. URL is required.
type Options struct {
	// URL is the base URL of the API, e.g. http://127.0.0.1:8080.
	URL string
	// Token, when set, is sent as "Authorization: Bearer <token>". It is
	// refused over plain http to a host that is not this machine (anyone
	// on the path could read it) unless InsecureHTTP.
	Token string
	// InsecureHTTP allows sending Token over plain http to another host
	// (settle submit --insecure-http).
	InsecureHTTP bool
	// Concurrency is the number of requests in flight (default 8).
	Concurrency int
	// Batch, when above 1, posts up to this many events per request to
	// POST /v1/settlements/batch (at most 1000); each event still gets its
	// own outcome. A batch the API refuses as a whole is sent again event
	// by event, so one bad line never costs the others their answer.
	Batch int
	// RetryFor bounds the time spent retrying one event (default 2m).
	RetryFor time.Duration
	// InitialBackoff is the first retry delay (default 100ms); later
	// delays grow exponentially, with jitter, up to 5s.
	InitialBackoff time.Duration
	// Client is the HTTP client (default: one with a 30s timeout).
	Client *http.Client
	// OnResult, when set, is called once per line as its outcome is
	// known, from one goroutine at a time, in completion order.
	OnResult func(Result)
}

// Result is the outcome of one line.
type Result struct {
	// Line is the 1-based line number in the input.
	Line int `json:"line"`
	// SettlementID is the event's settlement_id when it could be read.
	SettlementID string  `json:"settlement_id,omitempty"`
	Outcome      Outcome `json:"outcome"`
	// Status is the HTTP status of the final answer (0 when none).
	Status int `json:"status,omitempty"`
	// State is the settlement's state in a 201 or 200 answer.
	State string `json:"state,omitempty"`
	// Detail explains an invalid, conflict or error outcome.
	Detail string `json:"detail,omitempty"`
	// Attempts is the number of requests sent for the line.
	Attempts int `json:"attempts,omitempty"`
}

// Summary counts the outcomes of a run.
type Summary struct {
	// Lines is the number of non-blank lines read.
	Lines    int `json:"lines"`
	Created  int `json:"created"`
	Replayed int `json:"replayed"`
	Conflict int `json:"conflict"`
	Invalid  int `json:"invalid"`
	Errors   int `json:"errors"`
	// Retries counts the times an event was sent again after an answer
	// that was not definitive (in batch mode, once per event of the batch).
	Retries int `json:"retries"`
	// DurationSeconds is the wall time of the run.
	DurationSeconds float64 `json:"duration_seconds"`
	// Problems lists the invalid, conflict and error lines in line order,
	// at most MaxProblems of them.
	Problems []Result `json:"problems"`
	// ProblemsOmitted counts the problems beyond MaxProblems.
	ProblemsOmitted int `json:"problems_omitted,omitempty"`
}

// OK reports whether every line was created or replayed.
func (s Summary) OK() bool { return s.Created+s.Replayed == s.Lines }

func (s *Summary) add(r Result) {
	switch r.Outcome {
	case Created:
		s.Created++
	case Replayed:
		s.Replayed++
	case Conflict:
		s.Conflict++
	case Invalid:
		s.Invalid++
	default:
		s.Errors++
	}
	if r.Attempts > 1 {
		s.Retries += r.Attempts - 1
	}
	if r.Outcome != Created && r.Outcome != Replayed {
		if len(s.Problems) < MaxProblems {
			s.Problems = append(s.Problems, r)
		} else {
			s.ProblemsOmitted++
		}
	}
}

// job is one line to post.
type job struct {
	line int
	id   string
	body []byte
	// alone is set for a line that is not a JSON object: the batch
	// endpoint would read a line holding an array as several events, so it
	// goes to the single endpoint, which refuses it like any bad line.
	alone bool
}

// Run reads NDJSON events from r and posts them to the API. Blank lines are
// ignored. It returns the summary of the run; the error is not nil only when
// the run could not be carried out: r could not be read, the API refused the
// run as a whole (ErrFatal), or it never answered (ErrNoAnswer). Cancelling
// ctx stops the run; lines not yet answered count as errors.
func Run(ctx context.Context, r io.Reader, o Options) (Summary, error) {
	start := time.Now()
	if o.URL == "" {
		return Summary{}, fmt.Errorf("%w: no API URL", ErrFatal)
	}
	if err := checkURL(o); err != nil {
		return Summary{}, err
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.RetryFor <= 0 {
		o.RetryFor = 2 * time.Minute
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = 100 * time.Millisecond
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if o.Batch > MaxBatch {
		return Summary{}, fmt.Errorf("%w: --batch is at most %d", ErrFatal, MaxBatch)
	}
	endpoint := strings.TrimSuffix(o.URL, "/") + "/v1/settlements"

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan []job)
	results := make(chan Result)
	size := max(o.Batch, 1)
	var readErr error
	var wg sync.WaitGroup

	wg.Add(1)
	go func() { // the reader
		defer wg.Done()
		defer close(jobs)
		var group []job
		flush := func() bool {
			if len(group) == 0 {
				return true
			}
			select {
			case jobs <- group:
				group = nil
				return true
			case <-ctx.Done():
				return false
			}
		}
		defer func() {
			if readErr == nil {
				flush()
			}
		}()
		readErr = ReadLines(r, func(n int, line []byte, tooLong bool) bool {
			res, ok := check(n, line, tooLong)
			if !ok {
				select {
				case results <- res:
					return true
				case <-ctx.Done():
					return false
				}
			}
			j := job{line: n, id: res.SettlementID, body: line}
			if size > 1 && !bytes.HasPrefix(bytes.TrimLeft(line, " \t\r"), []byte("{")) {
				j.alone = true
				if !flush() {
					return false
				}
				group = []job{j}
				return flush()
			}
			group = append(group, j)
			if len(group) < size {
				return true
			}
			return flush()
		})
	}()
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for group := range jobs {
				var out []posted
				if len(group) == 1 && (o.Batch <= 1 || group[0].alone) {
					out = []posted{post(ctx, o, endpoint, group[0])}
				} else {
					out = postBatch(ctx, o, endpoint, group)
				}
				for _, res := range out {
					if res.fatal {
						cancel(fmt.Errorf("%w: line %d: %s", ErrFatal, res.Line, res.Detail))
					}
					results <- res.Result
				}
			}
		}()
	}
	go func() { wg.Wait(); close(results) }()

	var sum Summary
	sent, answered := 0, 0
	for res := range results {
		sum.Lines++
		sum.add(res)
		if res.Attempts > 0 {
			sent++
			if res.Status != 0 && res.Outcome != Error {
				answered++
			}
		}
		if o.OnResult != nil {
			o.OnResult(res)
		}
	}
	sort.Slice(sum.Problems, func(i, j int) bool { return sum.Problems[i].Line < sum.Problems[j].Line })
	sum.DurationSeconds = time.Since(start).Seconds()
	if err := context.Cause(ctx); errors.Is(err, ErrFatal) {
		return sum, err
	}
	if readErr != nil {
		return sum, fmt.Errorf("error reading the events: %w", readErr)
	}
	if sent > 0 && answered == 0 && ctx.Err() == nil {
		return sum, fmt.Errorf("%w: %d events sent to %s, none got a definitive answer", ErrNoAnswer, sent, o.URL)
	}
	return sum, nil
}

// check decides locally whether a line can be sent. It reads the
// settlement_id for reporting when it can.
func check(n int, line []byte, tooLong bool) (Result, bool) {
	if tooLong {
		return Result{Line: n, Outcome: Invalid, Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("line is over %d bytes (the API refuses it)", MaxLineBytes)}, false
	}
	if !json.Valid(line) {
		return Result{Line: n, Outcome: Invalid, Detail: "line is not valid JSON"}, false
	}
	var ev struct {
		SettlementID any `json:"settlement_id"`
	}
	res := Result{Line: n}
	if json.Unmarshal(line, &ev) == nil {
		if id, ok := ev.SettlementID.(string); ok {
			res.SettlementID = id
		}
	}
	return res, true
}

// ReadLines calls fn with every non-blank line of r (its 1-based number,
// its bytes without the line ending, and whether it was longer than
// MaxLineBytes, in which case the bytes are truncated) until fn returns
// false or r ends. Lines of any length are read without holding more than
// MaxLineBytes of one in memory.
func ReadLines(r io.Reader, fn func(n int, line []byte, tooLong bool) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		var buf []byte
		tooLong := false
		var err error
		for {
			var frag []byte
			frag, err = br.ReadSlice('\n')
			if !tooLong && len(buf)+len(frag) <= MaxLineBytes+2 {
				buf = append(buf, frag...)
			} else {
				tooLong = true
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		line := bytes.TrimRight(buf, "\r\n")
		if !tooLong && len(line) > MaxLineBytes {
			tooLong = true
		}
		if tooLong || len(bytes.TrimSpace(line)) > 0 {
			if !fn(n, line, tooLong) {
				return nil
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// CountLines returns the number of non-blank lines of r (what Run will
// report as Lines), for sizing a progress bar.
func CountLines(r io.Reader) (int, error) {
	n := 0
	err := ReadLines(r, func(int, []byte, bool) bool { n++; return true })
	return n, err
}

// posted is a Result plus whether the answer condemns the whole run.
type posted struct {
	Result
	fatal bool
}

// post sends one event until it gets a definitive answer, the retry budget
// is spent, or ctx ends.
func post(ctx context.Context, o Options, endpoint string, j job) posted {
	res := Result{Line: j.line, SettlementID: j.id}
	a := retry(ctx, o, endpoint, j.body, classify)
	res.Attempts, res.Status = a.attempts, a.status
	if !a.done {
		res.Outcome, res.Detail = Error, a.detail
		return posted{Result: res}
	}
	res.Outcome, res.State, res.Detail = a.c.Outcome, a.c.State, a.c.Detail
	return posted{Result: res, fatal: a.c.fatal}
}

// MaxBatch is the largest batch the API takes.
const MaxBatch = 1000

// postBatch sends a group of events in one request to the batch endpoint
// and maps the answer back to one result per event, in order. When the API
// answers the batch as a whole with a definitive refusal other than a bad
// token or URL (a body it cannot split, say), the events are sent again one
// by one, so each still gets its own answer.
func postBatch(ctx context.Context, o Options, endpoint string, js []job) []posted {
	body := bytes.Join(func() [][]byte {
		lines := make([][]byte, len(js))
		for i, j := range js {
			lines[i] = j.body
		}
		return lines
	}(), []byte("\n"))
	var items []struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	}
	a := retry(ctx, o, endpoint+"/batch", body, func(status int, b []byte) (classified, bool) {
		if status != http.StatusOK {
			return classify(status, b)
		}
		var br struct {
			Results []struct {
				Status int             `json:"status"`
				Body   json.RawMessage `json:"body"`
			} `json:"results"`
		}
		if err := json.Unmarshal(b, &br); err != nil || len(br.Results) != len(js) {
			return classified{Outcome: Error, Detail: fmt.Sprintf("batch answer with %d results for %d events", len(br.Results), len(js))}, true
		}
		items = br.Results
		return classified{Outcome: Created}, true
	})
	out := make([]posted, len(js))
	for i, j := range js {
		res := Result{Line: j.line, SettlementID: j.id, Attempts: a.attempts}
		switch {
		case !a.done:
			res.Outcome, res.Status, res.Detail = Error, a.status, a.detail
			out[i] = posted{Result: res}
		case items == nil && a.c.fatal:
			res.Outcome, res.Status, res.Detail = Error, a.status, a.c.Detail
			out[i] = posted{Result: res, fatal: true}
		case items == nil:
			// Refused as a whole: give each event its own answer.
			out[i] = post(ctx, o, endpoint, j)
		default:
			c, done := classify(items[i].Status, items[i].Body)
			if !done { // not definitive for this event: send it alone
				out[i] = post(ctx, o, endpoint, j)
				continue
			}
			res.Status, res.Outcome, res.State, res.Detail = items[i].Status, c.Outcome, c.State, c.Detail
			out[i] = posted{Result: res, fatal: c.fatal}
		}
	}
	return out
}

// attempt is the end of retry: the classified definitive answer (done), or
// why there was none.
type attempt struct {
	c        classified
	done     bool
	status   int
	detail   string
	attempts int
}

// retry posts body to endpoint until decide calls an answer definitive,
// the retry budget is spent, or ctx ends; it honours Retry-After.
func retry(ctx context.Context, o Options, endpoint string, body []byte, decide func(int, []byte) (classified, bool)) attempt {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = o.InitialBackoff
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = o.RetryFor
	b.Reset()
	var a attempt
	for {
		a.attempts++
		status, hdr, rb, err := send(ctx, o, endpoint, body)
		if ctx.Err() != nil {
			a.status, a.detail = 0, "cancelled before a definitive answer"
			return a
		}
		if err == nil {
			a.status = status
			if c, done := decide(status, rb); done {
				a.c, a.done = c, true
				return a
			}
			a.detail = fmt.Sprintf("HTTP %d: %s", status, problemDetail(rb))
		} else {
			a.status, a.detail = 0, err.Error()
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			a.detail = fmt.Sprintf("no definitive answer after %d attempts: %s", a.attempts, a.detail)
			return a
		}
		if ra, ok := retryafter.Parse(hdr, time.Now()); ok && ra > wait {
			wait = min(ra, time.Minute)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			a.status, a.detail = 0, "cancelled before a definitive answer"
			return a
		case <-t.C:
		}
	}
}

// checkURL refuses a URL that is not http(s) and, unless o.InsecureHTTP, a
// token sent over plain http to a host other than this machine.
func checkURL(o Options) error {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: invalid API URL %q: want http(s)://host[:port]", ErrFatal, o.URL)
	}
	if u.Scheme == "http" && o.Token != "" && !o.InsecureHTTP && !isLoopback(u.Hostname()) {
		return fmt.Errorf("%w (%s): use https, or accept the risk with --insecure-http", ErrPlainHTTP, u.Host)
	}
	return nil
}

// isLoopback reports whether host names this machine.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// send makes one request. An error means no HTTP answer arrived.
func send(ctx context.Context, o Options, endpoint string, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("error building the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, application/problem+json")
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("error posting the event: %w", err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("error reading the answer: %w", err)
	}
	return resp.StatusCode, resp.Header, rb, nil
}

// classified is the meaning of one HTTP answer.
type classified struct {
	Outcome Outcome
	State   string
	Detail  string
	fatal   bool
}

// classify maps an answer to an outcome; done is false when the answer is
// not definitive and the event must be sent again.
func classify(status int, body []byte) (classified, bool) {
	switch {
	case status == http.StatusCreated || status == http.StatusOK:
		var s struct {
			State string `json:"state"`
		}
		_ = json.Unmarshal(body, &s)
		if status == http.StatusCreated {
			return classified{Outcome: Created, State: s.State}, true
		}
		return classified{Outcome: Replayed, State: s.State}, true
	case status == http.StatusConflict:
		return classified{Outcome: Conflict, Detail: conflictDetail(body)}, true
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return classified{Outcome: Error, Detail: "the API refused the token (set --api-token or SETTLE_API_TOKEN)", fatal: true}, true
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		return classified{Outcome: Error, Detail: fmt.Sprintf("HTTP %d: is --url the settle API?", status), fatal: true}, true
	case status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500:
		return classified{}, false
	case status >= 400:
		return classified{Outcome: Invalid, Detail: problemDetail(body)}, true
	default:
		return classified{}, false
	}
}

// problemDetail summarises a problem+json body in one line.
func problemDetail(body []byte) string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Field  string `json:"field"`
	}
	if json.Unmarshal(body, &p) != nil {
		s := strings.TrimSpace(string(body))
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		return s
	}
	d := p.Detail
	if d == "" {
		d = p.Title
	}
	if p.Field != "" && !strings.Contains(d, p.Field) {
		d = p.Field + ": " + d
	}
	return d
}

// conflictDetail summarises a 409 problem with its hashes.
func conflictDetail(body []byte) string {
	var p struct {
		StoredHash   string `json:"stored_hash"`
		IncomingHash string `json:"incoming_hash"`
	}
	d := problemDetail(body)
	if json.Unmarshal(body, &p) == nil && p.StoredHash != "" {
		d = fmt.Sprintf("%s (stored %s, incoming %s)", d, p.StoredHash, p.IncomingHash)
	}
	return d
}
