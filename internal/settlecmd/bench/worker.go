package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/settle/settle/internal/settlecmd/workerproc"
)

// workerAppName is the application_name of the worker's connections.
const workerAppName = "settle-worker"

// workerStopTimeout is how long the worker has to stop gracefully before
// it is killed.
const workerStopTimeout = 30 * time.Second

// startWorker starts cfg.WorkerCommand against dbURL and bankURL, its
// stderr in a temporary file, with env added to its environment, and
// returns once it accepts connections. It dies with the benchmark; the
// caller stops it with stopWorker.
func startWorker(ctx context.Context, cfg Config, dbURL, bankURL string, env ...string) (*workerproc.Proc, error) {
	args := cfg.WorkerCommand[1:]
	if len(args) > 0 && args[0] == "worker" {
		args = args[1:] // workerproc runs `settle worker` itself
	}
	args = append(slices.Clone(args), "--listen", "127.0.0.1:0", "--bank-url", bankURL, "--log-level", "warn", "--log-format", "json")
	if cfg.BankConcurrency > 0 {
		args = append(args, "--bank-concurrency", strconv.Itoa(cfg.BankConcurrency))
	}
	if cfg.WorkerPoolSize > 0 {
		args = append(args, "--db-max-conns", strconv.Itoa(cfg.WorkerPoolSize))
	}
	args = append(args, cfg.WorkerArgs...)
	if cfg.WorkerCPUProfile != "" {
		args = append(args, "--cpuprofile", cfg.WorkerCPUProfile)
	}
	logFile, err := os.CreateTemp("", "settle-bench-worker-*.log")
	if err != nil {
		return nil, fmt.Errorf("error creating the worker's log: %w", err)
	}
	_ = logFile.Close()
	return workerproc.Start(ctx, workerproc.Options{
		Executable:    cfg.WorkerCommand[0],
		Name:          "the worker",
		DatabaseURL:   dbURL,
		LogPath:       logFile.Name(),
		Args:          args,
		Env:           env,
		DieWithParent: true,
	})
}

// stopWorker ends the worker gracefully (SIGTERM), killing it if it takes
// longer than workerStopTimeout, and removes its log unless it failed.
func stopWorker(w *workerproc.Proc) error {
	if err := w.Stop(workerStopTimeout); err != nil {
		return fmt.Errorf("error stopping the worker: %w; its log %s ends:\n%s", err, w.LogPath(), workerLog(w))
	}
	_ = os.Remove(w.LogPath())
	return nil
}

// workerLog returns the end of the worker's log, for errors.
func workerLog(w *workerproc.Proc) string { return workerproc.Tail(w.LogPath(), 20) }
