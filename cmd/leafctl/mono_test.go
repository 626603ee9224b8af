package main

import (
	"context"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/leafmq/leafmq/client"
	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/mono"
)

// TestMonoLeaderFrozenThroughLeafd: two built leafd on one NATS serve a
// monotonic tag while eight clients record a history; the leader is frozen
// (SIGSTOP) past its lease, the other node takes over, and the frozen one
// is woken (SIGCONT) and kept running: the history stays strictly ordered
// and without a repeat, because the woken leader's fence has passed.
func TestMonoLeaderFrozenThroughLeafd(t *testing.T) {
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	bin := testenv.Build(t, "cmd/leafd")
	procs := map[string]int{}
	for _, name := range []string{"frz-1", "frz-2"} {
		cmd, _ := runLeafdArgs(t, bin, "--nats", url, "--http", "127.0.0.1:0", "--name", name,
			"--data", filepath.Join(t.TempDir(), name), "--worker-registry", "off")
		procs[name] = cmd.Process.Pid
	}
	if code, out, errOut := leafctl(url, "tag", "create", "ticks", "--mode", "mono", "--step", "100"); code != 0 {
		t.Fatalf("tag create: %d %s %s", code, out, errOut)
	}
	nc := natstest.Connect(t, url)
	leader := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		nodes, err := ask.Status(ctx, nc, "", 300*time.Millisecond)
		if err != nil {
			return ""
		}
		for _, n := range nodes {
			if slices.Contains(n.Mono, "ticks") {
				return n.Node
			}
		}
		return ""
	}
	testenv.Eventually(t, "a leader of ticks", 30*time.Second, func() bool { return leader() != "" })

	cl, err := client.New(nc, client.WithMaxWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h := mono.NewHistory()
	stop := h.Load(8, func() ([]int64, error) {
		id, err := cl.Mono(context.Background(), "ticks")
		return []int64{id}, err
	}, func(err error) { t.Errorf("Mono: %v", err) })
	count := h.Len
	testenv.Eventually(t, "ids before the freeze", 20*time.Second, func() bool { return count() > 1000 })
	frozen := leader()
	pid := procs[frozen]
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	woken := false
	wake := func() {
		if !woken {
			woken = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer wake()
	before := count()
	testenv.Eventually(t, "ids from the other node", 30*time.Second, func() bool { return count() > before+1000 })
	time.Sleep(2 * time.Second) // frozen past its lease (5 s TTL) for certain
	wake()
	after := count()
	testenv.Eventually(t, "ids after the wake-up", 30*time.Second, func() bool { return count() > after+2000 })
	stop()
	if err := h.Check(); err != nil {
		t.Fatalf("%v (history of %d calls; %s frozen)", err, h.Len(), frozen)
	}
	t.Logf("%d calls, %s frozen and woken, strictly ordered", h.Len(), frozen)
}
