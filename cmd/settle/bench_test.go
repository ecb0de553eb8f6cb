package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestBenchHelp checks that settle bench --help names every figure it
// prints and says what each baseline is.
func TestBenchHelp(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--help"}, Stdio{Out: &out, Err: &errOut}); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"--quick", "--json", "--duration", "--concurrency", "settle_bench",
		"insert_baseline_per_s", "intake_single_per_s", "intake_batch_per_s", "river_noop_jobs_per_s",
		"e2e_per_s", "jobs_per_settlement", "replay_p50/p99_us_1e4", "replay_p50/p99_us_1e6", "worker_peak_rss_mb",
		"river_noop_best_jobs_per_s", "river_best_settings", "e2e_latency100_per_s", "e2e_latency100_bound_per_s",
		"commits_per_settlement", "round_trips_per_event", "e2e_events_per_s", "e2e_no_events_per_s", "events_delivered_per_s",
		"settlements_per_job", "e2e_latency100_reachable_per_s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBenchRefusesBadFlags checks that bad flags stop before any database
// work.
func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"bench", "--nope"}, {"bench", "extra"}, {"bench", "--batch", "5000"}, {"bench", "--only", "nope"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, Stdio{Out: &out, Err: &errOut}); code != exitError {
			t.Errorf("%v: exit %d, want %d", args, code, exitError)
		}
	}
}
