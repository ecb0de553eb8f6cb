package motoserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// backend stands for moto_server: it counts, per queue, the calls that
// change messages at once, and holds each call until released, so that
// the test sees which calls the front lets overlap.
type backend struct {
	mu       sync.Mutex
	inFlight map[string]int // queue → mutating calls in moto at once
	maxSeen  map[string]int
	arrived  chan string // each call's action as it reaches moto
	release  chan struct{}
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	action, queue := call(r, body)
	mutating := !concurrent[action]
	if mutating {
		b.mu.Lock()
		b.inFlight[queue]++
		b.maxSeen[queue] = max(b.maxSeen[queue], b.inFlight[queue])
		b.mu.Unlock()
	}
	b.arrived <- action
	<-b.release
	if mutating {
		b.mu.Lock()
		b.inFlight[queue]--
		b.mu.Unlock()
	}
	_, _ = fmt.Fprintf(w, `{"action":%q}`, action)
}

// TestFrontLetsInOneChangeOfAQueueAtATime: deletes and sends of one queue
// reach moto_server one at a time, in both of SQS's protocols; calls of
// other queues and receives (which long-poll) are not held behind them.
func TestFrontLetsInOneChangeOfAQueueAtATime(t *testing.T) {
	t.Parallel()
	b := &backend{inFlight: map[string]int{}, maxSeen: map[string]int{}, arrived: make(chan string, 64), release: make(chan struct{})}
	moto := httptest.NewServer(b)
	defer moto.Close()
	u, _ := url.Parse(moto.URL)
	front := httptest.NewServer(newFront(u))
	defer front.Close()
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(b.release) }) }
	defer releaseAll() // before the servers close: they wait for their calls

	const qa, qb = "http://x/123/a", "http://x/123/b"
	jsonCall := func(action, queue string) func() error {
		return func() error {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, front.URL, strings.NewReader(fmt.Sprintf(`{"QueueUrl":%q}`, queue)))
			req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
			return do(req, action)
		}
	}
	queryCall := func(action, queue string) func() error {
		return func() error {
			form := url.Values{"Action": {action}, "QueueUrl": {queue}}
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, front.URL, strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return do(req, action)
		}
	}
	calls := []func() error{
		jsonCall("DeleteMessageBatch", qa), jsonCall("DeleteMessageBatch", qa),
		queryCall("DeleteMessage", qa), jsonCall("SendMessageBatch", qa),
		jsonCall("DeleteMessageBatch", qb),
		jsonCall("ReceiveMessage", qa), jsonCall("ReceiveMessage", qa),
	}
	errs := make(chan error, len(calls))
	for _, c := range calls {
		go func() { errs <- c() }()
	}
	// One change of queue a, the change of queue b and both receives reach
	// moto while nothing is released; the other changes of a wait.
	got := map[string]int{}
	for range 4 {
		got[<-b.arrived]++
	}
	select {
	case a := <-b.arrived:
		t.Fatalf("a fifth call (%s) reached moto while four were held: changes of one queue overlap", a)
	case <-time.After(200 * time.Millisecond):
	}
	if got["ReceiveMessage"] != 2 {
		t.Errorf("the receives were held behind changes: %v reached moto", got)
	}
	releaseAll()
	for range calls {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for len(b.arrived) > 0 {
		<-b.arrived
	}
	if b.maxSeen[qa] != 1 || b.maxSeen[qb] != 1 {
		t.Errorf("changes of one queue at once in moto: %v, want 1 each", b.maxSeen)
	}
}

// do sends req and checks that moto_server's answer came back.
func do(req *http.Request, action string) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), action) {
		return fmt.Errorf("%s: %s %s", action, resp.Status, body)
	}
	return nil
}
