package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/testenv"
)

// syncBuffer is a bytes.Buffer safe for the daemon goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func noEnv(string) string { return "" }

func TestBadArguments(t *testing.T) {
	var out, errOut syncBuffer
	if code := run([]string{"--max-batch", "x"}, noEnv, &out, &errOut); code != 2 {
		t.Fatalf("bad flag: exit %d, want 2; stderr: %s", code, errOut.String())
	}
	if code := run([]string{"-h"}, noEnv, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "-nats-listen") {
		t.Fatalf("-h: exit %d; stderr: %s", code, errOut.String())
	}
}

// leafd starts with an embedded server, prints how to ask for an id, and
// stops cleanly on SIGINT.
func TestRunAndSignal(t *testing.T) {
	var out, errOut syncBuffer
	done := make(chan int, 1)
	args := []string{"--nats-listen", "127.0.0.1:-1", "--http", "127.0.0.1:0", "--data", t.TempDir(), "--name", "sigtest"}
	go func() { done <- run(args, noEnv, &out, &errOut) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "nats req leaf.segment.demo") {
		select {
		case code := <-done:
			t.Fatalf("leafd exited %d early: %s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("leafd did not print its greeting: %s %s", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGINT: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("leafd did not stop on SIGINT")
	}
	if !strings.Contains(errOut.String(), "leafd stopped") {
		t.Fatalf("no clean stop in the log: %s", errOut.String())
	}
}

func TestVersion(t *testing.T) {
	var out, errOut syncBuffer
	if code := run([]string{"--version"}, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("--version: exit %d: %s", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "leafd 0.0.0-dev (revision ") {
		t.Fatalf("--version printed %q", out.String())
	}
}

// With ports left to the kernel (0), the banner shows the ones chosen and
// the status page, and its commands name that NATS URL; with auto-create
// off they name no tag; --log-format json logs one JSON object a line.
func TestBannerAndJSONLogs(t *testing.T) {
	var out, errOut syncBuffer
	done := make(chan int, 1)
	args := []string{"--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data", t.TempDir(), "--name", "banner",
		"--log-format", "json", "--auto-create", "false"}
	go func() { done <- run(args, noEnv, &out, &errOut) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "Status page:") {
		select {
		case code := <-done:
			t.Fatalf("leafd exited %d early: %s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner: %s %s", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	banner := out.String()
	for _, bad := range []string{":0/", ":0\n", ":4222"} {
		if strings.Contains(banner, bad) {
			t.Errorf("banner shows %q, not the port chosen:\n%s", bad, banner)
		}
	}
	if !strings.Contains(banner, "nats://127.0.0.1:") || !strings.Contains(banner, "Status page: http://127.0.0.1:") {
		t.Errorf("banner without the real addresses:\n%s", banner)
	}
	if strings.Contains(banner, "demo") {
		t.Errorf("with auto-create off the banner names tag demo:\n%s", banner)
	}
	url := regexp.MustCompile(`serving ids on (\S+)`).FindStringSubmatch(banner)[1]
	for _, l := range strings.Split(banner, "\n") {
		cmd, _, _ := strings.Cut(strings.TrimSpace(l), "#")
		switch {
		case strings.HasPrefix(cmd, "nats ") && !strings.Contains(cmd, " -s "+url):
			t.Errorf("%q does not reach %s", cmd, url)
		case strings.Contains(cmd, "leafctl ") && !strings.Contains(cmd, " --nats "+url):
			t.Errorf("%q does not reach %s", cmd, url)
		}
	}
	// The standard library's log package writes through leafd's handler.
	stdlog.Print("from the log package")
	if !strings.Contains(errOut.String(), `"msg":"from the log package"`) {
		t.Errorf("the log package does not write JSON records:\n%s", errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) == 0 {
		t.Fatal("no log")
	}
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil || v["msg"] == nil {
			t.Fatalf("log line is not a JSON object with msg: %q", l)
		}
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after SIGINT: %s", code, errOut.String())
	}
}

// The banner's commands reach the node that printed them, and name a tag
// only where it is created on first use.
func TestBannerCommands(t *testing.T) {
	kv := config.Defaults()
	mysql := config.Defaults()
	mysql.Store.MySQL = "root@tcp(127.0.0.1:3306)/leaf"
	off := config.Defaults()
	off.Store.AutoCreate = "false"
	tests := []struct {
		name    string
		cfg     config.Config
		url     string
		want    []string
		mustNot []string
	}{
		{"default url", kv, "nats://127.0.0.1:4222", []string{"nats req leaf.segment.demo ''  ", "bin/leafctl next demo -n 10  "}, []string{" -s ", "--nats", "go run"}},
		{"other url", kv, "nats://127.0.0.1:4333", []string{"nats req leaf.segment.demo '' -s nats://127.0.0.1:4333  ", "nats req leaf.snowflake '' -s nats://127.0.0.1:4333", "leafctl next demo -n 10 --nats nats://127.0.0.1:4333", "leafctl snowflake -n 3 --nats nats://127.0.0.1:4333"}, nil},
		{"credentials in the url", kv, "nats://ctl:xxxxx@10.0.0.1:4222", []string{"-s nats://10.0.0.1:4222", "--nats nats://10.0.0.1:4222"}, []string{"-s nats://ctl", "--nats nats://ctl"}},
		{"mysql", mysql, "nats://10.0.0.1:4222", []string{"leafctl tag list --nats nats://10.0.0.1:4222", "nats req leaf.segment.TAG '' -s nats://10.0.0.1:4222"}, []string{"demo"}},
		{"auto-create off", off, "nats://127.0.0.1:4222", []string{"leafctl tag list  ", "leaf.segment.TAG"}, []string{"demo"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := banner(tc.cfg, tc.url, "", "bin/leafctl")
			for _, w := range tc.want {
				if !strings.Contains(b, w) {
					t.Errorf("banner lacks %q:\n%s", w, b)
				}
			}
			for _, w := range tc.mustNot {
				if strings.Contains(b, w) {
					t.Errorf("banner has %q:\n%s", w, b)
				}
			}
		})
	}
}

// leafd probe URL is the healthcheck of the distroless image.
func TestProbe(t *testing.T) {
	code := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
	}))
	defer srv.Close()
	var out, errOut syncBuffer
	if got := run([]string{"probe", srv.URL + "/readyz"}, noEnv, &out, &errOut); got != 0 {
		t.Fatalf("probe of a 200: exit %d: %s", got, errOut.String())
	}
	code = http.StatusServiceUnavailable
	if got := run([]string{"probe", srv.URL + "/readyz"}, noEnv, &out, &errOut); got != 1 {
		t.Fatalf("probe of a 503: exit %d", got)
	}
	if got := run([]string{"probe"}, noEnv, &out, &errOut); got != 2 {
		t.Fatalf("probe without a URL: exit %d", got)
	}
}

// Under --log-format json every line the built leafd writes to stderr is
// a JSON record: a bad flag's error, the embedded nats-server's log and
// the shutdown. The banner, text for people, is on stdout.
func TestJSONLogsOfTheBinary(t *testing.T) {
	bin := testenv.Build(t, "cmd/leafd")
	allJSON := func(t *testing.T, stderr string) []map[string]any {
		t.Helper()
		var recs []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil || v["msg"] == nil {
				t.Errorf("stderr line is not a JSON record: %q", l)
			}
			recs = append(recs, v)
		}
		return recs
	}
	for _, tc := range []struct {
		name string
		args []string
		env  string
		bad  string // the flag the record names
	}{
		{"flag", []string{"--log-format", "json", "--max-batch", "x"}, "", "max-batch"},
		{"flag after", []string{"--max-batch", "x", "--log-format=json"}, "", "max-batch"},
		{"env", []string{"--no-such-flag"}, "LEAF_LOG_FORMAT=json", "no-such-flag"},
	} {
		t.Run("bad "+tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append(os.Environ(), tc.env)
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			if err := cmd.Run(); cmd.ProcessState.ExitCode() != 2 {
				t.Fatalf("exit %v, want 2: %s", err, errOut.String())
			}
			recs := allJSON(t, errOut.String())
			if len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0]["err"]), tc.bad) {
				t.Errorf("want one record naming the bad flag: %s", errOut.String())
			}
		})
	}

	var out, errOut testenv.Buffer
	cmd := exec.Command(bin, "--log-format", "json", "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--data", t.TempDir(), "--name", "jsonlog")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	re := regexp.MustCompile(`serving ids on nats://(\S+)`)
	deadline := time.Now().Add(60 * time.Second)
	for !re.MatchString(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no banner: %s %s", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A client that speaks no NATS: the embedded server logs an error.
	conn, err := net.Dial("tcp", re.FindStringSubmatch(out.String())[1])
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Write([]byte("NOT NATS\r\n"))
	_, _ = io.ReadAll(conn)
	conn.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("leafd: %v\n%s", err, errOut.String())
	}
	var fromNATS, shutdown bool
	for _, r := range allJSON(t, errOut.String()) {
		fromNATS = fromNATS || r["component"] == "nats-server"
		shutdown = shutdown || r["msg"] == "leafd shutting down"
	}
	if !fromNATS || !shutdown {
		t.Errorf("want records of the embedded nats-server (%v) and of the shutdown (%v):\n%s", fromNATS, shutdown, errOut.String())
	}

	// The runtime's own output: SIGQUIT makes it print every goroutine's
	// stack to descriptor 2 and exit, as a panic or a fatal error does.
	t.Run("crash", func(t *testing.T) {
		var out, errOut testenv.Buffer
		cmd := exec.Command(bin, "--log-format", "json", "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
			"--data", t.TempDir(), "--name", "jsoncrash")
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill() }()
		testenv.Eventually(t, "the banner", 60*time.Second, func() bool { return strings.Contains(out.String(), "serving ids") })
		if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		var sigquit, stacks bool
		for _, r := range allJSON(t, errOut.String()) {
			text := fmt.Sprint(r["text"])
			sigquit = sigquit || strings.HasPrefix(text, "SIGQUIT")
			stacks = stacks || strings.HasPrefix(text, "goroutine ")
		}
		if !sigquit || !stacks {
			t.Errorf("want the runtime's SIGQUIT line (%v) and goroutine stacks (%v) as records:\n%s", sigquit, stacks, errOut.String())
		}
	})
}

// The relay passes JSON records through and wraps any other line.
func TestRelay(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	in := "{\"msg\":\"a\"}\npanic: boom\n\n\tmain.go:12 +0x1d\n{not json\nlast without newline"
	var out bytes.Buffer
	if err := relay(strings.NewReader(in), &out, func() time.Time { return at }); err != nil {
		t.Fatal(err)
	}
	want := `{"msg":"a"}
{"time":"2026-11-27T12:00:00Z","level":"ERROR","msg":"leafd stderr","text":"panic: boom"}
{"time":"2026-11-27T12:00:00Z","level":"ERROR","msg":"leafd stderr","text":"\tmain.go:12 +0x1d"}
{"time":"2026-11-27T12:00:00Z","level":"ERROR","msg":"leafd stderr","text":"{not json"}
{"time":"2026-11-27T12:00:00Z","level":"ERROR","msg":"leafd stderr","text":"last without newline"}
`
	if out.String() != want {
		t.Errorf("relay wrote\n%s\nwant\n%s", out.String(), want)
	}
}

// The banner's leafctl commands run the leafctl that came with this leafd:
// bin/leafctl after make build, not go run or another leafctl on the PATH.
func TestBannerLeafctl(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(filepath.Join(dir, "cmd", "leafctl"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "leafd")
	if got := leafctlFrom(exe, dir); got != "go run ./cmd/leafctl" {
		t.Errorf("source tree without bin/leafctl: %q", got)
	}
	if got := leafctlFrom(exe, t.TempDir()); got != "leafctl" {
		t.Errorf("no leafctl anywhere: %q", got)
	}
	if err := os.WriteFile(filepath.Join(bin, "leafctl"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := leafctlFrom(exe, dir); got != filepath.Join("bin", "leafctl") {
		t.Errorf("make build's pair: %q", got)
	}
	other := t.TempDir()
	if got := leafctlFrom(exe, other); got != filepath.Join(bin, "leafctl") {
		t.Errorf("run from elsewhere: %q", got)
	}
	t.Setenv("PATH", bin)
	if got := leafctlFrom(exe, other); got != "leafctl" {
		t.Errorf("installed pair on the PATH: %q", got)
	}
}
