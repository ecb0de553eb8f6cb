// Package motoserver runs moto_server (the Python moto package's server) as
// a local stand-in for Amazon SQS: it speaks SQS's real HTTP API, with
// visibility timeouts, receive counts and redrive, but it is not SQS (no
// durability, no distribution, its own timing). settle demo --source sqs
// and settle bench use it; tests use it through internal/testsupport/mototest.
//
// It owns the child process: started on 127.0.0.1 at a free port, waited
// for by polling that port, killed by Close and, on Linux, when the process
// that started it dies. The clients do not reach that port: they reach a
// front in this process that lets the calls adding or removing a queue's
// messages in one at a time, because moto_server loses such changes when
// two run at once (see front).
package motoserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Executable is the name of the program on PATH.
const Executable = "moto_server"

// ErrNotInstalled is returned by Start when moto_server is not on PATH.
var ErrNotInstalled = errors.New("moto_server is not on PATH (the Python moto package with its server: pip install 'moto[server]')")

// Region and the credentials the stand-in accepts (any will do).
const (
	Region    = "us-east-1"
	AccessKey = "settle-test"
	SecretKey = "settle-test"
)

// Server is a running moto_server.
type Server struct {
	// URL is the endpoint the clients use, http://127.0.0.1:PORT: the
	// front, in this process.
	URL string
	// Backend is moto_server's own endpoint, behind the front.
	Backend string
	cmd     *exec.Cmd
	done    chan struct{}
	http    *http.Server
}

// Path returns the path of moto_server, or ErrNotInstalled.
func Path() (string, error) {
	p, err := exec.LookPath(Executable)
	if err != nil {
		return "", ErrNotInstalled
	}
	return p, nil
}

// Start starts moto_server on a free port of 127.0.0.1, its output to log
// (nil: discarded), and returns once it answers HTTP on that port. The
// port is found free and then handed to moto_server, so another listener
// of the machine can take it in between; moto_server then exits, and Start
// tries again on another port (three tries).
func Start(ctx context.Context, log io.Writer) (*Server, error) {
	exe, err := Path()
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		s, err := start(ctx, exe, log)
		if errors.Is(err, errExitedAtStart) && try < 3 {
			continue
		}
		return s, err
	}
}

// errExitedAtStart is moto_server ending before it answered, as it does
// when its port was taken.
var errExitedAtStart = errors.New("moto_server exited at start")

// start is one try of Start.
func start(ctx context.Context, exe string, log io.Writer) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("error finding a free port for moto_server: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &Server{Backend: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{})}
	s.cmd = exec.Command(exe, "-H", "127.0.0.1", "-p", strconv.Itoa(port)) //nolint:gosec // G204: moto_server from PATH, our own arguments
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("error starting moto_server: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.wait(ctx, time.Minute); err != nil {
		s.Close()
		return nil, err
	}
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("error listening for moto_server's front: %w", err)
	}
	backend, _ := url.Parse(s.Backend)
	s.URL = "http://" + fl.Addr().String()
	s.http = &http.Server{Handler: newFront(backend), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.http.Serve(fl) }()
	return s, nil
}

// wait polls the HTTP port until moto_server answers.
func (s *Server) wait(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if s.answers(ctx, client) {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("%w (%v)", errExitedAtStart, s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("moto_server not answering on %s after %s", s.Backend, within)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// answers reports whether moto_server answers on its port: its dashboard,
// not another server that took the port before it could (that one is
// waited out: moto_server then exits).
func (s *Server) answers(ctx context.Context, client *http.Client) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Backend+"/moto-api/", nil)
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte("Moto"))
}

// Close stops the front, kills moto_server (its whole process group: the
// launcher may have children) and waits for it to end.
func (s *Server) Close() {
	if s.http != nil {
		_ = s.http.Close()
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// Client returns an SQS client of the stand-in, with its fixed
// credentials and region.
func (s *Server) Client() *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	})
}

// Env is the environment a settle process needs to reach the stand-in
// through the standard AWS configuration.
func (s *Server) Env() []string {
	return []string{"AWS_ENDPOINT_URL_SQS=" + s.URL, "AWS_REGION=" + Region,
		"AWS_ACCESS_KEY_ID=" + AccessKey, "AWS_SECRET_ACCESS_KEY=" + SecretKey}
}

// CreateQueue creates the standard queue name with the visibility timeout
// visibility and returns its URL.
func (s *Server) CreateQueue(ctx context.Context, name string, visibility time.Duration) (string, error) {
	out, err := s.Client().CreateQueue(ctx, &awssqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			string(types.QueueAttributeNameVisibilityTimeout): strconv.Itoa(int(visibility / time.Second)),
		},
	})
	if err != nil {
		return "", fmt.Errorf("error creating queue %s: %w", name, err)
	}
	return aws.ToString(out.QueueUrl), nil
}
