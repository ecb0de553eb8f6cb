package failovertest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/hatest"
	"github.com/settle/settle/internal/testsupport/loadtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/internal/testsupport/workertest"
	"github.com/settle/settle/migrations"
)

var (
	failovers = flag.Int("failover.count", 2, "primaries to kill, one after the other (each after the previous one rejoined as the standby)")
	rate      = flag.Int("failover.rate", 40, "events a second the producer offers (redeliveries come on top)")
	logDir    = flag.String("failover.logs", "", "keep the logs of the formation's nodes and of the workers in this directory")
	watch     = flag.Bool("failover.watch", false, "log, every second, what the producer and the monitor see (for scripts/failover-demo.sh)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	bintest.Cleanup()
	os.Exit(code)
}

// between is how many events are acknowledged before the first failover,
// between two failovers, and after the last one.
const between = 100

// TestFailover streams events through two workers connected to a
// pg_auto_failover formation with a multi-host URL (target_session_attrs
// read-write) and kills the primary's machine mid-stream (SIGKILL for its
// pg_autoctl and every process of its PostgreSQL server); the monitor
// promotes the synchronous standby and the stream goes on through the same
// worker processes. The killed node then rejoins as the standby, and the
// next failover kills the new primary (-failover.count, default 2). While
// there is no primary, intake answers 503 with Retry-After (never a 500,
// never an acknowledgement) and /readyz says not ready; afterwards River's
// leader enqueues the periodic sweep again. At the end every event answered
// 201/200 is stored, every settlement is terminal with one movement if
// confirmed and none otherwise, and the bank paid each at most once. The
// test logs, per failover, the time without a primary and the 503 answers.
func TestFailover(t *testing.T) {
	t.Parallel()
	if *failovers < 1 || *failovers > 10 {
		t.Fatalf("-failover.count %d: want 1 to 10", *failovers)
	}
	f := hatest.StartT(t, hatest.Options{LogDir: *logDir})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	url := f.URL(hatest.DBName)
	t.Logf("workers connect to %s", url)
	pool := connect(t, url)
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	bank, err := loadtest.StartBank(20, fakebank.Faults{
		DropResponseRate: 0.05, StatusErrorRate: 0.05, LatencyMaxMS: 20, SettleDelayMS: 200,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bank.Close() })
	workers := []*workertest.Worker{
		workertest.StartT(t, "w1", url, nil, workerproc.FastFlags(bank.URL)...),
		workertest.StartT(t, "w2", url, nil, workerproc.FastFlags(bank.URL)...),
	}
	if *logDir != "" {
		t.Cleanup(func() {
			for _, w := range workers {
				if b, err := os.ReadFile(w.LogPath()); err == nil {
					_ = os.WriteFile(filepath.Join(*logDir, w.Name()+".log"), b, 0o644)
				}
			}
		})
	}
	p := &loadtest.Producer{URLs: func() []string { return []string{workers[0].URL(), workers[1].URL()} }}
	if *watch {
		defer watchProgress(t, f, p, workers)()
	}

	stream := newStream(ctx, p, *rate)
	var done []failover
	for round := range *failovers {
		stream.waitAcked(t, between)
		// The first failover catches commits in flight: replication is
		// paused, so they wait for the standby after committing on the
		// primary, which then dies. Their clients must get a 503, a
		// redelivery meanwhile must not get a 200, and the promoted standby
		// must not have those transactions.
		fo := failOver(t, ctx, f, p, workers, round == 0)
		t.Logf("failover %d: %s", round+1, fo)
		done = append(done, fo)
		if round < *failovers-1 {
			old := f.Node(fo.killed)
			t.Logf("restarting %s: it rejoins as the standby of %s", old.Name, fo.promoted)
			rejoin := time.Now()
			if err := old.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WaitSecondary(ctx, old); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s is the synchronous standby again after %s", old.Name, time.Since(rejoin).Round(10*time.Millisecond))
		}
	}
	stream.waitAcked(t, between)
	n, err := stream.stop()
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	n++ // the in-flight probe of the first failover
	t.Logf("stream stopped; waiting until every settlement (%d) is terminal", n)
	if err := loadtest.WaitTerminal(ctx, pool, n); err != nil {
		t.Fatal(err)
	}
	// River's leader (elected again after the failovers) enqueues the
	// periodic sweep on the new primary.
	last := done[len(done)-1].writableAt
	settletest.Wait(t, "a sweep enqueued by River's leader after the last failover", func() (bool, string) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'sweep' AND state = 'completed' AND created_at > $1`, last).Scan(&n)
		return err == nil && n > 0, fmt.Sprintf("%d sweeps completed since (%v)", n, err)
	})
	for _, w := range workers {
		if !w.Alive() {
			t.Fatalf("%s exited instead of reconnecting", w.Name())
		}
	}

	st := p.Stats()
	for _, u := range st.Unexpected {
		t.Errorf("unexpected answer: %s", u)
	}
	if st.NoRetryAfter > 0 {
		t.Errorf("%d answers 503/429 without Retry-After", st.NoRetryAfter)
	}
	for code, c := range st.ByStatus {
		if code >= 500 && code != http.StatusServiceUnavailable {
			t.Errorf("%d answers %d", c, code)
		}
	}
	acked := p.Acked()
	for _, fo := range done {
		maps.Copy(acked, fo.acked)
	}
	lost := lostEvents(t, ctx, pool, acked)
	if lost != 0 {
		t.Errorf("%d acknowledged events are not stored", lost)
	}
	v, err := loadtest.CheckInvariants(ctx, pool, bank, acked)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range v {
		t.Error(s)
	}
	counts, _ := loadtest.StateCounts(ctx, pool)
	var commitsLost int
	for _, w := range workers {
		commitsLost += lostCommits(w.LogPath())
	}
	for i, fo := range done {
		t.Logf("failover %d: %s", i+1, fo)
	}
	t.Logf("%d events, %d acknowledged, %d acknowledged events lost, %d invariant violations; intake commits whose answer was lost: %d; answers %v, connection errors %d, redeliveries %d; states %v; bank %+v",
		n, len(acked), lost, len(v), commitsLost, st.ByStatus, st.ConnErrors, st.Redeliveries, counts, bank.Counts())
}

// failover is what one failover looked like from outside.
type failover struct {
	killed, promoted string
	// promotedAfter is the time from the kill until the monitor had a new
	// primary; window the time until a transaction could commit through the
	// multi-host URL again: the time without a primary.
	promotedAfter, window time.Duration
	writableAt            time.Time
	// waiting counts the commits of the workers that had committed on the
	// primary and waited for the standby when it was killed.
	waiting int
	// acked holds what was acknowledged outside the stream (the in-flight
	// probe, delivered again after the failover).
	acked map[string]int64
	// unavailable counts the 503 answers the producer got from the kill
	// until the stream acknowledged events again.
	unavailable int
}

func (f failover) String() string {
	s := fmt.Sprintf("%s killed, %s promoted after %s; without a primary for %s; 503 answers %d",
		f.killed, f.promoted, f.promotedAfter.Round(10*time.Millisecond), f.window.Round(10*time.Millisecond), f.unavailable)
	if f.waiting > 0 {
		s += fmt.Sprintf("; %d commits in flight, waiting for the standby, when killed", f.waiting)
	}
	return s
}

// failOver kills the primary's machine, checks what the workers answer
// while there is none, and returns once the stream acknowledges events
// again.
//
// With inFlight, it first pauses replication from the primary and waits
// until commits of the workers wait for the standby, committed on the
// primary only: the kill then loses them and their answers.
func failOver(t *testing.T, ctx context.Context, f *hatest.Formation, p *loadtest.Producer, workers []*workertest.Worker, inFlight bool) failover {
	t.Helper()
	primary, err := f.Primary(ctx)
	if err != nil || primary == nil {
		t.Fatalf("no primary to kill: %v", err)
	}
	fo := failover{killed: primary.Name}
	before := p.Stats().ByStatus[http.StatusServiceUnavailable]
	var probe *inFlightProbe
	if inFlight {
		resume, err := primary.PauseReplication(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer resume()
		probe = startInFlight(t, ctx, primary, workers)
		fo.waiting = syncWaiters(ctx, primary)
		t.Logf("replication from %s paused: %d commits of the workers wait there for the standby, a delivery of %s among them; it was delivered again meanwhile",
			primary.Name, fo.waiting, probe.ev.SettlementID)
	}

	// Watch /readyz from the kill until a primary is writable again.
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watched sync.WaitGroup
	notReady := make([]atomic.Bool, len(workers))
	for i, w := range workers {
		watched.Go(func() {
			for watchCtx.Err() == nil && !notReady[i].Load() {
				if readyz(watchCtx, w.URL()) == http.StatusServiceUnavailable {
					notReady[i].Store(true)
				}
				select {
				case <-watchCtx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}

	t.Logf("killing the primary %s: SIGKILL for its pg_autoctl and every process of its PostgreSQL server", primary.Name)
	killed := time.Now()
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	promoted, err := f.WaitPromoted(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	fo.promoted, fo.promotedAfter = promoted.Name, time.Since(killed)
	t.Logf("the monitor promoted %s after %s", promoted.Name, fo.promotedAfter.Round(10*time.Millisecond))
	if fo.writableAt, err = f.WaitWritable(ctx); err != nil {
		t.Fatal(err)
	}
	fo.window = fo.writableAt.Sub(killed)
	if probe != nil {
		probe.check(t, ctx, p)
		fo.acked = probe.acked
	}
	stopWatch()
	watched.Wait()
	for i, w := range workers {
		if !notReady[i].Load() {
			t.Errorf("%s: /readyz never answered 503 while there was no primary", w.Name())
		}
	}
	// The same worker processes serve again: ready, and acknowledging.
	for _, w := range workers {
		settletest.Wait(t, w.Name()+" /readyz after the failover", func() (bool, string) {
			code := readyz(ctx, w.URL())
			return code == http.StatusOK, fmt.Sprintf("answered %d", code)
		})
	}
	acked := len(p.Acked())
	settletest.Wait(t, "the stream acknowledging events after the failover", func() (bool, string) {
		n := len(p.Acked())
		return n >= acked+20, fmt.Sprintf("%d acknowledged since", n-acked)
	})
	fo.unavailable = p.Stats().ByStatus[http.StatusServiceUnavailable] - before
	return fo
}

// stream offers events to a producer at a steady rate until stopped, so
// that it runs through every failover however fast the machine is.
type stream struct {
	p      *loadtest.Producer
	cancel chan struct{}
	done   chan error
	sent   atomic.Int64
}

// newStream starts offering events at rate a second, in batches of a tenth
// of a second delivered four at a time.
func newStream(ctx context.Context, p *loadtest.Producer, rate int) *stream {
	s := &stream{p: p, cancel: make(chan struct{}), done: make(chan error, 1)}
	batch := max(rate/10, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i += batch {
			evs := make([]intake.Event, batch)
			for j := range evs {
				evs[j] = loadtest.NewEvent("ha", i+j)
			}
			if err := p.Stream(ctx, evs, 4); err != nil {
				s.done <- err
				return
			}
			s.sent.Add(int64(batch))
			select {
			case <-s.cancel:
				s.done <- nil
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// waitAcked waits until n more events are acknowledged.
func (s *stream) waitAcked(t *testing.T, n int) {
	t.Helper()
	want := len(s.p.Acked()) + n
	settletest.Wait(t, fmt.Sprintf("%d events acknowledged", want), func() (bool, string) {
		return len(s.p.Acked()) >= want, fmt.Sprintf("%d acknowledged", len(s.p.Acked()))
	})
}

// stop ends the stream once its current batch is acknowledged and returns
// how many events it offered.
func (s *stream) stop() (int, error) {
	close(s.cancel)
	err := <-s.done
	return int(s.sent.Load()), err
}

// watchProgress logs every second what the producer, the workers and the
// monitor see, until the returned function is called.
func watchProgress(t *testing.T, f *hatest.Formation, p *loadtest.Producer, workers []*workertest.Worker) func() {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			st := p.Stats()
			ready := make([]string, len(workers))
			for i, w := range workers {
				ready[i] = fmt.Sprintf("%s %d", w.Name(), readyz(ctx, w.URL()))
			}
			state := "monitor unreachable"
			if s, err := f.State(ctx); err == nil {
				state = s.String()
			}
			if ctx.Err() != nil {
				return // stopped meanwhile: what was read is not to be trusted
			}
			t.Logf("%5.1fs  acknowledged %4d  503 %3d  /readyz %s  |  %s",
				time.Since(start).Seconds(), len(p.Acked()), st.ByStatus[http.StatusServiceUnavailable], strings.Join(ready, ", "), state)
		}
	}()
	return func() { cancel(); <-done }
}

// lostEvents counts the acknowledged settlements that are not stored.
func lostEvents(t *testing.T, ctx context.Context, pool *pgxpool.Pool, acked map[string]int64) int {
	t.Helper()
	ids := make([]string, 0, len(acked))
	for id := range acked {
		ids = append(ids, id)
	}
	var lost int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]) AS a(id)
		WHERE NOT EXISTS (SELECT 1 FROM settlements s WHERE s.settlement_id = a.id)`, ids).Scan(&lost)
	if err != nil {
		t.Fatal(err)
	}
	return lost
}

// lostCommits counts, in a worker's log, the intake transactions whose
// COMMIT got no answer (their outcome was unknown; the producer's
// redelivery found the receipt or wrote it). For the report only.
func lostCommits(logPath string) int {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return 0
	}
	var n int
	for line := range bytes.Lines(b) {
		if bytes.Contains(line, []byte(`"msg":"intake: error"`)) && bytes.Contains(line, []byte("error committing: ")) {
			n++
		}
	}
	return n
}

// inFlightProbe is one event delivered, and redelivered, while the primary
// sends its standby nothing: both deliveries commit on the primary (the first
// writes the receipt, the second counts a replay of it) and wait there for
// the standby when the primary dies.
type inFlightProbe struct {
	ev      intake.Event
	answers [2]chan int
	// acked is the acknowledgement of the delivery after the failover.
	acked map[string]int64
}

// startInFlight delivers the probe event through the first worker, waits
// until its receipt is committed on primary (visible there, never sent to
// the standby), redelivers it through the second worker and
// waits until that replay's commit waits for the standby too.
func startInFlight(t *testing.T, ctx context.Context, primary *hatest.Node, workers []*workertest.Worker) *inFlightProbe {
	t.Helper()
	pr := &inFlightProbe{ev: loadtest.NewEvent("ha-inflight", 0), answers: [2]chan int{make(chan int, 1), make(chan int, 1)}}
	go func() {
		// While replication is paused the workers' pools fill with
		// commits waiting for the standby; a delivery that finds no
		// connection (or whose commit timed out before it was written)
		// is answered 503 with nothing stored, and the producer delivers
		// it again, as an at-least-once producer does, until one is
		// committed on the primary (and then waits there).
		for {
			code := post(ctx, workers[0].URL(), pr.ev)
			if n, err := count(ctx, primary, `SELECT count(*) FROM settlement_receipts WHERE settlement_id = $1`, pr.ev.SettlementID); code != http.StatusServiceUnavailable || err != nil || n > 0 || ctx.Err() != nil {
				pr.answers[0] <- code
				return
			}
		}
	}()
	settletest.Wait(t, pr.ev.SettlementID+" committed on "+primary.Name, func() (bool, string) {
		n, err := count(ctx, primary, `SELECT count(*) FROM settlement_receipts WHERE settlement_id = $1`, pr.ev.SettlementID)
		return n == 1, fmt.Sprintf("%d receipts (%v)", n, err)
	})
	// The stream's deliveries are stuck in their commits too, so a new
	// session that wrote settlement_receipts and waits is the redelivery,
	// or, when the workers' pools are full of commits that wait, one that
	// a timeout let through first (then the redelivery may die waiting
	// for a connection: a 503 just the same).
	const receiptWaiters = `SELECT count(*) FROM pg_stat_activity a
		WHERE a.wait_event = 'SyncRep' AND EXISTS (SELECT 1 FROM pg_locks l
			WHERE l.pid = a.pid AND l.relation = 'settlement_receipts'::regclass AND l.mode = 'RowExclusiveLock')`
	before, err := count(ctx, primary, receiptWaiters)
	if err != nil {
		t.Fatal(err)
	}
	go func() { pr.answers[1] <- post(ctx, workers[1].URL(), pr.ev) }()
	settletest.Wait(t, "the redelivery of "+pr.ev.SettlementID+" waiting for the standby", func() (bool, string) {
		n, err := count(ctx, primary, receiptWaiters)
		return n > before, fmt.Sprintf("%d sessions that wrote receipts wait, %d before (%v)", n, before, err)
	})
	return pr
}

// check, once a primary is writable again, requires 503 for both
// deliveries (the primary died before the standby had them) and a 201 for
// the next one: the promoted standby never had the receipt, and nobody was
// told otherwise.
func (pr *inFlightProbe) check(t *testing.T, ctx context.Context, p *loadtest.Producer) {
	t.Helper()
	for i, ch := range pr.answers {
		select {
		case code := <-ch:
			if code != http.StatusServiceUnavailable {
				t.Errorf("delivery %d of %s, in flight when the primary died: answered %d, want 503", i+1, pr.ev.SettlementID, code)
			}
		case <-ctx.Done():
			t.Fatalf("delivery %d of %s: no answer", i+1, pr.ev.SettlementID)
		}
	}
	// A producer of its own, so that the stream's answers do not mix in.
	pp := &loadtest.Producer{URLs: p.URLs}
	if err := pp.Deliver(ctx, pr.ev); err != nil {
		t.Fatal(err)
	}
	if st := pp.Stats(); st.ByStatus[http.StatusCreated] != 1 {
		t.Errorf("%s after the failover: answered %v, not created anew, so the promoted standby had a receipt whose commit was never confirmed", pr.ev.SettlementID, st.ByStatus)
	}
	pr.acked = pp.Acked()
}

// post delivers ev once to the worker at base and returns the status, or 0
// without an answer.
func post(ctx context.Context, base string, ev intake.Event) int {
	body, err := json.Marshal(ev)
	if err != nil {
		return 0
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/settlements", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// count runs a count query on node n alone.
func count(ctx context.Context, n *hatest.Node, sql string, args ...any) (int, error) {
	conn, err := pgx.Connect(ctx, n.URL(hatest.DBName))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var c int
	err = conn.QueryRow(ctx, sql, args...).Scan(&c)
	return c, err
}

// syncWaiters counts the workers' sessions on node n that wait for a
// synchronous standby to acknowledge their commit (0 when n cannot say).
func syncWaiters(ctx context.Context, n *hatest.Node) int {
	c, _ := count(ctx, n, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND application_name = 'settle-worker'`)
	return c
}

// connect opens a pool to url, closed when the test ends.
func connect(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := database.Connect(t.Context(), url, database.PoolOptions{MaxConns: 4, ApplicationName: "failovertest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// readyz returns the status of GET base/readyz, or 0 without an answer.
func readyz(ctx context.Context, base string) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
