package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/settlecmd/workerproc"
)

// clockTicks is the kernel's USER_HZ, the unit of the CPU times in
// /proc/PID/stat: 100 on every Linux this runs on (sysconf(_SC_CLK_TCK) is
// not reachable from the standard library).
const clockTicks = 100

// procCPU returns the CPU seconds (user and system) process pid has used so
// far; with children, also those of its children it has waited for
// (cutime, cstime: the exited backends of a postmaster).
func procCPU(pid int, children bool) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its
	// closing parenthesis start with field 3, the state.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("error parsing /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// utime, stime, cutime, cstime are fields 14–17: f[11]–f[14].
	if len(f) < 15 {
		return 0, fmt.Errorf("error parsing /proc/%d/stat: %d fields", pid, len(f))
	}
	last := 12
	if children {
		last = 14
	}
	var ticks int64
	for k := 11; k <= last; k++ {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("error parsing /proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return float64(ticks) / clockTicks, nil
}

// procParent returns the parent process id of pid.
func procParent(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 2 {
		return 0, fmt.Errorf("error parsing /proc/%d/stat", pid)
	}
	return strconv.Atoi(f[1])
}

// serverCPU measures the CPU of a PostgreSQL server running on this
// machine: its postmaster and every process under it, the exited ones
// included (the postmaster reaps them, and the kernel adds their times to
// its cutime and cstime).
type serverCPU struct {
	postmaster int
}

// findServerCPU finds the postmaster of the server q is connected to, from
// the parent of q's backend. It returns nil when the server does not run
// on this machine (or its processes cannot be read): the CPU figures then
// stay 0.
func findServerCPU(ctx context.Context, q querier) *serverCPU {
	var backend int
	if err := q.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return nil
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", backend))
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres") {
		return nil
	}
	pm, err := procParent(backend)
	if err != nil || pm <= 1 {
		return nil
	}
	return &serverCPU{postmaster: pm}
}

// seconds returns the CPU seconds the server's processes have used so far.
func (s *serverCPU) seconds() (float64, error) {
	if s == nil {
		return 0, nil
	}
	total, err := procCPU(s.postmaster, true)
	if err != nil {
		return 0, err
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		if err != nil || pid == s.postmaster {
			continue
		}
		if ppid, err := procParent(pid); err != nil || ppid != s.postmaster {
			continue
		}
		if c, err := procCPU(pid, true); err == nil { // gone meanwhile: skipped
			total += c
		}
	}
	return total, nil
}

// costMark is the cost counters at one moment of an e2e run.
type costMark struct {
	walLSN    string
	walFPI    int64
	serverCPU float64
	workerCPU float64
	bankCalls int64
}

// readWAL returns the server's current WAL position and its full-page
// images written so far (pg_stat_wal).
func readWAL(ctx context.Context, q querier) (lsn string, fpi int64, err error) {
	err = q.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text, (SELECT wal_fpi FROM pg_stat_wal)").Scan(&lsn, &fpi)
	if err != nil {
		return "", 0, fmt.Errorf("error reading the WAL position: %w", err)
	}
	return lsn, fpi, nil
}

// walBytesSince returns the WAL bytes written since lsn.
func walBytesSince(ctx context.Context, q querier, lsn string) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", lsn).Scan(&n); err != nil {
		return 0, fmt.Errorf("error reading the WAL written: %w", err)
	}
	return n, nil
}

// confirmLatency returns the p50 and p99 of the time from receipt
// (settlement_receipts.received_at, the intake transaction's start) to the
// move to confirmed (its transition's at, the outcome transaction's start)
// over the settlements whose ids start with prefix.
func confirmLatency(ctx context.Context, q querier, prefix string) (p50, p99 time.Duration, err error) {
	var p50us, p99us float64
	err = q.QueryRow(ctx, `SELECT
			coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY d), 0),
			coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY d), 0)
		FROM (SELECT extract(epoch FROM t.at - r.received_at) * 1e6 AS d
			FROM settlement_transitions t JOIN settlement_receipts r USING (settlement_id)
			WHERE t.to_state = 'confirmed' AND t.settlement_id LIKE $1 || '-%') x`, prefix).Scan(&p50us, &p99us)
	if err != nil {
		return 0, 0, fmt.Errorf("error reading the latency from receipt to confirmed: %w", err)
	}
	return time.Duration(p50us) * time.Microsecond, time.Duration(p99us) * time.Microsecond, nil
}

// e2eCost is what one e2e run cost per settlement.
type e2eCost struct {
	// walBytes is the WAL written per settlement (pg_current_wal_lsn over
	// the run: every database of the server, the benchmark's own polls
	// included); walFPI the full-page images among it.
	walBytes, walFPI float64
	// bankCalls is the requests the bank received per settlement.
	bankCalls float64
	// workerCPU and serverCPU are CPU seconds per 1,000 settlements of the
	// worker process and of every PostgreSQL process (0 when the server
	// is not on this machine).
	workerCPU, serverCPU float64
	// p50 and p99 are the time from receipt to confirmed.
	p50, p99 time.Duration
}

// markCost reads the cost counters at the start of a run.
func markCost(ctx context.Context, q querier, server *serverCPU, w *workerproc.Proc, bank *fakebank.Bank) (costMark, error) {
	var m costMark
	var err error
	if m.walLSN, m.walFPI, err = readWAL(ctx, q); err != nil {
		return m, err
	}
	if m.serverCPU, err = server.seconds(); err != nil {
		return m, fmt.Errorf("error reading PostgreSQL's CPU time: %w", err)
	}
	if m.workerCPU, err = procCPU(w.PID(), false); err != nil {
		return m, fmt.Errorf("error reading the worker's CPU time: %w", err)
	}
	m.bankCalls = bank.Traffic().Requests
	return m, nil
}

// since returns the cost per settlement of n settlements from m to now;
// workerCPU is the worker's CPU seconds read before it stopped. It is read
// once the worker has stopped and its backends are gone.
func (m costMark) since(ctx context.Context, q querier, server *serverCPU, workerCPU float64, bank *fakebank.Bank, n int) (e2eCost, error) {
	var c e2eCost
	wal, err := walBytesSince(ctx, q, m.walLSN)
	if err != nil {
		return c, err
	}
	_, fpi, err := readWAL(ctx, q)
	if err != nil {
		return c, err
	}
	cpu, err := server.seconds()
	if err != nil {
		return c, fmt.Errorf("error reading PostgreSQL's CPU time: %w", err)
	}
	per := float64(n)
	c.walBytes = float64(wal) / per
	c.walFPI = float64(fpi-m.walFPI) / per
	c.bankCalls = float64(bank.Traffic().Requests-m.bankCalls) / per
	c.workerCPU = (workerCPU - m.workerCPU) * 1000 / per
	if server != nil {
		c.serverCPU = (cpu - m.serverCPU) * 1000 / per
	}
	return c, nil
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
