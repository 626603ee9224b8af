package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/testenv"
)

// leafdRun is a leafd process started from the built binary.
type leafdRun struct {
	cmd         *exec.Cmd
	out, errOut testenv.Buffer
	exited      chan error
}

func startLeafd(t *testing.T, bin string, args ...string) *leafdRun {
	t.Helper()
	p := &leafdRun{cmd: exec.Command(bin, args...), exited: make(chan error, 1)}
	p.cmd.Env = os.Environ()
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// outcome waits until p exits (its exit code) or says it serves (-1).
func (p *leafdRun) outcome(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-p.exited:
			p.exited <- err
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			if err != nil {
				t.Fatal(err)
			}
			return 0
		case <-time.After(20 * time.Millisecond):
		}
		if strings.Contains(p.out.String(), "is serving ids") {
			return -1
		}
		if time.Now().After(deadline) {
			t.Fatalf("leafd neither served nor exited: %s", p.errOut.String())
		}
	}
}

// A snowflake layout that cannot make ids now (its epoch in the future,
// its time bits run out) stops leafd at start with an error that names
// the cause, rather than a node that says it is ready and answers every
// snowflake request 503. The refused layout is not recorded: the same data
// directory starts on a good one.
func TestSnowflakeEpochRefused(t *testing.T) {
	bin := testenv.Build(t, "cmd/leafd")
	tomorrow := time.Now().UTC().AddDate(0, 0, 2).Format(time.DateOnly)
	tests := []struct {
		name string
		args []string
		says []string
	}{
		{"epoch in the future", []string{"--snowflake-epoch", tomorrow}, []string{"--snowflake-epoch", "in the future", tomorrow}},
		{"epoch in the future, unit s", []string{"--snowflake-layout", "uidgen", "--snowflake-epoch", tomorrow}, []string{"--snowflake-epoch", "in the future"}},
		{"time bits run out", []string{"--snowflake-layout", "uidgen"}, []string{"--snowflake-epoch", "ran out of time bits", "2024-11-"}},
		{"a short layout run out", []string{"--snowflake-layout", "20+10+33", "--snowflake-epoch", "2026-01-01"}, []string{"ran out of time bits"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := t.TempDir()
			base := []string{"--nats-listen", "127.0.0.1:-1", "--http", "127.0.0.1:0", "--data", data, "--name", "epoch"}
			p := startLeafd(t, bin, append(base, tt.args...)...)
			if code := p.outcome(t); code != 1 {
				t.Fatalf("leafd %v: exit %d, want 1 at start; stderr:\n%s", tt.args, code, p.errOut.String())
			}
			lines := strings.Split(strings.TrimSpace(p.errOut.String()), "\n")
			last := lines[len(lines)-1]
			for _, s := range tt.says {
				if !strings.Contains(last, s) {
					t.Errorf("last line %q does not say %q", last, s)
				}
			}
			good := startLeafd(t, bin, base...)
			if code := good.outcome(t); code != -1 {
				t.Fatalf("leafd on the same data directory with the default layout: exit %d; stderr:\n%s", code, good.errOut.String())
			}
			if err := good.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-good.exited:
				good.exited <- err
				if err != nil {
					t.Fatalf("%v after SIGTERM: %s", err, good.errOut.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("leafd did not stop on SIGTERM")
			}
		})
	}
}
