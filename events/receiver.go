package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Receiver is a webhook receiver written as a consumer writes one (the
// README's, grown a little): it verifies each Standard Webhooks signature
// and the timestamp's age, handles each webhook-id once, and checks that
// every settlement's events arrive in order without a gap (n follows n-1).
// `settle demo` runs it; it is no part of the worker.
type Receiver struct {
	// Fail, when set, is asked before anything else with the number of
	// the call (from 1): true answers 503, as a receiver briefly down.
	Fail func(n int) bool
	// Tolerance is how far a webhook-timestamp may be from now (default
	// 5 minutes).
	Tolerance time.Duration

	keys [][]byte

	mu         sync.Mutex
	calls      int
	refused    int
	bad        int
	duplicates int
	seen       map[string]bool
	last       map[string]int
	problems   []string
}

// NewReceiver returns a receiver accepting a signature under any of
// secrets (SETTLE_EVENTS_SECRET's form: whsec_<base64>, comma-separated).
func NewReceiver(secrets string) (*Receiver, error) {
	s, err := ParseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	return &Receiver{keys: s.keys, seen: map[string]bool{}, last: map[string]int{}}, nil
}

// ServeHTTP receives one webhook: 503 when Fail says so, 400 for a body
// too large, 401 for a bad signature or timestamp, else 204 (a duplicate
// too: the sender may stop sending it).
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.calls++
	n, fail := r.calls, r.Fail
	r.mu.Unlock()
	if fail != nil && fail(n) {
		r.count(&r.refused)
		http.Error(w, "briefly down (on purpose)", http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20+1))
	if err != nil || len(body) > 1<<20 {
		r.count(&r.bad)
		http.Error(w, "body unreadable or over 1 MiB", http.StatusBadRequest)
		return
	}
	id, ts := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp")
	if !r.verify(id, ts, req.Header.Get("webhook-signature"), body) {
		r.count(&r.bad)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[id] {
		r.duplicates++
		w.WriteHeader(http.StatusNoContent)
		return
	}
	r.seen[id] = true
	if i := strings.LastIndexByte(id, ':'); i > 0 {
		sid, k := id[:i], id[i+1:]
		if n, err := strconv.Atoi(k); err != nil || n != r.last[sid]+1 {
			r.problems = append(r.problems, fmt.Sprintf("%s arrived after %s:%d", id, sid, r.last[sid]))
		} else {
			r.last[sid] = n
		}
	} else {
		r.problems = append(r.problems, fmt.Sprintf("webhook-id %q is not <settlement_id>:<n>", id))
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *Receiver) count(c *int) {
	r.mu.Lock()
	*c++
	r.mu.Unlock()
}

// verify checks the signature: one v1 entry equal (in constant time) to
// the HMAC-SHA256 of id.timestamp.body under one of the keys, and the
// timestamp within Tolerance of now.
func (r *Receiver) verify(id, ts, signatures string, body []byte) bool {
	sec, err := strconv.ParseInt(ts, 10, 64)
	tolerance := r.Tolerance
	if tolerance <= 0 {
		tolerance = 5 * time.Minute
	}
	if id == "" || err != nil || time.Since(time.Unix(sec, 0)).Abs() > tolerance {
		return false
	}
	for _, key := range r.keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want := mac.Sum(nil)
		for _, sig := range strings.Fields(signatures) {
			v, b64, ok := strings.Cut(sig, ",")
			if got, err := base64.StdEncoding.DecodeString(b64); ok && v == "v1" && err == nil && hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}

// ReceiverStats is what a Receiver saw.
type ReceiverStats struct {
	// Calls is every request; Refused those Fail answered 503; Bad those
	// refused for their signature, timestamp or body.
	Calls, Refused, Bad int
	// Accepted is the distinct events handled; Duplicates the deliveries
	// of an event already handled (answered 204, ignored).
	Accepted, Duplicates int
	// Last is, per settlement, the n of the last event accepted in order.
	Last map[string]int
	// Problems lists events that arrived out of order or after a gap.
	Problems []string
}

// Stats returns what the receiver saw so far.
func (r *Receiver) Stats() ReceiverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := make(map[string]int, len(r.last))
	for k, v := range r.last {
		last[k] = v
	}
	problems := append([]string(nil), r.problems...)
	sort.Strings(problems)
	return ReceiverStats{Calls: r.calls, Refused: r.refused, Bad: r.bad, Accepted: len(r.seen), Duplicates: r.duplicates, Last: last, Problems: problems}
}
