package demo

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
)

// workerFlags make the demo quick: short check intervals and sweeps, so a
// settlement left uncertain by a lost answer is resolved within seconds.
var workerFlags = []string{
	"--listen", "127.0.0.1:0",
	"--log-format", "json",
	"--check-interval", "200ms",
	"--max-check-interval", "2s",
	"--sweep-interval", "1s",
	"--fetch-poll-interval", "100ms",
	"--pending-grace", "5s",
	"--bank-timeout", "3s",
	// One request per bank call: a lost answer is not retried in the call
	// but becomes uncertain and is resolved by a status check, so the demo
	// shows the path that matters when money is in doubt.
	"--bank-attempts", "1",
}

// startWorker runs exe worker against dbURL and bankURL with the API token
// token, logging to logPath, with env added (the bank's credentials) and
// args after its own flags (the event source's), and
// waits until it listens. The worker keeps
// SETTLE_HOME and SETTLE_PG_BINDIR but none of the user's other SETTLE_*
// settings (worker flags, crash points, bank credentials), so the demo
// always runs the same way; it dies with the demo.
func startWorker(ctx context.Context, exe, dbURL, bankURL, bank, token, logPath string, env []string, args ...string) (*workerproc.Proc, error) {
	return workerproc.Start(ctx, workerproc.Options{
		Executable:    exe,
		Name:          "the worker",
		DatabaseURL:   dbURL,
		LogPath:       logPath,
		Env:           append([]string{"SETTLE_API_TOKEN=" + token}, env...),
		Args:          append(append([]string{"--bank", bank, "--bank-url", bankURL}, workerFlags...), args...),
		KeepSettleEnv: []string{"SETTLE_HOME", "SETTLE_PG_BINDIR"},
		DieWithParent: true,
	})
}

// killedWorker is a worker the crash point source.after_commit killed.
type killedWorker struct {
	*workerproc.Proc
	// committed counts the settlements it committed before it died: its
	// first batch.
	committed int
}

// killedAfterCommit starts a worker as startWorker does (its log
// worker-1.log in dir) that the crash point source.after_commit kills
// after it commits its first batch of events, before it acknowledges
// them, and returns it once it died so.
func (o Options) killedAfterCommit(ctx context.Context, pool *pgxpool.Pool, dbURL, bankURL, token, dir string, env []string, args ...string) (killedWorker, error) {
	p, err := startWorker(ctx, o.Executable, dbURL, bankURL, o.Bank, token, filepath.Join(dir, "worker-1.log"),
		append(append([]string{}, env...), "SETTLE_CRASH_AT="+crash.SourceAfterCommit), args...)
	if err != nil {
		return killedWorker{}, err
	}
	ps, err := p.Wait(2 * time.Minute)
	if err != nil {
		p.Kill()
		return killedWorker{}, fmt.Errorf("the first worker was to be killed after its first commit: %w (log %s)", err, p.LogPath())
	}
	if !workerproc.KilledBySIGKILL(ps) {
		p.Kill()
		return killedWorker{}, fmt.Errorf("the first worker was to be killed after its first commit, but it ended %v (log %s)", ps, p.LogPath())
	}
	w := killedWorker{Proc: p}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM settlements`).Scan(&w.committed); err != nil {
		return killedWorker{}, fmt.Errorf("error counting settlements: %w", err)
	}
	return w, nil
}

// workerStopTimeout is how long the worker has to stop gracefully before
// it is killed.
const workerStopTimeout = 20 * time.Second
