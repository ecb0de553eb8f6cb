// Package natstest gives tests a real JetStream server: in the test's own
// process (Start, the server of internal/natsembed on a private store), or
// as a `settle nats-server` process a test may SIGKILL and restart on its
// store (StartProcess). It also publishes and reads consumer state. It
// must never be imported by non-test code.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/settle/settle/internal/natsembed"
)

// Server is an in-process JetStream server.
type Server struct {
	// URL is the client URL.
	URL string
	// Dir is the store directory.
	Dir  string
	port int
	ns   *server.Server
}

// Start starts a JetStream server in this process on a private store,
// shut down when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	dir := t.TempDir()
	ns, err := natsembed.NewServer(dir, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Dir: dir, ns: ns, port: ns.Addr().(*net.TCPAddr).Port}
	s.URL = ns.ClientURL()
	t.Cleanup(func() { s.ns.Shutdown(); s.ns.WaitForShutdown() })
	return s
}

// Restart shuts the server down and starts it again on its store and port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	ns, err := natsembed.NewServer(s.Dir, s.port, false)
	if err != nil {
		t.Fatal(err)
	}
	s.ns = ns
}

// Process is a `settle nats-server` process.
type Process struct {
	// URL is the client URL; Dir the server directory.
	URL, Dir string
	exe      string
	port     int
	cmd      *exec.Cmd
	done     chan struct{}
}

// StartProcess runs `exe nats-server --dir DIR --port P` (exe: a settle
// binary, internal/testsupport/bintest) on a fresh directory and waits until it
// serves. The process is killed when t ends, and dies with the test
// binary.
func StartProcess(t testing.TB, exe string) *Process {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := &Process{Dir: t.TempDir(), exe: exe, port: port, URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	p.Start(t)
	t.Cleanup(p.Kill)
	return p
}

// Start starts the process again (after Kill) on its directory and port.
func (p *Process) Start(t testing.TB) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(p.Dir, "nats.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	p.cmd = exec.Command(p.exe, natsembed.Subcommand, "--dir", p.Dir, "--port", strconv.Itoa(p.port))
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.done)
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-p.done:
			b, _ := os.ReadFile(filepath.Join(p.Dir, "nats.log"))
			t.Fatalf("settle nats-server exited at start:\n%s", b)
		default:
		}
		nc, err := natsgo.Connect(p.URL, natsgo.Timeout(time.Second))
		if err == nil {
			js, jerr := jetstream.New(nc)
			if jerr == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, jerr = js.AccountInfo(ctx)
				cancel()
			}
			nc.Close()
			if jerr == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("settle nats-server not serving on %s after a minute", p.URL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill kills the process with SIGKILL and waits for it to end.
func (p *Process) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// JetStream connects to url and returns its JetStream context; the
// connection is closed when t ends.
func JetStream(t testing.TB, url string) (jetstream.JetStream, *natsgo.Conn) {
	t.Helper()
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(-1), natsgo.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, nc
}

// Publish publishes data on subject with message id msgID (none when
// empty) and waits for the stream's acknowledgement; it returns the stream
// sequence.
func Publish(t testing.TB, js jetstream.JetStream, subject string, data []byte, msgID string) uint64 {
	t.Helper()
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, subject, data, opts...)
	if err != nil {
		t.Fatalf("error publishing to %s: %v", subject, err)
	}
	return ack.Sequence
}

// ConsumerInfo returns the state of consumer on stream.
func ConsumerInfo(t testing.TB, js jetstream.JetStream, stream, consumer string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		t.Fatalf("error reading consumer %s: %v", consumer, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("error reading consumer %s: %v", consumer, err)
	}
	return info
}

// Messages reads every message stored in stream, in stream order (none
// when the stream does not exist).
func Messages(t testing.TB, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("error reading stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("error reading stream %s: %v", stream, err)
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("error reading stream %s: %v", stream, err)
	}
	var out []jetstream.Msg
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(int(info.State.Msgs)-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("error reading stream %s: %v", stream, err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("error reading stream %s: %v", stream, err)
		}
	}
	return out
}
