package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

// TestLambdaHelp prints settle lambda's help, and refuses to start outside
// Lambda with one line.
func TestLambdaHelp(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"lambda", "--help"}, Stdio{Out: &out, Err: &errOut}); code != exitOK {
		t.Fatalf("settle lambda --help exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{"Usage: settle lambda", "batchItemFailures", "ReportBatchItemFailures", "-source-max-failures", "DATABASE_URL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") == "" {
		errOut.Reset()
		if code := run(context.Background(), []string{"lambda"}, Stdio{Out: &out, Err: &errOut}); code != exitError || !strings.Contains(errOut.String(), "not inside AWS Lambda") {
			t.Errorf("settle lambda outside Lambda exited %d: %s", code, errOut.String())
		}
	}
}

// fakeRuntime is the Lambda Runtime API as a function's bootstrap sees it:
// it hands out the queued events one per GET …/invocation/next and
// collects the answers.
type fakeRuntime struct {
	events  chan events.SQSEvent
	answers chan string
	done    chan struct{}
}

func (f *fakeRuntime) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/2018-06-01/runtime/invocation/next":
		select {
		case ev := <-f.events:
			w.Header().Set("Lambda-Runtime-Aws-Request-Id", fmt.Sprintf("req-%d", time.Now().UnixNano()))
			w.Header().Set("Lambda-Runtime-Deadline-Ms", fmt.Sprint(time.Now().Add(time.Minute).UnixMilli()))
			w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:settle")
			_ = json.NewEncoder(w).Encode(ev)
		case <-f.done:
			http.Error(w, "gone", http.StatusGone)
		}
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/response"):
		b, _ := io.ReadAll(r.Body)
		f.answers <- string(b)
		w.WriteHeader(http.StatusAccepted)
	default:
		b, _ := io.ReadAll(r.Body)
		f.answers <- "unexpected " + r.Method + " " + r.URL.Path + ": " + string(b)
		w.WriteHeader(http.StatusAccepted)
	}
}

// TestLambdaBootstrap runs the settle binary with no arguments as a
// function's bootstrap against a fake Lambda Runtime API: it is settle
// lambda, takes an SQS event, records it and answers batchItemFailures
// naming nothing; the same event again is answered the same (replays).
func TestLambdaBootstrap(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	bin := bintest.Build(t)
	rt := &fakeRuntime{events: make(chan events.SQSEvent, 2), answers: make(chan string, 2), done: make(chan struct{})}
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(rt.done) })

	var ev events.SQSEvent
	for i, body := range []string{
		`{"settlement_id":"fn-1","account_id":"a","amount_cents":100,"currency":"EUR","beneficiary":"b"}`,
		`{"settlement_id":"fn-2","account_id":"a","amount_cents":200,"currency":"EUR","beneficiary":"b"}`,
		`not an event`,
	} {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprintf("m-%d", i), Body: body, EventSource: "aws:sqs",
			Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
	}
	rt.events <- ev
	rt.events <- ev

	cmd := exec.Command(bin)
	cmd.Env = append(envWithout("SETTLE_", "DATABASE_URL=", "AWS_"), "DATABASE_URL="+db.URL, "AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(srv.URL, "http://"))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	for i := range 2 {
		select {
		case a := <-rt.answers:
			var resp events.SQSEventResponse
			if err := json.Unmarshal([]byte(a), &resp); err != nil || resp.BatchItemFailures == nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("answer %d: %s (%v), want {\"batchItemFailures\":[]}", i+1, a, err)
			}
		case <-exited:
			t.Fatalf("settle exited before answering:\n%s", logs.String())
		case <-time.After(2 * time.Minute):
			t.Fatalf("no answer %d after 2 minutes", i+1)
		}
	}
	var settlements, replays, rejects int
	err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM settlements), (SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts),
		(SELECT count(*) FROM intake_rejects WHERE source = 'lambda' AND transport_id = 'm-2')`).Scan(&settlements, &replays, &rejects)
	if err != nil {
		t.Fatal(err)
	}
	if settlements != 2 || replays != 2 || rejects != 1 {
		t.Errorf("%d settlements, %d replays, %d rejects of m-2; want 2, 2 and 1", settlements, replays, rejects)
	}
}
