package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settle/settle/internal/natsembed"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
	"github.com/settle/settle/internal/testsupport/workertest"
)

// writeSecret writes a secret file of mode 0600 and returns its path.
func writeSecret(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWorkerAPITokenStrengthAndFile (issue 32, item 9): a worker refuses an
// API token shorter than 16 characters and a token given both ways (exit 2,
// naming the fix); --api-token-file (here SETTLE_API_TOKEN_FILE) is read,
// its line break dropped, and guards the API; a token on the command line
// is accepted but logged as visible to every user.
func TestWorkerAPITokenStrengthAndFile(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	db := dbtest.New(t)
	env := append(envWithout("DATABASE_URL", "SETTLE_"), "DATABASE_URL="+db.URL)
	const good = "file-token-0123456789abcdef"
	file := writeSecret(t, good+"\n")

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"one character", nil, []string{"--api-token", "x"}, "at least 16"},
		{"15 characters by env", []string{"SETTLE_API_TOKEN=0123456789abcde"}, nil, "at least 16"},
		{"short file", nil, []string{"--api-token-file", writeSecret(t, "short\n")}, "at least 16"},
		{"empty file", nil, []string{"--api-token-file", writeSecret(t, "\n")}, "empty"},
		{"missing file", nil, []string{"--api-token-file", filepath.Join(t.TempDir(), "none")}, "--api-token-file"},
		{"both", []string{"SETTLE_API_TOKEN=" + good}, []string{"--api-token-file", file}, "set one"},
		{"bank token both ways", []string{"SETTLE_BANK_TOKEN=x", "SETTLE_BANK_TOKEN_FILE=" + file}, nil, "SETTLE_BANK_TOKEN_FILE"},
	} {
		args := append([]string{"worker", "--listen", "127.0.0.1:0", "--bank-url", "http://127.0.0.1:1"}, tc.args...)
		out, code := runBin(t, bin, append(env, tc.env...), args...)
		if code != exitError || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, want %d saying %q\n%s", tc.name, code, exitError, tc.want, out)
		}
	}

	w := workertest.StartT(t, "worker", db.URL, []string{"SETTLE_API_TOKEN_FILE=" + file},
		"--listen", "127.0.0.1:0", "--bank-url", "http://127.0.0.1:1", "--log-format", "json")
	if code, _ := settletest.Get(t, w.URL()+"/v1/settlements/nope", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code, body := settletest.Get(t, w.URL()+"/v1/settlements/nope", "Bearer "+good); code != http.StatusNotFound {
		t.Errorf("with the token of the file: %d %s, want 404", code, body)
	}
	if err := w.Stop(30 * time.Second); err != nil {
		t.Errorf("worker did not stop: %v", err)
	}

	w = workertest.StartT(t, "worker", db.URL, nil,
		"--listen", "127.0.0.1:0", "--bank-url", "http://127.0.0.1:1", "--log-format", "json", "--api-token", good)
	if err := w.Stop(30 * time.Second); err != nil {
		t.Errorf("worker did not stop: %v", err)
	}
	log, err := os.ReadFile(w.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "visible to every user") || strings.Contains(string(log), good) {
		t.Errorf("--api-token on the command line: no warning, or the token in the log:\n%s", log)
	}
}

func TestSecretEnv(t *testing.T) {
	t.Parallel()
	file := writeSecret(t, "from-the-file\r\n")
	vars := map[string]string{"A": "plain", "B_FILE": file, "C": "x", "C_FILE": file, "D_FILE": filepath.Join(t.TempDir(), "none")}
	e := secretEnv{getenv: func(k string) string { return vars[k] }}
	if got := e.get("A"); got != "plain" || e.err != nil {
		t.Errorf("A = %q, %v", got, e.err)
	}
	if got := e.get("B"); got != "from-the-file" || e.err != nil {
		t.Errorf("B = %q, %v", got, e.err)
	}
	if got := e.get("C"); got != "" || e.err == nil || !strings.Contains(e.err.Error(), "set one") {
		t.Errorf("C = %q, %v", got, e.err)
	}
	e.err = nil
	if got := e.get("D"); got != "" || e.err == nil || !strings.Contains(e.err.Error(), "D_FILE") {
		t.Errorf("D = %q, %v", got, e.err)
	}
	if _, err := readSecretFile(writeSecret(t, "two\nlines\n")); err == nil {
		t.Error("a file of two lines was read as a token")
	}
}

// nonLoopbackIP returns an IPv4 address of this machine that is not
// loopback, or "" when it has none.
func nonLoopbackIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// TestSubmitRefusesTokenOverPlainHTTP (issue 32, item 14): settle submit
// does not send its token over plain http to a host that is not this
// machine (exit 2, nothing sent) unless --insecure-http.
func TestSubmitRefusesTokenOverPlainHTTP(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP()
	if ip == "" {
		t.Skip("this machine has no address but loopback")
	}
	bin := bintest.Build(t)
	var seen atomic.Int64
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			seen.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"settlement_id":"s-1","state":"pending"}`))
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	events := writeSecret(t, `{"settlement_id":"s-1","account_id":"a","amount_cents":1,"currency":"EUR","beneficiary":"b"}`+"\n")
	env := append(envWithout("DATABASE_URL", "SETTLE_"), "SETTLE_API_TOKEN=submit-token-0123456789")

	out, code := runBin(t, bin, env, "submit", "--url", srv.URL, "--retry-for", "5s", events)
	if code != exitError || !strings.Contains(out, "plain http") || !strings.Contains(out, "--insecure-http") || seen.Load() != 0 {
		t.Errorf("token over plain http to %s: exit %d, %d requests with the token; want exit %d naming --insecure-http, none sent\n%s",
			srv.URL, code, seen.Load(), exitError, out)
	}
	out, code = runBin(t, bin, env, "submit", "--url", srv.URL, "--retry-for", "5s", "--insecure-http", events)
	if code != exitOK || seen.Load() != 1 {
		t.Errorf("with --insecure-http: exit %d, %d requests with the token\n%s", code, seen.Load(), out)
	}
	// Without a token there is nothing to leak.
	out, code = runBin(t, bin, envWithout("DATABASE_URL", "SETTLE_"), "submit", "--url", srv.URL, "--retry-for", "5s", events)
	if code != exitOK {
		t.Errorf("no token, plain http: exit %d\n%s", code, out)
	}
}

// TestWorkerRefusesOpenNetworkListen (issue 32, item 5): `settle worker`
// without a token on an address beyond this machine exits 2 saying what to
// set, before it touches the database; with SETTLE_PUBLIC_HOST it takes the
// names, and refuses a malformed one.
func TestWorkerRefusesOpenNetworkListen(t *testing.T) {
	t.Parallel()
	bin := bintest.Build(t)
	env := append(envWithout("DATABASE_URL", "SETTLE_"), "DATABASE_URL=postgres://127.0.0.1:1/none?connect_timeout=1")
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--listen", "0.0.0.0:0"}, "without an API token"},
		{[]string{"SETTLE_LISTEN=:0"}, nil, "without an API token"},
		{[]string{"SETTLE_PUBLIC_HOST=https://settle.example.com/"}, nil, "--public-host"},
		{nil, []string{"--operators-file", writeSecret(t, "alice:not-a-hash\n")}, "--operators-file"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, append([]string{"worker", "--bank-url", "http://127.0.0.1:1"}, tc.args...)...)
		cmd.Env = append(env, tc.env...)
		out, err := cmd.CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitError || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v %v: %v, want exit %d saying %q\n%s", tc.env, tc.args, err, exitError, tc.want, out)
		}
	}
}

// TestEmbeddedNATSEnvironmentHasNoSecrets (issue 32, item 8): the embedded
// JetStream server outlives the command that started it, like the embedded
// PostgreSQL; it gets a minimal environment, never settle's secrets. (Not
// parallel: it sets the secret in this process's environment, as a worker
// has it.)
func TestEmbeddedNATSEnvironmentHasNoSecrets(t *testing.T) {
	bin := bintest.Build(t)
	const secret = "nats-env-secret-0123456789"
	t.Setenv("SETTLE_API_TOKEN", secret)
	t.Setenv("SETTLE_BANK_TOKEN", secret)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := natsembed.Ensure(ctx, natsembed.Options{Home: t.TempDir(), Executable: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.PID))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), "SETTLE_") {
		t.Errorf("the embedded NATS server (pid %d) has settle's environment: %q", s.PID, strings.ReplaceAll(string(raw), "\x00", " "))
	}
}
