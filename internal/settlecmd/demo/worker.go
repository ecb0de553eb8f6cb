package demo

import (
	"context"
	"time"

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

// workerStopTimeout is how long the worker has to stop gracefully before
// it is killed.
const workerStopTimeout = 20 * time.Second
