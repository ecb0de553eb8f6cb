package fakebank_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/testsupport/settletest"

	"github.com/settle/settle/fakebank/conformance"
	"github.com/settle/settle/internal/testsupport/bintest"
)

// bankProcess is `settle fakebank` running as a subprocess.
type bankProcess struct {
	cmd    *exec.Cmd
	url    string
	stderr *settletest.Buffer
	exited chan struct{} // closed when the process has been waited for
	err    error         // Wait's result, valid once exited is closed
}

// startBankProcess starts `settle fakebank` on a free port with args and
// waits until it announces its URL. The process is killed when the test ends.
func startBankProcess(t *testing.T, args ...string) *bankProcess {
	t.Helper()
	bin := bintest.Build(t)
	cmd := exec.Command(bin, append([]string{"fakebank", "--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	bp := &bankProcess{cmd: cmd, stderr: &settletest.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = bp.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("error starting %s: %v", bin, err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		bp.err = cmd.Wait()
		close(bp.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-bp.exited
	})
	select {
	case line := <-lines:
		const prefix = "fakebank listening on "
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("unexpected first line %q; stderr:\n%s", line, bp.stderr)
		}
		bp.url = strings.TrimPrefix(line, prefix)
	case <-bp.exited:
		t.Fatalf("settle fakebank exited early: %v; stderr:\n%s", bp.err, bp.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("settle fakebank did not announce its URL; stderr:\n%s", bp.stderr)
	}
	return bp
}

func TestConformanceSubprocess(t *testing.T) {
	t.Parallel()
	bp := startBankProcess(t, "--seed", "5", "--state", filepath.Join(t.TempDir(), "books.json"))
	conformance.Run(t, bp.url)
}

func TestSubprocessStateSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "books.json")
	bp := startBankProcess(t, "--state", state, "--settle-delay", "0")
	tb := &testBundle{url: bp.url, http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}

	ids := map[string]string{}
	for i := range 20 {
		key := fmt.Sprint("k", i)
		a := tb.post(t, key, paymentReq("ref-"+key))
		if a.status != http.StatusCreated {
			t.Fatalf("want 201, got %d %s", a.status, a.body)
		}
		ids[key] = a.payment(t).ID
	}
	before := tb.statement(t)

	if err := bp.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-bp.exited

	bp2 := startBankProcess(t, "--state", state)
	tb.url = bp2.url
	for key, id := range ids {
		if p := tb.mustByKey(t, key); p.ID != id {
			t.Fatalf("key %s after restart: want %s, got %s", key, id, p.ID)
		}
	}
	after := tb.statement(t)
	if len(after) != len(before) {
		t.Fatalf("statement after restart: want %d payments, got %d", len(before), len(after))
	}
	for i := range after {
		if after[i] != before[i] {
			t.Fatalf("payment %d after restart: want %+v, got %+v", i, before[i], after[i])
		}
	}
}

func TestSubprocessStopsGracefullyOnSIGTERM(t *testing.T) {
	t.Parallel()
	bp := startBankProcess(t)
	if err := bp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-bp.exited
	if bp.err != nil {
		t.Fatalf("want exit status 0 after SIGTERM, got %v; stderr:\n%s", bp.err, bp.stderr)
	}
}

func TestSubprocessHelpDocumentsFlagsAndAdminAPI(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(bintest.Build(t), "fakebank", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("settle fakebank --help: %v\n%s", err, out)
	}
	for _, want := range []string{
		"-listen", "-seed", "-state", "-faults", "-settle-delay", "-key-ttl", "-verbose",
		"/admin/faults", "/admin/stats", "/v1/payments", "/v1/statement",
		"fail_before_rate", "drop_response_rate", "status_error_rate", "reject_rate",
		"settlement_failure_rate", "latency_min_ms", "latency_max_ms", "settle_delay_ms", "key_ttl_ms",
		"max_payments_per_reference",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("--help does not mention %q", want)
		}
	}
}

func TestSubprocessInitialFaultFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want fakebank.Faults
	}{
		{nil, fakebank.Faults{SettleDelayMS: 200}},
		{[]string{"--faults", `{"reject_rate":0.5,"settle_delay_ms":7}`}, fakebank.Faults{RejectRate: 0.5, SettleDelayMS: 7}},
		{[]string{"--faults", `{"settle_delay_ms":7,"key_ttl_ms":9}`, "--settle-delay", "1s", "--key-ttl", "24h"},
			fakebank.Faults{SettleDelayMS: 1000, KeyTTLMS: 86_400_000}},
	}
	for _, tt := range tests {
		bp := startBankProcess(t, tt.args...)
		res, err := http.Get(bp.url + "/admin/faults")
		if err != nil {
			t.Fatal(err)
		}
		var got fakebank.Faults
		err = json.NewDecoder(res.Body).Decode(&got)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("%q: want %+v, got %+v", tt.args, tt.want, got)
		}
	}
	for _, bad := range [][]string{{"--faults", `{"reject_rate":3}`}, {"--faults", `{"nope":1}`}, {"extra-arg"}} {
		out, err := exec.Command(bintest.Build(t), append([]string{"fakebank", "--listen", "127.0.0.1:0"}, bad...)...).CombinedOutput()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 {
			t.Errorf("%q: want exit status 2, got %v\n%s", bad, err, out)
		}
	}
}
