package pgembed_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/settle/settle/internal/pgembed"
)

// holdEnv, set in the environment of this test binary run as a helper,
// names a home whose cluster the helper holds until its stdin closes.
const holdEnv = "PGEMBED_TEST_HOLD"

func TestMain(m *testing.M) {
	if home := os.Getenv(holdEnv); home != "" {
		os.Exit(holdCluster(home))
	}
	os.Exit(m.Run())
}

// holdCluster is the helper process: it takes up the cluster of home as any
// settle command does, says "held", and keeps it until stdin closes.
func holdCluster(home string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := pgembed.Ensure(ctx, pgembed.Options{Home: home, Ephemeral: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startHolder runs the helper against home and returns once it holds the
// cluster; release ends it and waits for its exit.
func startHolder(t *testing.T, home string) (release func()) {
	t.Helper()
	return startHolderEnv(t, home)
}

// startHolderEnv is startHolder with env added to the helper's environment.
func startHolderEnv(t *testing.T, home string, env ...string) (release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), holdEnv+"="+home), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once bool
	release = func() {
		if !once {
			once = true
			stdin.Close()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(release)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	return release
}

func running(t *testing.T, home string) bool {
	t.Helper()
	_, ok, err := pgembed.Find(home)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestReleaseStopsWhatItStarted: the process that started the server and
// is its only user stops it in Release.
func TestReleaseStopsWhatItStarted(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	c := ensure(t, home)
	if !c.Started {
		t.Fatal("Ensure did not start the cluster")
	}
	stopped, err := c.Release(context.Background())
	if err != nil || !stopped {
		t.Fatalf("Release = %v, %v; want stopped", stopped, err)
	}
	if running(t, home) {
		t.Fatal("still running after Release")
	}
	if pgembed.Alive(c.PID) {
		t.Fatalf("server pid %d still alive", c.PID)
	}
}

// TestReleaseLeavesWhatWasRunning: a process that found the server
// running leaves it running; the one that started it stops it later.
func TestReleaseLeavesWhatWasRunning(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	first := ensure(t, home)
	second := ensure(t, home)
	if second.Started {
		t.Fatal("second Ensure started the cluster again")
	}
	if stopped, err := second.Release(context.Background()); err != nil || stopped {
		t.Fatalf("Release of a reused cluster = %v, %v; want left running", stopped, err)
	}
	if !running(t, home) {
		t.Fatal("a reused cluster was stopped")
	}
	if stopped, err := first.Release(context.Background()); err != nil || !stopped {
		t.Fatalf("Release of the starter = %v, %v; want stopped", stopped, err)
	}
}

// TestReleaseLeavesClusterInUse: the process that started the server
// leaves it running while another process uses it, and stops it once that
// process has gone.
func TestReleaseLeavesClusterInUse(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	c := ensure(t, home)
	release := startHolder(t, home)
	if stopped, err := c.Release(context.Background()); err != nil || stopped {
		t.Fatalf("Release while another process holds it = %v, %v; want left running", stopped, err)
	}
	if !running(t, home) {
		t.Fatal("stopped under another process")
	}
	release()
	if stopped, err := c.Release(context.Background()); err != nil || !stopped {
		t.Fatalf("Release after the other process exited = %v, %v; want stopped", stopped, err)
	}
}
