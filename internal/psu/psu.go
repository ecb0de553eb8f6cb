// Package psu is an account holder (Open Banking's PSU) for demos and
// tests: it reads the console's list of payments awaiting the account
// holder's authorisation (/console/authorisations) and opens each link,
// following the redirects through their bank's page back to the console's
// redirect endpoint, as an account holder who clicks the link they were
// sent does. With the fakebank's automatic account holder (its page
// decides by itself consent_delay_ms after the consent was created), no
// human is needed.
//
// It only reads the console and opens links: it never touches the
// database or the bank's admin API, and what it does is what a browser
// does. A link still listed a while after it was opened (the redirect
// was lost, the worker died, the bank's token answer was lost) is opened
// again.
package psu

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
)

// Holder is the account holder of every payment the console lists.
type Holder struct {
	// Console returns the console's base URL (scheme://host:port); it is
	// asked before every read, so that it may follow a restarted worker.
	Console func() string
	// Operator and Token are the console's HTTP Basic credentials (empty:
	// an open console).
	Operator, Token string
	// Every is the pause between two reads of the list (default 100 ms).
	Every time.Duration
	// Again is how long after opening a link it is opened again while
	// still listed (default 2 s).
	Again time.Duration
	// Logf, when set, receives one line per link opened.
	Logf func(format string, args ...any)

	opened   atomic.Int64
	answered atomic.Int64
}

// linkRE finds the links of the console's list.
var linkRE = regexp.MustCompile(`class="authorise-link" href="([^"]+)"`)

// Opened is how many times a link was opened; Answered how many of those
// ended on the console's page with 200.
func (h *Holder) Opened() int64   { return h.opened.Load() }
func (h *Holder) Answered() int64 { return h.answered.Load() }

// Run reads the list and opens the links until ctx ends; it returns once
// every link it opened is done with.
func (h *Holder) Run(ctx context.Context) {
	every, again := h.Every, h.Again
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	if again <= 0 {
		again = 2 * time.Second
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	browser := &http.Client{Transport: tr, Timeout: time.Minute}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		last = map[string]time.Time{} // link → when it was last opened
	)
	defer wg.Wait()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		links, err := h.read(ctx, browser)
		if err != nil && h.Logf != nil && ctx.Err() == nil {
			h.Logf("psu: reading the console: %v", err)
		}
		now := time.Now()
		for _, l := range links {
			mu.Lock()
			at, seen := last[l]
			due := !seen || now.Sub(at) >= again
			if due {
				last[l] = now
			}
			mu.Unlock()
			if !due {
				continue
			}
			wg.Go(func() {
				h.opened.Add(1)
				status, err := open(ctx, browser, l)
				if status == http.StatusOK {
					h.answered.Add(1)
				}
				if h.Logf != nil && ctx.Err() == nil {
					h.Logf("psu: opened an authorisation link: %d %v", status, err)
				}
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// read returns the links the console lists.
func (h *Holder) read(ctx context.Context, c *http.Client) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.Console()+"/console/authorisations", nil)
	if err != nil {
		return nil, err
	}
	if h.Token != "" {
		req.SetBasicAuth(h.Operator, h.Token)
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the console answered %d", res.StatusCode)
	}
	var links []string
	for _, m := range linkRE.FindAllSubmatch(body, -1) {
		links = append(links, html.UnescapeString(string(m[1])))
	}
	return links, nil
}

// open follows a link to the end of its redirects and returns the last
// status.
func open(ctx context.Context, c *http.Client, link string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
	if err != nil {
		return 0, err
	}
	res, err := c.Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return 0, nil
		}
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, nil
}

// Start runs h in the background until the returned stop is called; stop
// returns once Run has.
func Start(h *Holder) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
