package motoserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
)

// front is the HTTP endpoint the clients reach: a reverse proxy to
// moto_server that lets one request at a time change a queue's messages.
//
// moto_server serves each request in a thread of its own, and its queues
// are not safe for that: a delete rebuilds the queue's list of messages
// without a lock, so two deletes at once (or a delete and a send) can put
// back a message the other just deleted, or drop one just sent. Amazon SQS
// has no such fault: a DeleteMessageBatch that succeeded deleted its
// messages. The front keeps the stand-in honest: the calls that add or
// remove messages on one queue are let in one at a time. Receives (which
// may wait, long-polling) and reads pass at once; they only mark messages
// in place.
type front struct {
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	locks map[string]*sync.Mutex // queue URL (or "") → its lock
}

func newFront(backend *url.URL) *front {
	f := &front{locks: map[string]*sync.Mutex{}}
	f.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backend)
			r.Out.Host = r.In.Host
		},
		ErrorHandler: proxyError,
	}
	return f
}

// proxyError answers a call moto_server did not answer: 502, as a load
// balancer would, so that the client classifies it as SQS unavailable.
// A call its client gave up on (a long poll cut at shutdown) is answered
// nothing, and logged nowhere.
func proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	http.Error(w, "motoserver front: "+err.Error(), http.StatusBadGateway)
}

// concurrent are the actions that never add or remove a queue's
// messages.
var concurrent = map[string]bool{
	"ReceiveMessage": true, "GetQueueAttributes": true, "GetQueueUrl": true,
	"ListQueues": true, "ListDeadLetterSourceQueues": true, "ListQueueTags": true,
	"ChangeMessageVisibility": true, "ChangeMessageVisibilityBatch": true,
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		f.proxy.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		http.Error(w, "motoserver front: error reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	action, queue := call(r, body)
	if !concurrent[action] {
		l := f.lock(queue)
		l.Lock()
		defer l.Unlock()
	}
	f.proxy.ServeHTTP(w, r)
}

// lock is the lock of queue.
func (f *front) lock(queue string) *sync.Mutex {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.locks[queue]
	if !ok {
		l = &sync.Mutex{}
		f.locks[queue] = l
	}
	return l
}

// call reads the action and the queue URL of an SQS request, in the JSON
// protocol (X-Amz-Target: AmazonSQS.Action, a JSON body) or the query
// protocol (a form with Action and QueueUrl). What it cannot read is ""
// for both: such a request takes the lock shared by every unknown queue.
func call(r *http.Request, body []byte) (action, queue string) {
	if target := r.Header.Get("X-Amz-Target"); target != "" {
		action = target[strings.LastIndexByte(target, '.')+1:]
		var in struct {
			QueueURL string `json:"QueueUrl"`
		}
		_ = json.Unmarshal(body, &in)
		return action, in.QueueURL
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return "", ""
	}
	return form.Get("Action"), form.Get("QueueUrl")
}
