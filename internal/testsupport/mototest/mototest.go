// Package mototest gives tests moto_server, the local stand-in for Amazon
// SQS (internal/motoserver): one per test (Start), killed when the test
// ends, or one per test process (Shared), killed by Close from TestMain
// and in any case with the test process. When
// moto_server is not installed the test is skipped with a message saying
// so, unless CI=true, where it fails. It must never be imported by non-test
// code.
package mototest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settle/settle/internal/motoserver"
)

// Server is a moto_server for one test.
type Server struct {
	*motoserver.Server
	// Log is the server's log file.
	Log string
}

// Require skips t when moto_server is not on PATH, or fails it when
// CI=true.
func Require(t testing.TB) {
	t.Helper()
	if _, err := motoserver.Path(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mototest: %v; CI must have it (.ci/run checks)", err)
		}
		t.Skipf("mototest: %v; the SQS tests need it (a stand-in for Amazon SQS)", err)
	}
}

// Start starts moto_server for t (see Require) and kills it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	Require(t)
	logPath := filepath.Join(t.TempDir(), "moto.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := motoserver.Start(ctx, log)
	if err != nil {
		t.Fatalf("mototest: %v", err)
	}
	t.Cleanup(srv.Close)
	return &Server{Server: srv, Log: logPath}
}

var (
	sharedMu  sync.Mutex
	shared    *motoserver.Server
	sharedErr error
	sharedLog string
)

// Shared returns the test process's moto_server, started on first use
// (see Require). Each test takes queues of its own (Queue). TestMain must
// call Close after m.Run.
func Shared(t testing.TB) *Server {
	t.Helper()
	Require(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		f, err := os.CreateTemp("", "settle-moto-*.log")
		if err != nil {
			t.Fatal(err)
		}
		sharedLog = f.Name()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		shared, sharedErr = motoserver.Start(ctx, f)
		cancel()
		_ = f.Close() // the child holds its own copy
	}
	if sharedErr != nil {
		t.Fatalf("mototest: %v", sharedErr)
	}
	return &Server{Server: shared, Log: sharedLog}
}

// Close kills the shared moto_server, if it was started, and removes its
// log.
func Close() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.Close()
		_ = os.Remove(sharedLog)
		shared = nil
	}
}

var queues atomic.Int64

// queueName keeps the characters a queue name may hold.
func queueName(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '-'
	}, s)
	if len(s) > 60 {
		s = s[len(s)-60:]
	}
	return s
}

// Queue creates a fresh standard queue for t with the visibility timeout
// visibility and returns its URL.
func (s *Server) Queue(t testing.TB, visibility time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := s.CreateQueue(ctx, fmt.Sprintf("%s-%d", queueName(t.Name()), queues.Add(1)), visibility)
	if err != nil {
		t.Fatalf("mototest: %v", err)
	}
	return u
}
