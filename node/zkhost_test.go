package node_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// zkLeafd is a leafd started from the built binary.
type zkLeafd struct {
	cmd    *exec.Cmd
	out    *testenv.Buffer
	done   chan struct{}
	err    error // of Wait, once done is closed
	natsAt string
}

// startZKLeafd starts bin with args; the process is killed at the end of
// the test.
func startZKLeafd(t *testing.T, bin, natsAt string, args ...string) *zkLeafd {
	t.Helper()
	p := &zkLeafd{cmd: exec.Command(bin, args...), out: &testenv.Buffer{}, done: make(chan struct{}), natsAt: natsAt}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("leafd %v:\n%s", args, p.out.String())
		}
	})
	return p
}

// zkSharedPorts returns n ports free on every one of hosts.
func zkSharedPorts(t *testing.T, n int, hosts ...string) []int {
	t.Helper()
	var ports []int
	for try := 0; len(ports) < n && try < 100; try++ {
		l, err := net.Listen("tcp", hosts[0]+":0")
		if err != nil {
			t.Fatalf("listen on %s: %v", hosts[0], err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ls := []net.Listener{l}
		ok := true
		for _, h := range hosts[1:] {
			l2, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l2)
		}
		for _, l := range ls {
			_ = l.Close()
		}
		if ok {
			ports = append(ports, port)
		}
	}
	if len(ports) < n {
		t.Fatalf("no %d ports free on all of %v", n, hosts)
	}
	return ports
}

// snowflakeIDs asks the leafd behind p's NATS for n snowflake ids, in
// batches, waiting until it serves.
func zkSnowflakeIDs(t *testing.T, p *zkLeafd, n int) []int64 {
	t.Helper()
	var nc *nats.Conn
	testenv.Eventually(t, "leafd at "+p.natsAt+" takes NATS connections", 60*time.Second, func() bool {
		select {
		case <-p.done:
			t.Fatalf("leafd at %s exited: %v\n%s", p.natsAt, p.err, p.out.String())
		default:
		}
		var err error
		nc, err = nats.Connect("nats://"+p.natsAt, nats.Timeout(time.Second))
		return err == nil
	})
	defer nc.Close()
	var ids []int64
	for len(ids) < n {
		batch := min(n-len(ids), wire.DefaultMaxBatch)
		var got []int64
		testenv.Eventually(t, "leafd at "+p.natsAt+" serves snowflake ids", 60*time.Second, func() bool {
			var err error
			got, err = takeFrom(nc, wire.SnowflakeSubject, batch, true)
			return err == nil
		})
		ids = append(ids, got...)
	}
	return ids
}

// takeSnowflake asks the leafd at natsAt for n snowflake ids, in batches.
func takeSnowflake(natsAt string, n int) ([]int64, error) {
	nc, err := nats.Connect("nats://" + natsAt)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	var ids []int64
	for len(ids) < n {
		got, err := takeFrom(nc, wire.SnowflakeSubject, min(n-len(ids), wire.DefaultMaxBatch), true)
		if err != nil {
			return ids, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

func zkWorkersOf(ids []int64) map[int64]int {
	l := snowflake.LeafLayout()
	w := map[int64]int{}
	for _, id := range ids {
		w[l.Decompose(id).Worker]++
	}
	return w
}

// TestTwoHostsZKIdentity: leafd on two hosts (127.0.0.2 and 127.0.0.3)
// with identical flags and ports and no --zk-addr. A ZooKeeper identity is
// its own host's address, so the two get distinct worker ids and no id is
// served twice.
func TestTwoHostsZKIdentity(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZooKeeper(t)
	bin := testenv.Build(t, "./cmd/leafd")
	hosts := []string{"127.0.0.2", "127.0.0.3"}
	ports := zkSharedPorts(t, 2, hosts...)
	name := testenv.RandomName("hosts", 6)
	var procs []*zkLeafd
	for _, h := range hosts {
		natsAt := fmt.Sprintf("%s:%d", h, ports[0])
		procs = append(procs, startZKLeafd(t, bin, natsAt,
			"--nats-listen", natsAt,
			"--http", fmt.Sprintf("%s:%d", h, ports[1]),
			"--data", filepath.Join(t.TempDir(), "data"),
			"--worker-registry", "zk", "--zk", zkAddr, "--zk-name", name,
			"--pool", "", "--log-level", "warn"))
	}
	const each = 50_000
	// Both serve; then both are asked at once, as clients of two hosts
	// would, so that equal worker ids would give equal ids.
	for _, p := range procs {
		zkSnowflakeIDs(t, p, 1)
	}
	all := make([][]int64, len(procs))
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { all[i], errs[i] = takeSnowflake(p.natsAt, each) })
	}
	wg.Wait()
	seen := map[int64]bool{}
	workers := map[int64]string{}
	for i, ids := range all {
		if errs[i] != nil {
			t.Fatalf("%s: %v", hosts[i], errs[i])
		}
		ws := zkWorkersOf(ids)
		if len(ws) != 1 {
			t.Fatalf("%s served ids of workers %v, want one", hosts[i], ws)
		}
		for w := range ws {
			if other, ok := workers[w]; ok {
				t.Errorf("%s and %s both serve worker %d", other, hosts[i], w)
			}
			workers[w] = hosts[i]
		}
	}
	dups := 0
	for _, ids := range all {
		for _, id := range ids {
			if seen[id] {
				dups++
			}
			seen[id] = true
		}
	}
	if dups > 0 {
		t.Fatalf("%d duplicate ids in %d", dups, 2*each)
	}
}

// TestSameZKAddrRefused: a second leafd with the --zk-addr of a live one
// (another host configured with the same identity) refuses snowflake with
// an error that names the first; the first keeps serving.
func TestSameZKAddrRefused(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZooKeeper(t)
	bin := testenv.Build(t, "./cmd/leafd")
	hosts := []string{"127.0.0.2", "127.0.0.3"}
	ports := zkSharedPorts(t, 3, hosts...)
	name := testenv.RandomName("same", 6)
	identity := fmt.Sprintf("127.0.0.1:%d", ports[2])
	var procs []*zkLeafd
	for i, h := range hosts {
		natsAt := fmt.Sprintf("%s:%d", h, ports[0])
		procs = append(procs, startZKLeafd(t, bin, natsAt,
			"--name", fmt.Sprintf("node-%d", i),
			"--nats-listen", natsAt,
			"--http", fmt.Sprintf("%s:%d", h, ports[1]),
			"--data", filepath.Join(t.TempDir(), "data"),
			"--worker-registry", "zk", "--zk", zkAddr, "--zk-name", name, "--zk-addr", identity,
			"--pool", "", "--log-level", "warn"))
		if i == 0 {
			first := zkSnowflakeIDs(t, procs[0], 1000)
			if len(zkWorkersOf(first)) != 1 {
				t.Fatalf("first node: workers %v", zkWorkersOf(first))
			}
		}
	}
	second := procs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	select {
	case <-second.done:
	case <-ctx.Done():
		t.Fatalf("the second leafd with --zk-addr %s still runs after %v:\n%s", identity, 90*time.Second, second.out.String())
	}
	var exit *exec.ExitError
	out := second.out.String()
	if !errors.As(second.err, &exit) || !strings.Contains(out, "in use") || !strings.Contains(out, "node node-0") ||
		!strings.Contains(out, fmt.Sprintf("pid %d", procs[0].cmd.Process.Pid)) {
		t.Fatalf("second leafd: %v, output:\n%s\nwant a failed start naming node node-0 and pid %d", second.err, out, procs[0].cmd.Process.Pid)
	}
	if ids := zkSnowflakeIDs(t, procs[0], 1000); len(ids) != 1000 {
		t.Fatalf("first node after the refusal: %d ids", len(ids))
	}
}

// TestFrozenLeafdZK: a leafd frozen (SIGSTOP) past its ZooKeeper session
// loses its worker id to a leafd started with the same --zk-addr on
// another host, which waits for the frozen one's session to expire; woken
// (SIGCONT) while the new one serves, the frozen one serves no id the new
// one serves.
func TestFrozenLeafdZK(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZooKeeper(t)
	bin := testenv.Build(t, "./cmd/leafd")
	hosts := []string{"127.0.0.2", "127.0.0.3"}
	ports := zkSharedPorts(t, 3, hosts...)
	name := testenv.RandomName("freeze", 6)
	identity := fmt.Sprintf("127.0.0.1:%d", ports[2])
	start := func(i int) *zkLeafd {
		h := hosts[i]
		natsAt := fmt.Sprintf("%s:%d", h, ports[0])
		return startZKLeafd(t, bin, natsAt,
			"--name", fmt.Sprintf("node-%d", i),
			"--nats-listen", natsAt,
			"--http", fmt.Sprintf("%s:%d", h, ports[1]),
			"--data", filepath.Join(t.TempDir(), "data"),
			"--worker-registry", "zk", "--zk", zkAddr, "--zk-name", name, "--zk-addr", identity,
			"--pool", "", "--log-level", "warn")
	}
	a := start(0)
	before := zkSnowflakeIDs(t, a, 10_000)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
	b := start(1)
	fromB := zkSnowflakeIDs(t, b, 10_000) // serves once a's session expired
	if wa, wb := zkWorkersOf(before), zkWorkersOf(fromB); len(wa) != 1 || fmt.Sprint(wa) != fmt.Sprint(wb) {
		t.Fatalf("workers: frozen %v, taker %v; want the taker on the frozen one's worker id", wa, wb)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Both are asked at once: a 200 times (an error is a refusal), b for
	// 100k ids.
	var (
		wg                sync.WaitGroup
		fromA, moreB      []int64
		errB              error
		aServed, aRefused int
	)
	wg.Go(func() {
		nc, err := nats.Connect("nats://"+a.natsAt, nats.MaxReconnects(-1))
		if err != nil {
			return
		}
		defer nc.Close()
		for range 200 {
			got, err := takeFrom(nc, wire.SnowflakeSubject, 500, true)
			if err != nil {
				aRefused++
				time.Sleep(10 * time.Millisecond)
				continue
			}
			aServed++
			fromA = append(fromA, got...)
		}
	})
	wg.Go(func() { moreB, errB = takeSnowflake(b.natsAt, 100_000) })
	wg.Wait()
	if errB != nil {
		t.Fatalf("taker: %v", errB)
	}
	t.Logf("woken leafd: %d requests served (%d ids), %d refused", aServed, len(fromA), aRefused)
	seen := map[int64]bool{}
	for _, id := range append(fromB, moreB...) {
		seen[id] = true
	}
	dups := 0
	for _, id := range append(before, fromA...) {
		if seen[id] {
			dups++
		}
	}
	if dups > 0 {
		t.Fatalf("%d ids served by both the woken leafd and the taker", dups)
	}
}
