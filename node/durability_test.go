package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/wire"
)

// leafdProc is a leafd started from its built binary, as users start it.
type leafdProc struct {
	cmd    *exec.Cmd
	url    string // the NATS URL from its banner
	stderr *testenv.Buffer
	exited chan error
	dead   chan struct{} // closed once Wait returned
}

var servingRE = regexp.MustCompile(`is serving ids on (nats://\S+)`)

// startLeafd runs bin with args (prefixed by wrap, e.g. strace) and waits
// for its banner. It fails the test if leafd exits first.
func startLeafd(t *testing.T, bin string, wrap []string, args ...string) *leafdProc {
	t.Helper()
	p, err := tryLeafd(t, bin, wrap, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func tryLeafd(t *testing.T, bin string, wrap []string, args ...string) (*leafdProc, error) {
	t.Helper()
	argv := append(append(append([]string{}, wrap...), bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // kill reaches a wrapped leafd too
	p := &leafdProc{cmd: cmd, stderr: &testenv.Buffer{}, exited: make(chan error, 1), dead: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.kill(t) })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		err := cmd.Wait()
		close(p.dead)
		p.exited <- err
	}()
	select {
	case p.url = <-urls:
		return p, nil
	case err := <-p.exited:
		p.exited <- err
		return nil, fmt.Errorf("leafd exited before serving: %v\n%s", err, p.stderr)
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("leafd did not start within 60s\n%s", p.stderr)
	}
}

// kill sends SIGKILL (a crash) and waits for the process to be gone.
func (p *leafdProc) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.dead:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.dead:
	case <-time.After(30 * time.Second):
		t.Errorf("leafd pid %d did not die", p.cmd.Process.Pid)
	}
}

// Two leafd on one data directory would run two nats-servers on one
// JetStream store: the second refuses at once and names the first.
func TestDataDirInUse(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "cmd/leafd")
	dir := t.TempDir()
	first := startLeafd(t, bin, nil, "--data", dir, "--nats-listen", "127.0.0.1:-1", "--http", "off", "--worker-registry", "off", "--name", "first")
	_, err := tryLeafd(t, bin, nil, "--data", dir, "--nats-listen", "127.0.0.1:-1", "--http", "off", "--worker-registry", "off", "--name", "second")
	if err == nil {
		t.Fatal("a second leafd started on the same data directory")
	}
	want := fmt.Sprintf("pid %d", first.cmd.Process.Pid)
	// The error is a log record: its text form escapes the quotes.
	named := regexp.MustCompile(`\\?"first\\?"`)
	if !strings.Contains(err.Error(), "data directory in use") || !strings.Contains(err.Error(), want) || !named.MatchString(err.Error()) {
		t.Fatalf("second leafd: %v; want an error naming %s and \"first\"", err, want)
	}
	// A data directory of its own whose jetstream is a link to the first
	// one's store (a copied data dir) is the same store.
	other := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "jetstream"), filepath.Join(other, "jetstream")); err != nil {
		t.Fatal(err)
	}
	_, err = tryLeafd(t, bin, nil, "--data", other, "--nats-listen", "127.0.0.1:-1", "--http", "off", "--worker-registry", "off", "--name", "linked")
	if err == nil || !strings.Contains(err.Error(), "data directory in use") || !strings.Contains(err.Error(), want) {
		t.Fatalf("leafd on a store linked to a live one's: %v; want data directory in use, naming %s", err, want)
	}
	// The lock is the directory's own, not a file an operator can remove
	// as "stale" (a second leafd would then serve the same ids from the
	// same JetStream store).
	if err := os.Remove(filepath.Join(dir, "leafd.lock")); err != nil {
		t.Fatal(err)
	}
	if _, err := tryLeafd(t, bin, nil, "--data", dir, "--nats-listen", "127.0.0.1:-1", "--http", "off", "--worker-registry", "off", "--name", "second"); err == nil ||
		!strings.Contains(err.Error(), "data directory in use") {
		t.Fatalf("second leafd after leafd.lock was removed: %v; want data directory in use", err)
	}
	// A crash leaves no stale lock: the kernel drops it with the process.
	first.kill(t)
	startLeafd(t, bin, nil, "--data", dir, "--nats-listen", "127.0.0.1:-1", "--http", "off", "--worker-registry", "off", "--name", "third")
}

// Power loss: a range reservation is acknowledged only once it is on disk.
// The embedded server runs JetStream with sync_always, so the alloc
// bucket's message block is fsynced at least once per reservation
// (without it: about once per 120 reservations, the 2-minute default sync
// and block rolls). strace counts the fsyncs of the KV_leaf_alloc stream's
// files against the bucket's writes.
func TestEmbeddedStoreFsyncsEveryReservation(t *testing.T) {
	t.Parallel()
	strace, err := exec.LookPath("strace")
	if err != nil {
		if testenv.Required() {
			t.Fatal("strace not installed (make test installs it)")
		}
		t.Skip("strace not installed")
	}
	bin := testenv.Build(t, "cmd/leafd")
	dir := t.TempDir()
	trace := filepath.Join(dir, "fsync.trace")
	// A fixed small step (max-step = step) makes every few requests a
	// reservation.
	p := startLeafd(t, bin, []string{strace, "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o", trace},
		"--data", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:-1", "--http", "off", "--worker-registry", "off",
		"--default-step", "200", "--max-step", "200")
	nc, err := nats.Connect(p.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const ids = 40000
	for got, fails := 0, 0; got < ids; {
		b, err := take(nc, "durable", 100, true)
		if err != nil { // traced, the node may run dry for a moment: 503
			if fails++; fails > 100 {
				t.Fatalf("after %d ids: %v", got, err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		got += len(b)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A background load (the next segment) may still be on its way: count
	// only what the node has had answered.
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "KV_"+kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	writes := s.CachedInfo().State.LastSeq // creates, reservations, markers: every write of the bucket
	p.kill(t)
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	syncs := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		// A call interrupted by another thread's line shows as
		// "fsync(fd</path> <unfinished ...>": count calls, not results.
		if strings.Contains(line, "sync(") && strings.Contains(line, "KV_"+kvstore.DefaultBucket+"/msgs/") {
			syncs++
		}
	}
	t.Logf("%d ids: %d writes to the alloc bucket, %d fsyncs of its files", ids, writes, syncs)
	if writes < ids/200 {
		t.Fatalf("only %d writes for %d ids at step 200: the test did not reserve what it meant to", writes, ids)
	}
	if uint64(syncs) < writes {
		t.Fatalf("%d fsyncs of the alloc bucket for %d acknowledged writes: a power cut loses reservations", syncs, writes)
	}
}

// A batch taken from the pool stays taken across a kill -9 of the server
// (here the embedded one, with its leafd): after the restart no batch
// holds an id that a client already took.
func TestPoolBatchStaysTakenAcrossKill(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "cmd/leafd")
	dir := t.TempDir()
	args := []string{"--data", dir, "--nats-listen", "127.0.0.1:-1", "--http", "off", "--worker-registry", "off",
		"--pool", "pooled", "--pool-depth", "8", "--pool-batch", "100"}
	seen := map[int64]bool{}
	taken := 0
	for round := range 4 {
		p := startLeafd(t, bin, nil, args...)
		nc, err := nats.Connect(p.url)
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		// Take batches right up to the crash: the last take's delete is
		// confirmed only a moment before the kill.
		for i := range 12 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			b, err := pool.Take(ctx, js, pool.SegmentSubject("pooled"), 5*time.Second)
			cancel()
			if errors.Is(err, pool.ErrEmpty) || errors.Is(err, pool.ErrUsed) {
				continue
			}
			if err != nil {
				t.Fatalf("round %d take %d: %v", round, i, err)
			}
			for _, id := range b {
				if seen[id] {
					t.Fatalf("round %d: id %d taken twice from the pool", round, id)
				}
				seen[id] = true
			}
			taken++
		}
		nc.Close()
		p.kill(t)
	}
	if taken < 8 {
		t.Fatalf("only %d batches taken", taken)
	}
	t.Logf("%d batches, %d ids taken across 4 kill -9, none twice", taken, len(seen))
}

// On an external NATS a stream with one replica is as durable as that one
// server's disk sync: the node says so at start, naming each stream. The
// embedded server syncs always and says nothing.
func TestWarnsOnUnreplicatedStreams(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	for _, tc := range []struct {
		name string
		cfg  config.Config
		want []string
	}{
		{"external", config.Config{Name: "r1", NATS: config.NATSConfig{URL: srv.ClientURL()}, Pool: config.PoolConfig{Tags: "demo"}},
			[]string{"KV_leaf_alloc", "KV_leaf_workers", "LEAF_POOL"}},
		{"embedded", config.Config{Name: "emb", NATS: config.NATSConfig{Listen: "127.0.0.1:-1"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testenv.Buffer
			tc.cfg.HTTP.Addr, tc.cfg.DataDir = "off", t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n, err := node.Start(ctx, tc.cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close(context.Background())
			var warned []string
			for line := range strings.SplitSeq(logs.String(), "\n") {
				if strings.Contains(line, "one replica") {
					warned = append(warned, line)
				}
			}
			for _, s := range tc.want {
				if !strings.Contains(strings.Join(warned, "\n"), "stream="+s) {
					t.Errorf("no warning for %s in:\n%s", s, strings.Join(warned, "\n"))
				}
			}
			if tc.want == nil && len(warned) > 0 {
				t.Errorf("embedded server warned:\n%s", strings.Join(warned, "\n"))
			}
		})
	}
}

// A data directory remembers the snowflake layout it made ids with: a
// restart with another epoch (or unit, or bits) would map later times onto
// earlier ids (moving the epoch 10 s later repeats ids already made), so it
// is refused.
func TestLayoutChangeRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func(epoch string) (*node.Node, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return node.Start(ctx, config.Config{
			Name:      "layout",
			NATS:      config.NATSConfig{Listen: "127.0.0.1:-1"},
			HTTP:      config.HTTPConfig{Addr: "off"},
			DataDir:   dir,
			Registry:  config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 5},
			Snowflake: config.SnowflakeConfig{Epoch: epoch},
		}, nil)
	}
	n, err := start("")
	if err != nil {
		t.Fatal(err)
	}
	_ = n.Close(context.Background())
	if n, err = start("1288834984657"); err == nil {
		_ = n.Close(context.Background())
		t.Fatal("a restart with the epoch moved 10 s started")
	}
	if !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "layout was") {
		t.Fatalf("restart with another epoch: %v; want ErrConfig naming the recorded layout", err)
	}
	if n, err = start(""); err != nil {
		t.Fatalf("restart with the recorded layout: %v", err)
	}
	_ = n.Close(context.Background())
}

// A node on a new data directory has no layout record of its own; the live
// nodes are the record. One with another epoch beside them would serve ids
// equal to theirs in the same queue group: it refuses to start, naming the
// live node.
func TestPeerLayoutMismatchRefused(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	startNode(t, config.Config{Name: "first", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 1}})
	try := func(cfg config.Config) error {
		cfg.NATS.URL, cfg.HTTP.Addr, cfg.DataDir = s.ClientURL(), "off", t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := node.Start(ctx, cfg, nil)
		if err == nil {
			_ = n.Close(context.Background())
		}
		return err
	}
	for _, c := range []struct {
		cfg  config.Config
		want string
	}{
		{config.Config{Name: "epoch", Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 2}, Snowflake: config.SnowflakeConfig{Epoch: "1288834984657"}}, "serves layout"},
	} {
		err := try(c.cfg)
		if !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "live node first") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrConfig naming node first and %q", c.cfg.Name, err, c.want)
		}
	}
	if err := try(config.Config{Name: "same", Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 3}}); err != nil {
		t.Fatalf("a node with the same layout and registry: %v", err)
	}
}

// TestCrashRestartFast: leafd killed (kill -9) and started again on its
// data directory serves at once: its previous instance's key in the
// members bucket, which no process renews any more, is deleted at the
// start (the directory's lock proves that instance dead) instead of being
// waited out for the members' TTL (10 s).
func TestCrashRestartFast(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "cmd/leafd")
	dir := t.TempDir()
	args := []string{"--data", dir, "--nats-listen", "127.0.0.1:-1", "--http", "off", "--worker-registry", "off"}
	startLeafd(t, bin, nil, args...).kill(t)
	start := time.Now()
	p := startLeafd(t, bin, nil, args...)
	took := time.Since(start)
	t.Logf("restarted after kill -9 in %v", took)
	if took > 5*time.Second {
		t.Fatalf("restart after kill -9 took %v: the dead instance's members key was waited out\n%s", took, p.stderr)
	}
}

// TestCopiedDataDirKeepsLiveMember: a data directory copied while its node
// runs (a second host with the same configuration and name, started from
// a copy) names that live node's instance in its record; the copy's node
// must not take it for its own dead predecessor and delete its members
// key, whatever becomes of its own start.
func TestCopiedDataDirKeepsLiveMember(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	cfg := config.Config{Name: "twin", NATS: config.NATSConfig{URL: srv.ClientURL()}, DataDir: t.TempDir(), HTTP: config.HTTPConfig{Addr: "off"}}
	startNode(t, cfg)
	rec, err := os.ReadFile(filepath.Join(cfg.DataDir, "instance.json"))
	if err != nil {
		t.Fatal(err)
	}
	var inst struct {
		Instance string `json:"instance"`
	}
	if err := json.Unmarshal(rec, &inst); err != nil || inst.Instance == "" {
		t.Fatalf("instance record %s: %v", rec, err)
	}
	copyDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(copyDir, "instance.json"), rec, 0o644); err != nil {
		t.Fatal(err)
	}
	b := cfg
	b.DataDir = copyDir
	if n, err := tryStart(t, b, 15*time.Second); err == nil {
		_ = n.Close(context.Background())
	}
	js, err := jetstream.New(natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, wire.MembersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, inst.Instance); err != nil {
		t.Fatalf("the live node's members key %s: %v", inst.Instance, err)
	}
}
