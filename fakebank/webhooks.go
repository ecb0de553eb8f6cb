package fakebank

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
)

// A bank pushes: when one of its payments changes status it POSTs an event
// to the URL its customer registered, signed with the secret they share,
// and retries while the receiver does not answer 2xx. For settle such a
// push is a hint (DESIGN.md section 13): it asks the bank at once instead
// of waiting for its next scheduled check. The fakebank pushes as its
// profile's bank does:
//
//   - settle: {"type":"payment.<status>","payment":<the payment as
//     GET /v1/payments/by-key shows it>} signed in Settle-Signature;
//   - stripe: a Stripe event, payout.created, payout.updated (in transit),
//     payout.paid and payout.failed (also for a paid payout that came back,
//     as Stripe reports a return), whose data.object is the payout as
//     GET /v1/payouts/{id} shows it, signed in Stripe-Signature;
//   - obie: nothing. Open Banking's event notifications are a separate
//     standard (signed JWTs to a registered callback) that the obie
//     connector does not take; its returns reach settle on statements.
//
// A real bank's pushes are late, out of order, repeated and now and then
// never sent: the faults webhook_loss_rate, webhook_duplicate_rate and
// webhook_delay_max_ms make the fakebank's so (drawn from a random source
// of their own, so that the payments' fault decisions stay those of the
// seed).

// Webhook delivery: attempts and the growing pause between them.
const (
	webhookAttempts   = 10
	webhookFirstRetry = 100 * time.Millisecond
	webhookMaxRetry   = 5 * time.Second
	webhookTimeout    = 5 * time.Second
	// webhookConcurrency bounds the pushes in flight.
	webhookConcurrency = 16
)

// ErrNoWebhookSecret: webhooks need the secret they are signed with.
var ErrNoWebhookSecret = errors.New("a webhook URL needs the secret to sign with (SETTLE_BANK_WEBHOOK_SECRET)")

// ErrObieNoWebhooks: the obie profile pushes nothing (see above).
var ErrObieNoWebhooks = errors.New("the obie profile pushes no webhooks (Open Banking's event notifications are not served)")

// WebhookStats counts the bank's pushes since it started.
type WebhookStats struct {
	// Events is the number of status changes the bank had to tell.
	Events int64 `json:"events"`
	// Attempts counts the POSTs made, Delivered those answered 2xx.
	Attempts  int64 `json:"attempts"`
	Delivered int64 `json:"delivered"`
	// Lost counts the events never sent (webhook_loss_rate), Duplicated
	// those sent twice (webhook_duplicate_rate), GaveUp the sends that were
	// never answered 2xx after every attempt.
	Lost       int64 `json:"lost"`
	Duplicated int64 `json:"duplicated"`
	GaveUp     int64 `json:"gave_up"`
}

// notifier watches the payments' status changes and pushes them.
type notifier struct {
	b      *Bank
	client *http.Client
	sem    chan struct{}
	wg     sync.WaitGroup
	wake   chan struct{}

	rngMu sync.Mutex
	rng   *rand.Rand

	mu     sync.Mutex // guards the fields below; taken after Bank.mu
	url    string
	secret string
	due    dueHeap                     // when a payment may have changed
	told   map[int64]bankclient.Status // the last status pushed per payment
	seq    int64                       // numbers Stripe's event ids

	events, attempts, delivered, lost, duplicated, gaveUp atomic.Int64
}

// SetWebhook makes the bank push its payments' status changes to url,
// signed with secret, from now on (an empty url stops the pushes). Payments
// already on the books are told about their changes still to come.
func (b *Bank) SetWebhook(rawURL, secret string) error {
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("webhook URL %q: want an absolute http or https URL", rawURL)
		}
		if secret == "" {
			return ErrNoWebhookSecret
		}
		if b.profile == "obie" {
			return ErrObieNoWebhooks
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hooks == nil {
		if rawURL == "" {
			return nil
		}
		b.hooks = &notifier{
			b:      b,
			client: &http.Client{Timeout: webhookTimeout},
			sem:    make(chan struct{}, webhookConcurrency),
			wake:   make(chan struct{}, 1),
			rng:    rand.New(rand.NewPCG(b.seed, 0x700c5)),
			told:   map[int64]bankclient.Status{},
		}
		n := b.hooks
		now := b.now().UTC()
		n.mu.Lock()
		for _, p := range b.books.payments {
			n.told[p.Seq] = p.view(now).Status
			n.scheduleLocked(p, now)
		}
		n.mu.Unlock()
		n.wg.Add(1)
		go n.run()
	}
	n := b.hooks
	n.mu.Lock()
	n.url, n.secret = rawURL, secret
	n.mu.Unlock()
	n.poke()
	return nil
}

// WebhookStats returns the counters of the bank's pushes.
func (b *Bank) WebhookStats() WebhookStats {
	b.mu.Lock()
	n := b.hooks
	b.mu.Unlock()
	if n == nil {
		return WebhookStats{}
	}
	return WebhookStats{Events: n.events.Load(), Attempts: n.attempts.Load(), Delivered: n.delivered.Load(),
		Lost: n.lost.Load(), Duplicated: n.duplicated.Load(), GaveUp: n.gaveUp.Load()}
}

// changed tells the notifier, if there is one, that payment p is new or
// changed at now. The caller holds b.mu.
func (b *Bank) changed(p *payment, now time.Time) {
	if b.hooks == nil {
		return
	}
	b.hooks.mu.Lock()
	b.hooks.scheduleLocked(p, now)
	heap.Push(&b.hooks.due, dueAt{at: now, seq: p.Seq})
	b.hooks.mu.Unlock()
	b.hooks.poke()
}

// scheduleLocked queues the moments still to come at which p's status
// changes by itself: halfway to its due time (processing), its due time
// (its outcome), its return. The caller holds n.mu.
func (n *notifier) scheduleLocked(p *payment, now time.Time) {
	mid := p.CreatedAt.Add(p.DueAt.Sub(p.CreatedAt) / 2)
	for _, at := range []time.Time{mid, p.DueAt, p.ReturnAt} {
		if !at.IsZero() && at.After(now) {
			heap.Push(&n.due, dueAt{at: at, seq: p.Seq})
		}
	}
}

// poke wakes the loop to look at the queue again.
func (n *notifier) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// stop waits for the loop and every push in flight; the bank's context is
// cancelled already.
func (n *notifier) stop() { n.wg.Wait() }

// run pushes each payment's status changes as they come due, until the
// bank closes.
func (n *notifier) run() {
	defer n.wg.Done()
	ctx := n.b.ctx
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		n.mu.Lock()
		var due []int64
		now := n.b.now()
		for n.due.Len() > 0 && !n.due[0].at.After(now) {
			due = append(due, heap.Pop(&n.due).(dueAt).seq)
		}
		wait := time.Hour
		if n.due.Len() > 0 {
			wait = n.due[0].at.Sub(now)
		}
		n.mu.Unlock()
		for _, seq := range due {
			n.tell(ctx, seq)
		}
		if len(due) > 0 {
			continue
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// tell pushes each status payment seq has passed through since the last
// one told, oldest first, each as the bank showed it then: a notifier that
// runs late (a loaded machine) still tells every change, as a bank's event
// log does, instead of only the status it finds.
func (n *notifier) tell(ctx context.Context, seq int64) {
	b := n.b
	b.mu.Lock()
	if seq < 1 || seq > int64(len(b.books.payments)) {
		b.mu.Unlock()
		return
	}
	p := b.books.payments[seq-1]
	steps := p.history(b.now().UTC())
	var stripeViews []stripePayout
	if b.profile == "stripe" {
		for _, st := range steps {
			stripeViews = append(stripeViews, renderPayout(p, st.UpdatedAt))
		}
	}
	b.mu.Unlock()

	n.mu.Lock()
	last, known := n.told[seq]
	from := 0
	if known {
		// After the last status told; only the latest when that one is
		// not in the payment's history (changed another way).
		from = len(steps) - 1
		for i := len(steps) - 1; i >= 0; i-- {
			if steps[i].Status == last {
				from = i + 1
				break
			}
		}
	}
	n.told[seq] = steps[len(steps)-1].Status
	first := n.seq + 1
	n.seq += int64(len(steps) - from)
	target := n.url
	n.mu.Unlock()
	if target == "" {
		return
	}
	for i := from; i < len(steps); i++ {
		var po stripePayout
		if stripeViews != nil {
			po = stripeViews[i]
		}
		body, header, err := webhookBody(b.profile, steps[i], po, first+int64(i-from), known || i > 0)
		if err != nil {
			b.log.Error("fakebank: error encoding a webhook", "payment", steps[i].ID, "error", err)
			return
		}
		if header == "" {
			return // this profile pushes nothing
		}
		n.send(ctx, header, body, steps[i])
	}
}

// send pushes one event, with the loss, duplicate and delay faults.
func (n *notifier) send(ctx context.Context, header string, body []byte, view bankclient.Payment) {
	b := n.b
	n.events.Add(1)
	f := b.Faults()
	if n.chance(f.WebhookLossRate) {
		n.lost.Add(1)
		b.log.Info("fakebank: webhook lost on purpose", "payment", view.ID, "status", view.Status)
		return
	}
	copies := 1
	if n.chance(f.WebhookDuplicateRate) {
		copies = 2
		n.duplicated.Add(1)
	}
	for range copies {
		delay := n.delay(f.WebhookDelayMaxMS)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.push(ctx, header, body, delay)
		}()
	}
}

// push sends one event after delay, again with growing pauses until it is
// answered 2xx, attempts run out, or the bank closes. Each attempt goes to
// the URL registered at that moment, signed then: a receiver that moved
// (a worker restarted on another port) gets the retries.
func (n *notifier) push(ctx context.Context, header string, body []byte, delay time.Duration) {
	pause := webhookFirstRetry
	for attempt := 1; ; attempt++ {
		if !n.b.sleep(ctx, delay) {
			return
		}
		select {
		case n.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n.mu.Lock()
		target, secret := n.url, n.secret
		n.mu.Unlock()
		ok := target != "" && n.post(ctx, target, secret, header, body)
		<-n.sem
		if ok {
			n.delivered.Add(1)
			return
		}
		if attempt == webhookAttempts {
			n.gaveUp.Add(1)
			n.b.log.Warn("fakebank: webhook never answered 2xx; given up", "url", target, "attempts", attempt)
			return
		}
		delay, pause = pause, min(2*pause, webhookMaxRetry)
	}
}

// post makes one attempt, signed at the moment it leaves.
func (n *notifier) post(ctx context.Context, target, secret, header string, body []byte) bool {
	n.attempts.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(header, bankhttp.SignHMAC(body, secret, n.b.now()))
	resp, err := n.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// chance draws a webhook fault with probability p from the notifier's own
// source.
func (n *notifier) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	if p >= 1 {
		return true
	}
	n.rngMu.Lock()
	defer n.rngMu.Unlock()
	return n.rng.Float64() < p
}

// delay draws a push's delay uniformly from [0, maxMS] milliseconds.
func (n *notifier) delay(maxMS int64) time.Duration {
	if maxMS <= 0 {
		return 0
	}
	n.rngMu.Lock()
	defer n.rngMu.Unlock()
	return time.Duration(n.rng.Int64N(maxMS+1)) * time.Millisecond
}

// webhookBody is the event profile's bank sends for a payment now in
// view's status, and the header its signature goes in ("" when the
// profile pushes nothing). known is false for a payment's first event.
func webhookBody(profile string, view bankclient.Payment, po stripePayout, eventNo int64, known bool) ([]byte, string, error) {
	switch profile {
	case "settle":
		body, err := json.Marshal(settle.Webhook{Type: "payment." + string(view.Status), Payment: view})
		return body, settle.SignatureHeader, err
	case "stripe":
		typ := "payout.updated"
		switch {
		case !known:
			typ = "payout.created"
		case po.Status == "paid":
			typ = "payout.paid"
		case po.Status == "failed":
			typ = "payout.failed"
		}
		raw, err := json.Marshal(po)
		if err != nil {
			return nil, "", err
		}
		var object map[string]any
		if err := json.Unmarshal(raw, &object); err != nil {
			return nil, "", err
		}
		body, err := stripe.WebhookBody("evt_fb"+strconv.FormatInt(eventNo, 10), typ, object)
		return body, stripe.SignatureHeader, err
	}
	return nil, "", nil
}

// dueAt is a moment at which payment seq may change status.
type dueAt struct {
	at  time.Time
	seq int64
}

// dueHeap orders the moments to come, earliest first.
type dueHeap []dueAt

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueAt)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
