// Package browsertest drives a real headless Chromium (Debian's chromium
// package) for a test, through chromedp: one browser per test, started on
// first use with a fresh profile in the test's temporary directory, killed
// when the test ends. It records every console error and uncaught
// exception of the pages, and saves screenshots.
//
// When no Chromium is installed the test is skipped, unless CI=true, where
// a missing browser is a failure (.ci/run installs it). It is test
// support: nothing in settle's binaries may import it.
package browsertest

import (
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// executables are the names Chromium goes by, Debian's first.
var executables = []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// Find returns the path of the Chromium to use: $SETTLE_CHROMIUM if set,
// else the first of the usual names on $PATH. It skips t when there is
// none, or fails it when CI=true.
func Find(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SETTLE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range executables {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("browsertest: no Chromium found (%s); CI must install Debian's chromium package", strings.Join(executables, ", "))
	}
	t.Skipf("browsertest: no Chromium found (%s); install Debian's chromium package to run browser tests", strings.Join(executables, ", "))
	return ""
}

// Browser is one headless Chromium with one tab.
type Browser struct {
	// Ctx is the tab's chromedp context: pass it to chromedp.Do and Run.
	Ctx context.Context
	t   testing.TB

	mu       sync.Mutex
	problems []string
}

// Options configure a Browser.
type Options struct {
	// Width and Height are the window's size (default 1280 × 900).
	Width, Height int
}

// New starts a headless Chromium for t, with the flags this machine needs
// as root with no network (no sandbox, no GPU, no QUIC, no background
// networking, no component updates, no sync) and a fresh profile. The
// browser is killed and its profile removed when t ends.
func New(t testing.TB, o Options) *Browser {
	t.Helper()
	exe := Find(t)
	if o.Width == 0 {
		o.Width, o.Height = 1280, 900
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium-profile")),
		chromedp.WindowSize(o.Width, o.Height),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b := &Browser{Ctx: ctx, t: t}
	t.Cleanup(func() {
		cancel()      // closes the tab and the browser
		cancelAlloc() // kills the process if need be and waits for it
	})
	// Start the browser and subscribe to the console before any page.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("browsertest: error starting %s: %v", exe, err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.problems = append(b.problems, m.String()+" ("+m.URL+")")
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// Problems returns the console errors and uncaught exceptions seen since
// the last call, and forgets them.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

// SetHeaders makes the tab send these headers with every request, as a
// browser that remembered credentials would (chromedp cannot answer a
// Basic-auth prompt).
func (b *Browser) SetHeaders(h map[string]string) {
	b.t.Helper()
	hs := network.Headers{}
	for k, v := range h {
		hs[k] = v
	}
	if _, err := chromedp.Call(b.Ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: hs}); err != nil {
		b.t.Fatalf("browsertest: error setting headers: %v", err)
	}
}

// CancelSignIn makes the tab answer every HTTP authentication prompt as a
// person pressing Cancel would, so that a 401 with a Basic challenge loads
// as a page (headless Chromium cannot show the prompt and fails the load
// instead). Every request is intercepted and continued unchanged.
func (b *Browser) CancelSignIn() {
	b.t.Helper()
	paused := chromedp.Events(b.Ctx, fetch.RequestPaused)
	prompts := chromedp.Events(b.Ctx, fetch.AuthRequired)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(b.Ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		for ev, err := range prompts {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(b.Ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{
				RequestID:             ev.RequestID,
				AuthChallengeResponse: &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth},
			})
		}
	}()
	handle := true
	if _, err := chromedp.Call(b.Ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &handle}); err != nil {
		b.t.Fatalf("browsertest: error enabling the Fetch domain: %v", err)
	}
}

// BasicAuth returns the Authorization header value of HTTP Basic
// credentials.
func BasicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// Screenshot saves a full-page PNG of the tab as dir/name.png and returns
// its path.
func (b *Browser) Screenshot(dir, name string) string {
	b.t.Helper()
	png, err := chromedp.Run(b.Ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browsertest: screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return path
}
