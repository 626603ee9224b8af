package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natsauth"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/node"
)

func startLeafd(t *testing.T) string {
	t.Helper()
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{Name: "ctl", NATS: config.NATSConfig{URL: s.ClientURL()}, HTTP: config.HTTPConfig{Addr: "off"}, DataDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	return s.ClientURL()
}

func leafctl(url string, args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	c := &cli{stdout: &o, stderr: &e, getenv: func(k string) string {
		if k == "LEAF_NATS" {
			return url
		}
		return ""
	}}
	code = c.run(args)
	return code, o.String(), e.String()
}

func TestCommands(t *testing.T) {
	url := startLeafd(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"next", []string{"next", "demo"}, 0, "1\n", ""},
		{"next n", []string{"next", "demo", "-n", "3"}, 0, "2\n3\n4\n", ""},
		{"next flag first", []string{"next", "-n", "2", "demo"}, 0, "5\n6\n", ""},
		{"next json", []string{"next", "demo", "-n", "2", "--json"}, 0, "[\n  7,\n  8\n]\n", ""},
		{"create", []string{"tag", "create", "orders", "--step", "100", "--desc", "order ids"}, 0, "orders  segment  1       100", ""},
		{"create mono", []string{"tag", "create", "ticks", "--mode", "mono"}, 0, "ticks  mono  1", ""},
		{"create opaque without key", []string{"tag", "create", "secret", "--mode", "opaque"}, 1, "", "no opaque key"},
		{"create bad mode", []string{"tag", "create", "odd", "--mode", "strict"}, 1, "", "not one of segment, mono, opaque"},
		{"width without opaque", []string{"tag", "create", "odd", "--width", "40"}, 2, "", "--mode opaque"},
		{"mono on segment", []string{"next", "ticks"}, 1, "", "leaf.mono.ticks"},
		{"decode plain", []string{"tag", "decode", "orders", "5"}, 1, "", "own sequence numbers"},
		{"create again", []string{"tag", "create", "orders"}, 1, "", "400"},
		{"set-step", []string{"tag", "set-step", "orders", "300"}, 0, "300", ""},
		{"set-max", []string{"tag", "set-max", "orders", "1000"}, 0, "1000", ""},
		{"set-max lower", []string{"tag", "set-max", "orders", "10"}, 1, "", "below the current"},
		{"restart below", []string{"tag", "restart", "orders", "--floor", "999"}, 1, "", "below"},
		{"restart no floor", []string{"tag", "restart", "orders"}, 2, "", "--floor"},
		{"restart", []string{"tags", "restart", "orders", "--floor", "5000"}, 0, "5000", ""},
		{"list", []string{"tag", "list"}, 0, "orders", ""},
		{"list json", []string{"tag", "list", "--json"}, 0, `"tag": "demo"`, ""},
		{"beyond a batch", []string{"next", "demo", "-n", "20000"}, 0, "\n20008\n", ""},
		{"bad tag", []string{"next", "a.b"}, 2, "", "must be 1-128"},
		{"no tag", []string{"next"}, 2, "", "wants 1 argument"},
		{"bad n", []string{"next", "demo", "-n", "0"}, 2, "", "at least 1"},
		{"unknown command", []string{"frobnicate"}, 2, "", "unknown command"},
		{"no command", nil, 2, "", "no command"},
		{"bad step", []string{"tag", "set-step", "orders", "many"}, 2, "", "not a number"},
		{"help", []string{"-h"}, 0, "Usage:", ""},
		{"bench bad mode", []string{"bench", "--mode", "fast"}, 2, "", "request, pipelined or pool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := leafctl(url, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("leafctl %v = %d\nstdout: %s\nstderr: %s\nwant code %d, stdout with %q, stderr with %q",
					tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

func TestNoServer(t *testing.T) {
	code, _, errOut := leafctl("nats://127.0.0.1:1", "next", "demo")
	if code != 1 || !strings.Contains(errOut, "connect to") {
		t.Fatalf("code %d, stderr %s", code, errOut)
	}
}

func TestBench(t *testing.T) {
	url := startLeafd(t)
	code, out, errOut := leafctl(url, "bench", "-d", "300ms", "--warmup", "0s", "-c", "2", "--batch", "10", "--check", "--baseline", "--quiet")
	if code != 0 || !strings.Contains(out, "ratio") {
		t.Fatalf("bench = %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = leafctl(url, "bench", "-d", "200ms", "--warmup", "0s", "-c", "2", "--baseline", "--rounds", "2", "--quiet")
	if code != 0 || !strings.Contains(out, "median ratio over 2 rounds") {
		t.Fatalf("bench --rounds 2 = %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = leafctl(url, "bench", "-d", "200ms", "--warmup", "0s", "-c", "2", "--tag", "vs", "--versus", "leaf.segment.demo", "--rounds", "2", "--quiet")
	if code != 0 || !strings.Contains(out, "leaf.segment.vs") || !strings.Contains(out, "leaf.segment.demo") || !strings.Contains(out, "median ratio over 2 rounds") {
		t.Fatalf("bench --versus = %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut = leafctl(url, "bench", "--versus", "x", "--baseline"); code != 2 || !strings.Contains(errOut, "--versus") {
		t.Fatalf("bench --versus --baseline = %d: %s", code, errOut)
	}
	if code, _, errOut = leafctl(url, "bench", "--rounds", "0"); code != 2 || !strings.Contains(errOut, "--rounds") {
		t.Fatalf("bench --rounds 0 = %d: %s", code, errOut)
	}
}

func TestCredentials(t *testing.T) {
	const secret = "ctl-Pa55word"
	s := natstest.RunServer(t, func(o *server.Options) { o.Username, o.Password = "ctl", secret })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:    "ctl-auth",
		NATS:    config.NATSConfig{URL: s.ClientURL(), Auth: natsauth.Config{User: "ctl", Password: secret}},
		HTTP:    config.HTTPConfig{Addr: "off"},
		DataDir: t.TempDir(),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	pw := t.TempDir() + "/pw"
	if err := os.WriteFile(pw, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := leafctl(s.ClientURL(), "--user", "ctl", "--password-file", pw, "next", "demo"); code != 0 || out != "1\n" {
		t.Fatalf("with credentials: %d %q %s", code, out, errOut)
	}
	code, _, errOut := leafctl(s.ClientURL(), "next", "demo")
	if code != 1 || !strings.Contains(errOut, "Authorization") {
		t.Fatalf("without credentials: %d %s", code, errOut)
	}
	withPW := strings.Replace(s.ClientURL(), "nats://", "nats://ctl:wrong-"+secret+"@", 1)
	if code, _, errOut := leafctl(withPW, "next", "demo"); code != 1 || strings.Contains(errOut, secret) {
		t.Fatalf("a wrong password in the URL: %d, and the message must not show it: %s", code, errOut)
	}
}

// Every command answers -h with its usage and help for each of its flags,
// exit 0; a bad flag is a short usage error, exit 2.
func TestCommandHelp(t *testing.T) {
	// Every command of the table, and each tag subcommand.
	all := [][]string{{"tag", "list"}, {"tag", "create"}, {"tag", "set-step"}, {"tag", "set-max"}, {"tag", "restart"}, {"tag", "decode"}}
	over := overview()
	for _, c := range commands {
		if c.Synopsis() == nil {
			continue // hidden
		}
		if c.Name() != "tag" && c.Name() != "bench" { // bench -h is its own long page
			all = append(all, []string{c.Name()})
		}
		for _, l := range c.Synopsis() {
			if !strings.Contains(over, l.call) || l.what == "" {
				t.Errorf("leafctl -h lacks %q of %s", l.call, c.Name())
			}
		}
	}
	for _, cmd := range all {
		name := strings.Join(cmd, " ")
		code, out, errOut := leafctl("nats://127.0.0.1:1", append(cmd, "-h")...)
		if code != 0 || !strings.HasPrefix(out, "Usage: leafctl "+name) {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", name, code, out, errOut)
			continue
		}
		lines := strings.Split(out, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "  -") && (i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) == "") {
				t.Errorf("%s -h: flag %s has no help", name, strings.TrimSpace(l))
			}
		}
		if code, out, _ := leafctl("nats://127.0.0.1:1", "help", cmd[0]); code != 0 || !strings.HasPrefix(out, "Usage: leafctl "+cmd[0]) {
			t.Errorf("help %s: exit %d, %q", cmd[0], code, out)
		}
		code, _, errOut = leafctl("nats://127.0.0.1:1", append(cmd, "--no-such-flag")...)
		if code != 2 || !strings.Contains(errOut, "-h' for its usage") || len(errOut) > 300 {
			t.Errorf("%s --no-such-flag: exit %d, stderr %q; want 2 and a short usage error", name, code, errOut)
		}
	}
	if code, out, _ := leafctl("nats://127.0.0.1:1", "--version"); code != 0 || !strings.HasPrefix(out, "leafctl ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
}

// A command that does not exist is named as such, with the commands there
// are; exit 2.
func TestUnknownCommand(t *testing.T) {
	code, out, errOut := leafctl("nats://127.0.0.1:1", "nope")
	if code != 2 || out != "" || !strings.Contains(errOut, `unknown command "nope"`) ||
		!strings.Contains(errOut, "leafctl --help") || !strings.Contains(errOut, "next, snowflake") ||
		strings.Contains(errOut, "nope -h") {
		t.Fatalf("leafctl nope = %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// Global flags also follow the command, as in nats and kubectl: with
// LEAF_NATS at a dead port, --nats URL after each command reaches the
// node.
func TestGlobalFlagsAfterCommand(t *testing.T) {
	url := startLeafd(t)
	const dead = "nats://127.0.0.1:1"
	_, sf, _ := leafctl(url, "snowflake")
	tests := []struct {
		args []string
		ok   bool // exit 0; else any answer of the node (exit 1), not a usage or connect error
	}{
		{[]string{"next", "demo", "--nats", url}, true},
		{[]string{"next", "demo", "--nats=" + url, "--timeout", "3s", "-n", "2"}, true},
		{[]string{"snowflake", "-n", "2", "--nats", url}, true},
		{[]string{"decode", strings.TrimSpace(sf), "--nats", url}, true},
		{[]string{"nodes", "--nats", url}, true},
		{[]string{"pool", "--nats", url}, false},
		{[]string{"batch", "snowflake", "--wait", "100ms", "--nats", url}, false},
		{[]string{"tag", "create", "after", "--nats", url, "--step", "10"}, true},
		{[]string{"tag", "list", "--nats", url}, true},
		{[]string{"tag", "set-step", "after", "20", "--nats", url}, true},
		{[]string{"events", "--for", "100ms", "--nats", url}, true},
		{[]string{"bench", "-d", "100ms", "--warmup", "0s", "-c", "1", "--quiet", "--nats", url}, true},
	}
	seen := map[string]bool{"help": true}
	for _, tc := range tests {
		seen[tc.args[0]] = true
		code, out, errOut := leafctl(dead, tc.args...)
		if (tc.ok && code != 0) || code == 2 || strings.Contains(errOut, "127.0.0.1:1") {
			t.Errorf("leafctl %v = %d\nstdout: %.300s\nstderr: %s", tc.args, code, out, errOut)
		}
	}
	for _, name := range commandNames() {
		if !seen[name] {
			t.Errorf("command %s is not tried with a global flag after it", name)
		}
	}
	// --context counts after the command too: a context that does not
	// exist is a usage error, not a connection to the default URL.
	code, _, errOut := leafctl(dead, "next", "demo", "--context", "no-such-context")
	if code != 2 || !strings.Contains(errOut, "no-such-context") {
		t.Errorf("--context after the command = %d: %s", code, errOut)
	}
	// Help of a command lists its own flags, and points at the global ones.
	if _, out, _ := leafctl(dead, "next", "-h"); strings.Contains(out, "  -nats") || !strings.Contains(out, "after the command") {
		t.Errorf("next -h:\n%s", out)
	}
}
