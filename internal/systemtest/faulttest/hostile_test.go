package faulttest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/loadtest"
)

// hostileBodies are payloads at the HTTP level that intake's own tests do
// not send identically (theirs: intake/event_test.go badEvents, through
// DecodeEvent and the single-event handler). Each must be refused with a
// 4xx and write nothing.
func hostileBodies() []struct {
	name string
	body []byte
} {
	const valid = `"account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"b"`
	ev := func(prefix, suffix string) []byte {
		return []byte(`{"settlement_id":"hostile",` + prefix + valid + suffix + `}`)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(ev("", ""))
	_ = zw.Close()
	nestedValue := strings.Repeat(`{"a":`, 10000) + `1` + strings.Repeat(`}`, 10000)
	return []struct {
		name string
		body []byte
	}{
		{"raw NUL inside a string", []byte(`{"settlement_id":"hos` + "\x00" + `tile",` + valid + `}`)},
		{"raw NUL between tokens", []byte(`{"settlement_id":"hostile",` + "\x00" + valid + `}`)},
		{"only NUL bytes", bytes.Repeat([]byte{0}, 64)},
		{"invalid UTF-8 in a key", ev("", `,"`+"\xff\xfe"+`":1`)},
		{"overlong UTF-8 in a value", []byte(`{"settlement_id":"hostile","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"` + "\xc0\xaf" + `"}`)},
		{"UTF-16 body", utf16(string(ev("", "")))},
		{"deeply nested body", []byte(strings.Repeat("[", 100000) + strings.Repeat("]", 100000))[:60000]},
		{"deeply nested unknown field", ev("", `,"memo":`+nestedValue)},
		{"duplicate event_id", ev("", `,"event_id":"x","event_id":"y"`)},
		{"duplicate currency", ev("", `,"currency":"USD"`)},
		{"duplicate key with an escape", ev("", `,"curr\u0065ncy":"USD"`)},
		{"huge amount", []byte(`{"settlement_id":"hostile","account_id":"a","amount_cents":` + strings.Repeat("7", 60000) + `,"currency":"EUR","beneficiary":"b"}`)},
		{"huge exponent", []byte(`{"settlement_id":"hostile","account_id":"a","amount_cents":1e999999999,"currency":"EUR","beneficiary":"b"}`)},
		{"huge negative", []byte(`{"settlement_id":"hostile","account_id":"a","amount_cents":-` + strings.Repeat("9", 60000) + `,"currency":"EUR","beneficiary":"b"}`)},
		{"gzip body", gz.Bytes()},
	}
}

// utf16 encodes s (ASCII) as UTF-16LE with a byte order mark.
func utf16(s string) []byte {
	out := []byte{0xff, 0xfe}
	for i := 0; i < len(s); i++ {
		out = append(out, s[i], 0)
	}
	return out
}

// TestHostileHTTP attacks a real `settle worker` listener: slow-header and
// slow-body clients are cut off by the server's timeouts, oversized headers
// get 431, hostile bodies (raw NUL bytes, invalid UTF-8, deep nesting,
// duplicate keys, huge numbers, gzip, UTF-16, an endless chunked body) a 4xx
// problem on both the single and the batch endpoint; nothing is written,
// and the worker's goroutines come back to their baseline afterwards.
func TestHostileHTTP(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	bank := startBank(t, 17, fakebank.Faults{})
	w := startWorker(t, "w-hostile", db.URL, workerproc.FastFlags(bank.URL)...)
	ctx := deadline(t, 3*time.Minute)
	if code := get(t, w.URL()+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz answered %d", code)
	}
	base, err := loadtest.ScrapeMetrics(ctx, w.URL())
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(w.URL(), "http://")

	var wg sync.WaitGroup
	// Slow clients run alongside the rest.
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slowHeaders(t, ctx, addr, i)
		}()
	}
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slowBody(t, ctx, addr, i)
		}()
	}

	t.Run("oversized headers", func(t *testing.T) {
		for name, header := range map[string]string{
			"one big header":     "X-Big: " + strings.Repeat("a", 100<<10) + "\r\n",
			"many small headers": strings.Repeat("X-Small: a\r\n", 10000),
		} {
			body := `{"settlement_id":"big-header","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"b"}`
			req := fmt.Sprintf("POST /v1/settlements HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s", len(body), header, body)
			if status := rawRequest(t, addr, req); status != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("%s: status %d, want 431", name, status)
			}
		}
	})

	t.Run("bodies", func(t *testing.T) {
		for _, tc := range hostileBodies() {
			status, header, body := post(t, w.URL()+"/v1/settlements", tc.body)
			if status < 400 || status > 499 || header.Get("Content-Type") != "application/problem+json" || !isProblem(body, status) {
				t.Errorf("single %s: %d %s %.200s", tc.name, status, header.Get("Content-Type"), body)
			}
			// The batch endpoint: the whole batch refused, or every item.
			status, header, body = post(t, w.URL()+"/v1/settlements/batch", tc.body)
			if !batchRefused(status, header, body) {
				t.Errorf("batch %s: %d %.300s", tc.name, status, body)
			}
			arr := append(append([]byte("["), tc.body...), ']')
			status, header, body = post(t, w.URL()+"/v1/settlements/batch", arr)
			if !batchRefused(status, header, body) {
				t.Errorf("batch array %s: %d %.300s", tc.name, status, body)
			}
		}
	})

	t.Run("endless chunked body", func(t *testing.T) {
		for _, path := range []string{"/v1/settlements", "/v1/settlements/batch"} {
			// A body with no Content-Length that never ends: refused once
			// it passes the limit, without reading on.
			pr, pw := io.Pipe()
			go func() {
				chunk := bytes.Repeat([]byte(" "), 4096)
				_, _ = pw.Write([]byte(`{"settlement_id":"endless","memo":"`))
				for {
					if _, err := pw.Write(chunk); err != nil {
						return
					}
				}
			}()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL()+path, pr)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			pw.CloseWithError(io.ErrClosedPipe)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !isProblem(b, resp.StatusCode) {
				t.Errorf("%s: %d %.200s", path, resp.StatusCode, b)
			}
		}
	})

	wg.Wait()
	var written int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM settlements) + (SELECT count(*) FROM settlement_receipts)
		+ (SELECT count(*) FROM receipt_conflicts) + (SELECT count(*) FROM river_job WHERE kind = 'send_instruction')`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	if written != 0 {
		t.Errorf("hostile requests wrote %d rows", written)
	}
	http.DefaultClient.CloseIdleConnections()
	waitGoroutines(t, ctx, w, base.Goroutines)
	if bank.Counts().Total() != 0 {
		t.Errorf("hostile requests reached the bank: %+v", bank.Counts())
	}
}

// slowHeaders sends a request's headers one line every 500ms and never
// finishes them; the server must close the connection (ReadHeaderTimeout)
// long before the client gives up.
func slowHeaders(t *testing.T, ctx context.Context, addr string, i int) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn)
		close(closed)
	}()
	if _, err := fmt.Fprintf(conn, "POST /v1/settlements HTTP/1.1\r\nHost: slow-%d\r\n", i); err != nil {
		t.Error(err)
		return
	}
	start := time.Now()
	giveUp := time.After(2 * time.Minute)
	for n := 0; ; n++ {
		select {
		case <-closed:
			if i == 0 {
				t.Logf("slow-header client cut off after %s, %d header lines", time.Since(start).Round(time.Millisecond), n)
			}
			return
		case <-giveUp:
			t.Errorf("slow-header client %d still connected after %d header lines", i, n)
			return
		case <-ctx.Done():
			t.Errorf("slow-header client %d: %v", i, ctx.Err())
			return
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := fmt.Fprintf(conn, "X-Slow-%d: y\r\n", n); err != nil {
			return // closed by the server
		}
	}
}

// slowBody sends complete headers and then the body one byte every 500ms;
// the server must end the request (ReadTimeout) before the body is
// complete, with no 2xx and nothing written.
func slowBody(t *testing.T, ctx context.Context, addr string, i int) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	body := fmt.Sprintf(`{"settlement_id":"slow-body-%d","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"b"}`, i)
	body += strings.Repeat(" ", 1000-len(body)) // 1000 bytes: 500 s at this pace
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(conn).ReadString('\n')
		answer <- line
	}()
	if _, err := fmt.Fprintf(conn, "POST /v1/settlements HTTP/1.1\r\nHost: slow\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body)); err != nil {
		t.Error(err)
		return
	}
	start := time.Now()
	for n := 0; n < len(body); n++ {
		select {
		case line := <-answer:
			if i == 0 {
				t.Logf("slow-body client cut off after %s, %d of %d body bytes: %q", time.Since(start).Round(time.Millisecond), n, len(body), strings.TrimSpace(line))
			}
			if strings.HasPrefix(line, "HTTP/1.1 2") {
				t.Errorf("slow-body client %d: accepted: %q", i, line)
			}
			return
		case <-ctx.Done():
			t.Errorf("slow-body client %d: %v", i, ctx.Err())
			return
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := conn.Write([]byte{body[n]}); err != nil {
			return // closed by the server
		}
	}
	t.Errorf("slow-body client %d sent its whole body at one byte every 500ms", i)
}

// rawRequest writes req on a new connection and returns the status of the
// answer (0 when the connection closed without one).
func rawRequest(t *testing.T, addr, req string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	go func() { _, _ = io.WriteString(conn, req) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func post(t *testing.T, url string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, b
}

// isProblem reports whether body is an RFC 9457 problem with status.
func isProblem(body []byte, status int) bool {
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	return json.Unmarshal(body, &p) == nil && p.Type != "" && p.Title != "" && p.Status == status
}

// batchRefused reports whether a batch answer refused everything: a 4xx
// problem, or a 200 whose every result is a 4xx.
func batchRefused(status int, header http.Header, body []byte) bool {
	if status >= 400 && status <= 499 {
		return header.Get("Content-Type") == "application/problem+json" && isProblem(body, status)
	}
	if status != http.StatusOK {
		return false
	}
	var r struct {
		Results []struct {
			Status int `json:"status"`
		} `json:"results"`
	}
	if json.Unmarshal(body, &r) != nil || len(r.Results) == 0 {
		return false
	}
	for _, it := range r.Results {
		if it.Status < 400 || it.Status > 499 {
			return false
		}
	}
	return true
}
