// Package eventstest is test support for outcome events: a real HTTP
// receiver that verifies every Standard Webhooks signature with its own
// implementation of the specification's algorithm (not the sender's),
// deduplicates by webhook-id as a consumer should, checks each
// settlement's order, and can fail on purpose (answer 500, sleep past the
// sender's timeout, be down). Never linked into the binary.
package eventstest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Verify checks a Standard Webhooks request as a receiver does: the
// signature header holds at least one "v1,<base64>" equal (in constant
// time) to the HMAC-SHA256 of id.timestamp.body under the secret
// ("whsec_<base64>", padded or not). It does not check the timestamp's age.
func Verify(secret, id, timestamp, signatures string, body []byte) error {
	enc := strings.TrimPrefix(secret, "whsec_")
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		if key, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "=")); err != nil {
			return fmt.Errorf("bad secret: %w", err)
		}
	}
	if id == "" || timestamp == "" || signatures == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	if _, err := strconv.ParseInt(timestamp, 10, 64); err != nil {
		return fmt.Errorf("bad webhook-timestamp %q", timestamp)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Split(signatures, " ") {
		version, b64, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no signature matches")
}

// Message is one event a Receiver accepted.
type Message struct {
	ID        string
	Type      string
	Timestamp time.Time
	Data      map[string]any
}

// Receiver is an HTTP server receiving webhooks.
type Receiver struct {
	// SleepFor is how long a Sleep fault sleeps (default 3s); set it
	// before the first call.
	SleepFor time.Duration

	srv     *httptest.Server
	secrets []string

	mu       sync.Mutex
	fail     func(n int, id string) Fault
	calls    int
	seen     map[string]bool
	accepted []Message
	bySettle map[string][]string
	dups     int
	bad      []string
	changed  chan struct{}
}

// Fault is what the receiver does with one call.
type Fault int

// The faults.
const (
	OK      Fault = iota // answer 200
	Fail500              // answer 500, keep nothing
	Sleep                // sleep SleepFor before answering 200 (the sender has given up), keep nothing
	Down                 // close the connection without an answer, keep nothing
)

// NewReceiver starts a receiver accepting signatures under any of secrets
// (whsec_…); fail, if not nil, picks the fault of the nth call (from 1).
// It is closed with the test.
func NewReceiver(t interface {
	Helper()
	Cleanup(func())
}, fail func(n int, id string) Fault, secrets ...string) *Receiver {
	t.Helper()
	r := &Receiver{SleepFor: 3 * time.Second, secrets: secrets, fail: fail, seen: map[string]bool{}, bySettle: map[string][]string{}, changed: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// URL is where the receiver listens.
func (r *Receiver) URL() string { return r.srv.URL + "/hooks" }

// SetFail replaces the fault picker.
func (r *Receiver) SetFail(fail func(n int, id string) Fault) {
	r.mu.Lock()
	r.fail = fail
	r.mu.Unlock()
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	r.calls++
	n, fail := r.calls, r.fail
	r.mu.Unlock()
	fault := OK
	if fail != nil {
		fault = fail(n, id)
	}
	switch fault {
	case Fail500:
		http.Error(w, "planted failure", http.StatusInternalServerError)
		return
	case Sleep:
		select {
		case <-time.After(r.SleepFor):
		case <-req.Context().Done():
		}
		return
	case Down:
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	verr := errors.New("no secret")
	for _, s := range r.secrets {
		if verr = Verify(s, id, req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature"), body); verr == nil {
			break
		}
	}
	var msg struct {
		Type      string         `json:"type"`
		Timestamp time.Time      `json:"timestamp"`
		Data      map[string]any `json:"data"`
	}
	jerr := json.Unmarshal(body, &msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.signal()
	if verr != nil || jerr != nil {
		r.bad = append(r.bad, fmt.Sprintf("%s: signature %v, body %v", id, verr, jerr))
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if r.seen[id] {
		r.dups++
		w.WriteHeader(http.StatusOK)
		return
	}
	r.seen[id] = true
	r.accepted = append(r.accepted, Message{ID: id, Type: msg.Type, Timestamp: msg.Timestamp, Data: msg.Data})
	sid, _, _ := strings.Cut(id, ":")
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		sid = id[:i]
	}
	r.bySettle[sid] = append(r.bySettle[sid], id)
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "ok")
}

// signal wakes the waiters; r.mu is held.
func (r *Receiver) signal() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Wait blocks until cond (called with the accepted messages, under the
// receiver's lock) holds or timeout passes, and reports whether it holds.
func (r *Receiver) Wait(timeout time.Duration, cond func(accepted []Message) bool) bool {
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		ok, ch := cond(r.accepted), r.changed
		r.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// Accepted returns the distinct messages accepted, in arrival order.
func (r *Receiver) Accepted() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Message(nil), r.accepted...)
}

// Duplicates is how many deliveries repeated an id already accepted.
func (r *Receiver) Duplicates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dups
}

// Calls is how many requests arrived.
func (r *Receiver) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// Problems lists what the receiver found wrong: bad signatures or bodies,
// and any settlement whose events arrived out of order or with a gap
// (event n before n-1, or n not following n-1).
func (r *Receiver) Problems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]string(nil), r.bad...)
	for sid, ids := range r.bySettle {
		for i, id := range ids {
			if want := fmt.Sprintf("%s:%d", sid, i+1); id != want {
				out = append(out, fmt.Sprintf("settlement %s: event %d received is %s, want %s (order %v)", sid, i+1, id, want, ids))
				break
			}
		}
	}
	return out
}

// Sequences returns, per settlement, the event ids accepted in order.
func (r *Receiver) Sequences() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]string, len(r.bySettle))
	for k, v := range r.bySettle {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// WaitDelivered waits until want deliveries are recorded delivered and
// none is in another state (a receiver may have the last event before its
// delivery commits).
func WaitDelivered(t testing.TB, pool *pgxpool.Pool, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var delivered, other int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state <> 'delivered') FROM event_deliveries`).Scan(&delivered, &other); err != nil {
			t.Fatal(err)
		}
		if delivered == want && other == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries delivered, %d not, want %d delivered", delivered, other, want)
		}
		time.Sleep(20 * time.Millisecond) // polling the database: the commit has no signal
	}
}
