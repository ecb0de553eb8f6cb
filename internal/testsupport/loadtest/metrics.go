package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProcessMetrics are a process's resource figures as its /metrics reports
// them (the Go and process collectors).
type ProcessMetrics struct {
	Goroutines float64
	RSSBytes   float64
	OpenFDs    float64
	Threads    float64
}

// ScrapeMetrics reads go_goroutines, process_resident_memory_bytes,
// process_open_fds and go_threads from baseURL/metrics (a worker's URL).
func ScrapeMetrics(ctx context.Context, baseURL string) (ProcessMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return ProcessMetrics{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ProcessMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ProcessMetrics{}, fmt.Errorf("GET /metrics answered %d", resp.StatusCode)
	}
	var m ProcessMetrics
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "go_goroutines":
			dst = &m.Goroutines
		case "process_resident_memory_bytes":
			dst = &m.RSSBytes
		case "process_open_fds":
			dst = &m.OpenFDs
		case "go_threads":
			dst = &m.Threads
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return ProcessMetrics{}, fmt.Errorf("error parsing %s: %w", name, err)
		}
		*dst = v
		found++
	}
	if err := sc.Err(); err != nil {
		return ProcessMetrics{}, err
	}
	if found < 4 {
		return ProcessMetrics{}, errors.New("GET /metrics lacks the Go and process collectors")
	}
	return m, nil
}
