package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/settle/settle/intake"
)

// NewEvent returns event number i of a run named prefix.
func NewEvent(prefix string, i int) intake.Event {
	return intake.Event{
		SettlementID: fmt.Sprintf("%s-%06d", prefix, i),
		AccountID:    fmt.Sprintf("acc-%03d", i%37),
		AmountCents:  int64(100 + (i*7919)%1_000_000),
		Currency:     []string{"EUR", "USD", "GBP"}[i%3],
		Beneficiary:  fmt.Sprintf("bene-%06d", i),
		EventID:      fmt.Sprintf("%s-evt-%06d", prefix, i),
	}
}

// Producer delivers events at least once, as a queue consumer or a webhook
// sender does: it redelivers on 503 and 429 (after Retry-After, capped by
// MaxBackoff), on connection errors and on a missing answer, and stops at
// the first acknowledgement (201 or 200). It records every answer.
type Producer struct {
	// URLs returns the workers' base URLs; each delivery picks one.
	URLs func() []string
	// Client carries the requests; default a client with a 30 s timeout.
	Client *http.Client
	// MaxBackoff caps the wait before a redelivery (default 500ms).
	MaxBackoff time.Duration

	mu    sync.Mutex
	stats ProducerStats
	acked map[string]int64
}

// ProducerStats count what the producer saw.
type ProducerStats struct {
	// ByStatus counts answers by HTTP status.
	ByStatus map[int]int
	// ConnErrors counts requests that got no HTTP answer.
	ConnErrors int
	// NoRetryAfter counts 503 and 429 answers without a Retry-After header.
	NoRetryAfter int
	// Unexpected holds a sample of answers that are neither an
	// acknowledgement nor a reason to redeliver (a 500, a 4xx to a valid
	// event).
	Unexpected []string
	// Redeliveries counts deliveries after the first, over all events.
	Redeliveries int
}

// Acked returns the settlement ids acknowledged with 201 or 200, with the
// amount of the acknowledged payload.
func (p *Producer) Acked() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int64, len(p.acked))
	for k, v := range p.acked {
		out[k] = v
	}
	return out
}

// Stats returns a copy of the counts so far.
func (p *Producer) Stats() ProducerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.ByStatus = make(map[int]int, len(p.stats.ByStatus))
	for k, v := range p.stats.ByStatus {
		s.ByStatus[k] = v
	}
	s.Unexpected = append([]string(nil), p.stats.Unexpected...)
	return s
}

func (p *Producer) record(fn func(s *ProducerStats)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stats.ByStatus == nil {
		p.stats.ByStatus = make(map[int]int)
	}
	fn(&p.stats)
}

// Deliver posts ev until it is acknowledged. It returns an error when the
// API refuses it for good (an answer other than 201, 200, 503 or 429) or
// ctx ends first.
func (p *Producer) Deliver(ctx context.Context, ev intake.Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	client := p.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	maxBackoff := p.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 500 * time.Millisecond
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			p.record(func(s *ProducerStats) { s.Redeliveries++ })
		}
		urls := p.URLs()
		base := urls[rand.IntN(len(urls))]
		wait := maxBackoff / 4
		status, header, answer, err := postOnce(ctx, client, base+"/v1/settlements", body)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return fmt.Errorf("error delivering %s: %w", ev.SettlementID, ctx.Err())
			}
			p.record(func(s *ProducerStats) { s.ConnErrors++ })
		case status == http.StatusCreated || status == http.StatusOK:
			p.mu.Lock()
			if p.stats.ByStatus == nil {
				p.stats.ByStatus = make(map[int]int)
			}
			p.stats.ByStatus[status]++
			if p.acked == nil {
				p.acked = make(map[string]int64)
			}
			p.acked[ev.SettlementID] = ev.AmountCents
			p.mu.Unlock()
			return nil
		case status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests:
			ra, convErr := strconv.Atoi(header.Get("Retry-After"))
			p.record(func(s *ProducerStats) {
				s.ByStatus[status]++
				if convErr != nil || ra <= 0 {
					s.NoRetryAfter++
				}
			})
			if convErr == nil && ra > 0 {
				wait = min(time.Duration(ra)*time.Second, maxBackoff)
			}
		default:
			msg := fmt.Sprintf("%s: %d %s", ev.SettlementID, status, answer)
			p.record(func(s *ProducerStats) {
				s.ByStatus[status]++
				if len(s.Unexpected) < 20 {
					s.Unexpected = append(s.Unexpected, msg)
				}
			})
			return fmt.Errorf("event refused: %s", msg)
		}
		wait += time.Duration(rand.Int64N(int64(wait) + 1))
		select {
		case <-ctx.Done():
			return fmt.Errorf("error delivering %s: %w", ev.SettlementID, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Stream delivers events with concurrency deliveries at once, each
// goroutine taking the next event once its current one is acknowledged,
// and returns the first error (after the others finished or ctx ended).
func (p *Producer) Stream(ctx context.Context, events []intake.Event, concurrency int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan intake.Event)
	errs := make(chan error, concurrency)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range next {
				if err := p.Deliver(ctx, ev); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for _, ev := range events {
		select {
		case next <- ev:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

func postOnce(ctx context.Context, client *http.Client, url string, body []byte) (int, http.Header, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		// The answer was cut: the event may or may not be stored.
		return 0, nil, "", err
	}
	return resp.StatusCode, resp.Header, string(b), nil
}
