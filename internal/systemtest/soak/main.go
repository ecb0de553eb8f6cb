// Command soak runs settle under a steady load for a long time and fails
// when a resource grows without bound or an invariant breaks. It is run by
// scripts/soak.sh, never by `go test`.
//
// It starts a private PostgreSQL cluster, a fakebank with faults (in
// process, behind faulttest's counting front), two `settle worker`
// processes, and a producer that delivers a steady stream of events (some
// of them twice, as a redelivering queue would) at --rate per second. Every
// --sample it records, per worker, goroutines, RSS, open file descriptors
// (from the worker's /metrics) and OS threads (/proc/PID/status), and for
// the database the connections in pg_stat_activity and River's queue depth
// (jobs available, scheduled or retryable). After --duration it stops the
// stream, waits for every settlement to end terminal, checks the invariants
// (loadtest.CheckInvariants), and compares each series' mean over the last
// third of the run with its mean over the first third (the first tenth is
// warm-up and ignored): a growth beyond --tolerance (relative) plus a small
// absolute slack per series fails the run.
//
// It owns nothing the engine uses; it must leave no process or cluster
// behind (the cluster's watchdog removes it even if soak is killed). Its
// pool is database.Connect's on the URL of the private cluster it started:
// that URL is given, so there is nothing for database.Open to decide.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/loadtest"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	bin       string
	duration  time.Duration
	rate      float64
	sample    time.Duration
	tolerance float64
	drain     time.Duration
	jsonOut   string
}

// sample is one measurement of the whole system.
type sample struct {
	At      time.Duration             `json:"at_ns"`
	Workers []loadtest.ProcessMetrics `json:"workers"`
	DBConns float64                   `json:"db_connections"`
	Queue   float64                   `json:"queue_depth"`
	States  map[string]int            `json:"states"`
	Acked   int                       `json:"acked"`
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.bin, "bin", "", "path of the settle binary (required)")
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the stream runs")
	fs.Float64Var(&o.rate, "rate", 20, "events per second")
	fs.DurationVar(&o.sample, "sample", 10*time.Second, "time between samples")
	fs.Float64Var(&o.tolerance, "tolerance", 0.25, "allowed relative growth of a series' mean, last third over first third")
	fs.DurationVar(&o.drain, "drain", 5*time.Minute, "how long to wait for every settlement to end terminal after the stream")
	fs.StringVar(&o.jsonOut, "json", "", "write the samples and the verdict as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.bin == "" {
		fmt.Fprintln(stderr, "soak: --bin is required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	problems, err := soak(ctx, o, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 2
	}
	if len(problems) > 0 {
		fmt.Fprintln(stdout, "soak: FAILED")
		for _, p := range problems {
			fmt.Fprintln(stdout, "  "+p)
		}
		return 1
	}
	fmt.Fprintln(stdout, "soak: PASSED")
	return 0
}

func soak(ctx context.Context, o options, out io.Writer) (problems []string, err error) {
	logf := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	cluster, err := loadtest.StartCluster(ctx)
	if err != nil {
		return nil, err
	}
	defer cluster.Close()
	bank, err := loadtest.StartBank(1, fakebank.Faults{
		FailBeforeRate: 0.05, DropResponseRate: 0.10, StatusErrorRate: 0.10,
		SettlementFailureRate: 0.02, LatencyMinMS: 0, LatencyMaxMS: 30, SettleDelayMS: 300,
	})
	if err != nil {
		return nil, err
	}
	defer bank.Close()
	logDir, err := os.MkdirTemp("", "settle-soak-logs-")
	if err != nil {
		return nil, err
	}
	logf("soak: %s at %.0f events/s, two workers, bank with faults; worker logs in %s", o.duration, o.rate, logDir)
	var workers []*workerproc.Proc
	defer func() {
		for _, w := range workers {
			_ = w.Stop(10 * time.Second)
		}
	}()
	for i := range 2 {
		name := fmt.Sprintf("w%d", i)
		w, err := workerproc.Start(ctx, workerproc.Options{
			Executable:    o.bin,
			Name:          name,
			DatabaseURL:   cluster.URL,
			LogPath:       filepath.Join(logDir, name+".log"),
			Args:          append(workerproc.FastFlags(bank.URL), "--log-level", "warn"),
			DieWithParent: true,
		})
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	pool, err := database.Connect(ctx, cluster.URL, database.PoolOptions{MaxConns: 2, ApplicationName: "soak"})
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	p := &loadtest.Producer{URLs: func() []string {
		return []string{workers[0].URL(), workers[1].URL()}
	}}
	start := time.Now()
	streamCtx, stopStream := context.WithTimeout(ctx, o.duration)
	defer stopStream()
	streamErr := make(chan error, 1)
	go func() { streamErr <- stream(streamCtx, p, o.rate) }()

	var samples []sample
	tick := time.NewTicker(o.sample)
	defer tick.Stop()
	for sampling := true; sampling; {
		select {
		case <-streamCtx.Done():
			sampling = false
		case <-tick.C:
			s, err := measure(ctx, pool, workers, p)
			if err != nil {
				problems = append(problems, fmt.Sprintf("sample at %s: %v", time.Since(start).Round(time.Second), err))
				continue
			}
			s.At = time.Since(start).Round(time.Second)
			samples = append(samples, s)
			logf("%s", s.line())
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := <-streamErr; err != nil {
		problems = append(problems, "stream: "+err.Error())
	}
	acked := p.Acked()
	logf("soak: stream over: %d settlements acknowledged; waiting for every one to end terminal", len(acked))
	dctx, cancel := context.WithTimeout(ctx, o.drain)
	defer cancel()
	if err := loadtest.WaitTerminal(dctx, pool, len(acked)); err != nil {
		problems = append(problems, "drain: "+err.Error())
	}
	for _, w := range workers {
		if !w.Alive() {
			problems = append(problems, w.Name()+" exited during the run:\n"+workerproc.Tail(w.LogPath(), 20))
		}
	}
	violations, err := loadtest.CheckInvariants(ctx, pool, bank, acked)
	if err != nil {
		return nil, err
	}
	problems = append(problems, violations...)
	st := p.Stats()
	for _, u := range st.Unexpected {
		problems = append(problems, "unexpected answer: "+u)
	}
	states, _ := loadtest.StateCounts(ctx, pool)
	logf("soak: producer answers %v, connection errors %d, redeliveries %d; states %v; bank %+v %+v",
		st.ByStatus, st.ConnErrors, st.Redeliveries, states, bank.Stats(), bank.Counts())
	growth, report := growthProblems(samples, o.tolerance)
	logf("%s", report)
	problems = append(problems, growth...)
	if o.jsonOut != "" {
		data, _ := json.MarshalIndent(map[string]any{"samples": samples, "problems": problems, "states": states}, "", "  ")
		if err := os.WriteFile(o.jsonOut, data, 0o644); err != nil {
			return nil, err
		}
	}
	return problems, nil
}

// stream delivers events at rate per second until ctx ends; one in ten is
// delivered a second time a little later (another event id, the same
// business payload), as a queue redelivers after a lost acknowledgement.
func stream(ctx context.Context, p *loadtest.Producer, rate float64) error {
	interval := time.Duration(float64(time.Second) / rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	sem := make(chan struct{}, 32)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	deliver := func(ev intake.Event) {
		defer wg.Done()
		defer func() { <-sem }()
		// The stream ending is not the event's failure: give it time.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := p.Deliver(dctx, ev); err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
	}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return firstErr
		case <-tick.C:
		}
		evs := []intake.Event{loadtest.NewEvent("soak", i)}
		if i >= 50 && i%10 == 0 {
			dup := loadtest.NewEvent("soak", i-50)
			dup.EventID += "-again"
			evs = append(evs, dup)
		}
		for _, ev := range evs {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				wg.Wait()
				return firstErr
			}
			wg.Add(1)
			go deliver(ev)
		}
	}
}

// measure takes one sample.
func measure(ctx context.Context, pool *pgxpool.Pool, workers []*workerproc.Proc, p *loadtest.Producer) (sample, error) {
	var s sample
	for _, w := range workers {
		m, err := loadtest.ScrapeMetrics(ctx, w.URL())
		if err != nil {
			return s, fmt.Errorf("%s: %w", w.Name(), err)
		}
		if th, err := procThreads(w.PID()); err == nil {
			m.Threads = th
		}
		s.Workers = append(s.Workers, m)
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.QueryRow(qctx, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()),
		(SELECT count(*) FROM river_job WHERE state IN ('available', 'scheduled', 'retryable'))`).Scan(&s.DBConns, &s.Queue); err != nil {
		return s, err
	}
	states, err := loadtest.StateCounts(qctx, pool)
	if err != nil {
		return s, err
	}
	s.States = states
	s.Acked = len(p.Acked())
	return s, nil
}

// procThreads reads the Threads line of /proc/PID/status.
func procThreads(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no Threads in /proc/%d/status", pid)
}

func (s sample) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6s acked=%d", s.At, s.Acked)
	for i, w := range s.Workers {
		fmt.Fprintf(&b, " | w%d goroutines=%.0f rss=%.1fMiB fds=%.0f threads=%.0f", i, w.Goroutines, w.RSSBytes/(1<<20), w.OpenFDs, w.Threads)
	}
	open := 0
	for st, n := range s.States {
		if st != "confirmed" && st != "failed" {
			open += n
		}
	}
	fmt.Fprintf(&b, " | db_conns=%.0f queue=%.0f open=%d", s.DBConns, s.Queue, open)
	return b.String()
}

// series are the measured quantities with the absolute slack each may grow
// by on top of the relative tolerance (noise at low values).
var series = []struct {
	name  string
	slack float64
	get   func(s sample) []float64
}{
	{"goroutines", 20, func(s sample) []float64 {
		return perWorker(s, func(m loadtest.ProcessMetrics) float64 { return m.Goroutines })
	}},
	{"rss_mib", 16, func(s sample) []float64 {
		return perWorker(s, func(m loadtest.ProcessMetrics) float64 { return m.RSSBytes / (1 << 20) })
	}},
	{"open_fds", 10, func(s sample) []float64 {
		return perWorker(s, func(m loadtest.ProcessMetrics) float64 { return m.OpenFDs })
	}},
	{"threads", 4, func(s sample) []float64 {
		return perWorker(s, func(m loadtest.ProcessMetrics) float64 { return m.Threads })
	}},
	{"db_connections", 10, func(s sample) []float64 { return []float64{s.DBConns} }},
	{"queue_depth", 50, func(s sample) []float64 { return []float64{s.Queue} }},
}

func perWorker(s sample, f func(loadtest.ProcessMetrics) float64) []float64 {
	out := make([]float64, len(s.Workers))
	for i, m := range s.Workers {
		out[i] = f(m)
	}
	return out
}

// growthProblems compares, for every series (and every worker), the mean
// of the last third of the samples with the mean of the first third, the
// first tenth ignored as warm-up. It returns the series that grew beyond
// first·(1+tolerance)+slack, and a table of every series.
func growthProblems(samples []sample, tolerance float64) ([]string, string) {
	skip := len(samples) / 10
	use := samples[skip:]
	if len(use) < 6 {
		return []string{fmt.Sprintf("only %d samples: run longer or sample more often", len(use))}, ""
	}
	third := len(use) / 3
	first, last := use[:third], use[len(use)-third:]
	var problems []string
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %d samples (first %d ignored); mean of the first third -> mean of the last third (max):\n", len(samples), skip)
	for _, sr := range series {
		n := len(sr.get(use[0]))
		for k := range n {
			label := sr.name
			if n > 1 {
				label = fmt.Sprintf("w%d %s", k, sr.name)
			}
			f, l, peak := mean(first, sr.get, k), mean(last, sr.get, k), 0.0
			for _, s := range samples {
				peak = max(peak, sr.get(s)[k])
			}
			limit := f*(1+tolerance) + sr.slack
			verdict := "ok"
			if l > limit {
				verdict = "GROWS"
				problems = append(problems, fmt.Sprintf("%s grows: %.1f -> %.1f (limit %.1f)", label, f, l, limit))
			}
			fmt.Fprintf(&b, "  %-20s %8.1f -> %8.1f  (max %8.1f, limit %8.1f) %s\n", label, f, l, peak, limit, verdict)
		}
	}
	return problems, strings.TrimRight(b.String(), "\n")
}

func mean(ss []sample, get func(sample) []float64, k int) float64 {
	var sum float64
	for _, s := range ss {
		sum += get(s)[k]
	}
	return sum / float64(len(ss))
}
