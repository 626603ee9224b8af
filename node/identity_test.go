package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/snowflake"
	sfkv "github.com/leafmq/leafmq/snowflake/kvworker"
	"github.com/leafmq/leafmq/wire"
)

// startErr starts a node that is expected to refuse, and returns its error.
func startErr(t *testing.T, cfg config.Config) error {
	t.Helper()
	n, err := tryStart(t, cfg, 90*time.Second)
	if err == nil {
		_ = n.Close(context.Background())
	}
	return err
}

// TestSameNameRefused: the checks against live peers — their
// floors, worker ids and layout, and whether any is alive before a
// graceful stop hands ranges back — skip the node's own name. A second
// process under a live node's --name would be taken for that node and pass
// them all unseen, so it refuses to start, naming the live one.
func TestSameNameRefused(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	base := config.Config{Name: "twin", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryKV}}
	a := startNode(t, base)
	waitServing(t, a)
	err := startErr(t, base)
	if !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "node twin (pid ") || !strings.Contains(err.Error(), "--name") {
		t.Fatalf("a second node named twin beside a live one: %v, want ErrConfig naming the live one and --name", err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Gone, the name is free again.
	b := startNode(t, base)
	waitServing(t, b)
}

// TestZKCachedRegistrationAsksPeers: with ZooKeeper
// unreachable a node registers from its cache file (Leaf's
// workerID.properties), which no owner znode guards. Another host with the
// same --zk-addr that reaches ZooKeeper gets the same worker id. Whichever
// starts second must see the other serving it and refuse: both serving
// would repeat each other's ids.
func TestZKCachedRegistrationAsksPeers(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	base := config.Config{
		NATS:     config.NATSConfig{URL: s.ClientURL()},
		Registry: config.RegistryConfig{Kind: config.RegistryZK, ZK: testenv.ZooKeeper(t), ZKName: testenv.RandomName("cache", 6), ZKAddr: "127.0.0.1:7301"},
	}
	const unreachable = "127.0.0.1:1"
	dirA := t.TempDir()
	cfgA := base
	cfgA.Name, cfgA.DataDir = "ca", dirA
	a := startNode(t, cfgA) // writes its cache file
	waitServing(t, a)
	worker := a.Snowflake().Worker()
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// B reaches ZooKeeper: the same identity, the same worker id.
	cfgB := base
	cfgB.Name = "cb"
	b := startNode(t, cfgB)
	waitServing(t, b)
	if w := b.Snowflake().Worker(); w != worker {
		t.Fatalf("B has worker %d, A had %d: the test needs one identity", w, worker)
	}
	// A again, ZooKeeper unreachable: its cache file has the worker B serves.
	cfgA.Registry.ZK = unreachable
	err := startErr(t, cfgA)
	if !errors.Is(err, snowflake.ErrWorkerInUse) || !strings.Contains(err.Error(), "node cb") {
		t.Fatalf("A from its cache file beside B serving worker %d: %v, want ErrWorkerInUse naming node cb", worker, err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// B gone, A serves from its cache file; now a node that reaches
	// ZooKeeper is the second one.
	a = startNode(t, cfgA)
	waitServing(t, a)
	if w := a.Snowflake().Worker(); w != worker {
		t.Fatalf("A from its cache file: worker %d, want %d", w, worker)
	}
	cfgC := base
	cfgC.Name = "cc"
	err = startErr(t, cfgC)
	if !errors.Is(err, snowflake.ErrWorkerInUse) || !strings.Contains(err.Error(), "node ca") {
		t.Fatalf("C through ZooKeeper beside A serving worker %d from its cache: %v, want ErrWorkerInUse naming node ca", worker, err)
	}
}

// TestErasedWorkerWaitsForPastLease: an operator erases a live
// node's worker records (`nats stream purge KV_leaf_workers --subject
// '$KV.leaf_workers.w0'`, and t0): the node loses worker 0 and claims
// another; the next node gets worker 0 with no lease on record. The first
// node may have made ids of worker 0 up to its last lease, and says so in
// its status (Past): the newcomer must not serve below it. Served at once,
// it would repeat the first node's ids (a layout in seconds, ids borrowed
// ahead of the clock).
//
// Restarted in between (its memory of worker w gone), the first node
// reports w from its lease files in the data directory.
func TestErasedWorkerWaitsForPastLease(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) { erasedWorkerWaits(t, restart) })
	}
}

func erasedWorkerWaits(t *testing.T, restart bool) {
	s := natstest.RunServer(t)
	base := config.Config{NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryKV}, Snowflake: config.SnowflakeConfig{Layout: "50+1+12", TimeUnit: "s", LeaseAhead: 20 * time.Second}}
	leasedBefore(t, s.ClientURL(), "50+1+12", "s")
	cfgA := base
	cfgA.Name, cfgA.DataDir = "pa", t.TempDir()
	a := startNode(t, cfgA)
	waitServing(t, a)
	w := a.Snowflake().Worker()
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	str, err := js.Stream(ctx, "KV_leaf_workers")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "leaf_workers")
	if err != nil {
		t.Fatal(err)
	}
	// Hold the erased id for a moment, as a third process would, so that
	// the first node claims the other one.
	hold := fmt.Sprintf("w%d", w)
	for _, key := range []string{fmt.Sprintf("w%d", w), fmt.Sprintf("t%d", w)} {
		if err := str.Purge(ctx, jetstream.WithPurgeSubject("$KV.leaf_workers."+key)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Create(ctx, hold, []byte("{}"), jetstream.KeyTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the first node on the other worker id", 30*time.Second, func() bool {
		return a.Snowflake().Worker() == 1-w && a.Snowflake().State() == snowflake.StateServing && a.SnowflakeJoined()
	})
	// The lost worker's ids, borrowed ahead into the ring, are gone.
	nc := natstest.Connect(t, s.ClientURL())
	for range 20 {
		ids, err := takeFrom(nc, wire.SnowflakeSubject, 64, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if got := a.Snowflake().Layout().Decompose(id).Worker; got != 1-w {
				t.Fatalf("the first node serves id %d of worker %d after it lost that worker id for %d", id, got, 1-w)
			}
		}
	}
	past := a.Snowflake().Past()[w]
	if past.IsZero() {
		t.Fatalf("the first node reports no past lease of worker %d", w)
	}
	if restart {
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		a = startNode(t, cfgA)
		if got := a.Snowflake().Worker(); got != 1-w {
			t.Fatalf("the first node restarted on worker %d, want %d", got, 1-w)
		}
	}

	// The hold ends: the next node gets worker w, with no lease on record.
	if err := kv.Purge(ctx, hold); err != nil {
		t.Fatal(err)
	}
	b, ids := firstIDsOn(t, base, "pb", w)
	layout := b.Snowflake().Layout()
	t.Logf("past %v, first id %v", past, layout.Decompose(ids[0]).Time)
	for _, id := range ids {
		if at := layout.Decompose(id).Time; at.Before(past.Truncate(time.Second)) {
			t.Fatalf("the second node's id %d of worker %d is of %v, below %v, the lease the first node had of it", id, w, at, past)
		}
	}
}

// startTogether starts a node on each cfg at the same moment and returns
// the nodes that started (closed at cleanup) and the errors of the others.
func startTogether(t *testing.T, cfgs ...config.Config) ([]*node.Node, []error) {
	t.Helper()
	type res struct {
		n   *node.Node
		err error
	}
	out := make(chan res, len(cfgs))
	gate := make(chan struct{})
	for _, cfg := range cfgs {
		go func() {
			<-gate
			n, err := tryStart(t, cfg, 90*time.Second)
			out <- res{n, err}
		}()
	}
	close(gate)
	var (
		nodes []*node.Node
		errs  []error
	)
	for range cfgs {
		r := <-out
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		t.Cleanup(func() { _ = r.n.Close(context.Background()) })
		nodes = append(nodes, r.n)
	}
	return nodes, errs
}

// TestWorkerRegisteredTogether: two nodes that register one
// worker id at the same moment, by a registration no registry guards (one
// static --worker-id here; ZooKeeper's cache file, or two registries, in
// the field), each ask the live nodes before serving. A node answered
// leaf.admin.status only once it served, so neither saw the other (two
// hosts started together from one --zk-addr's cache file). A starting node answers from its first
// connection with the worker id it is registering: of two, the later asks
// after the earlier's claim and refuses (both may, never neither).
func TestWorkerRegisteredTogether(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	for i := range 3 {
		var cfgs []config.Config
		for _, name := range []string{"left", "right"} {
			cfgs = append(cfgs, config.Config{
				Name:      fmt.Sprintf("%s%d", name, i),
				NATS:      config.NATSConfig{URL: s.ClientURL()},
				Registry:  config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 9},
				Snowflake: config.SnowflakeConfig{PeerClockMax: -1},
			})
		}
		nodes, errs := startTogether(t, cfgs...)
		if len(nodes) > 1 {
			t.Fatalf("round %d: both nodes serve worker 9", i)
		}
		for _, err := range errs {
			if !errors.Is(err, snowflake.ErrWorkerInUse) {
				t.Fatalf("round %d: %v, want ErrWorkerInUse", i, err)
			}
		}
		for _, n := range nodes {
			if err := n.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSameNameStartedTogether: two processes under one --name
// started at the same moment; neither was up to answer the other's check
// (with max_id lowered twice the two would take each other's floors for
// their own and repeat segment ids). At most one starts.
func TestSameNameStartedTogether(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	for i := range 3 {
		cfg := config.Config{Name: fmt.Sprintf("twin%d", i), NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}}
		nodes, errs := startTogether(t, cfg, cfg)
		if len(nodes) > 1 {
			t.Fatalf("round %d: two live nodes named %s", i, cfg.Name)
		}
		for _, err := range errs {
			if !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "--name") {
				t.Fatalf("round %d: %v, want ErrConfig about --name", i, err)
			}
		}
		for _, n := range nodes {
			if err := n.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// leasedBefore registers every worker id of the layout in the KV registry
// for a moment and leases it to now: ids served before, so a node's first
// registration has a lease on record and need not wait out a stopped
// holder (a worker id with no lease on record waits --lease-ahead).
func leasedBefore(t *testing.T, url, spec, unit string) {
	t.Helper()
	layout, err := snowflake.ParseLayout(spec, unit, "")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	var regs []*sfkv.Registry
	for range layout.MaxWorker() + 1 {
		r, err := sfkv.Open(t.Context(), js, layout, sfkv.Options{Node: "before"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Register(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := r.Lease(t.Context(), time.Now()); err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
	}
	for _, r := range regs {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestErasedWorkerOfStoppedHolder: a worker id's records
// erased (`nats stream purge KV_leaf_workers --subject …w0` and t0) and its
// holder stopped: no live node reports it, and the registry has no lease.
// The holder made ids up to its time lease, ahead of the clock under load;
// the next node on that id must start above them: served at once, it
// would repeat them.
func TestErasedWorkerOfStoppedHolder(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	base := config.Config{
		NATS:      config.NATSConfig{URL: s.ClientURL()},
		Registry:  config.RegistryConfig{Kind: config.RegistryKV},
		Snowflake: config.SnowflakeConfig{Layout: "50+1+12", TimeUnit: "s", LeaseAhead: 6 * time.Second, PeerClockMax: -1},
	}
	leasedBefore(t, s.ClientURL(), "50+1+12", "s")
	cfgA := base
	cfgA.Name = "sa"
	a := startNode(t, cfgA)
	waitServing(t, a)
	w := a.Snowflake().Worker()
	ctx := t.Context()
	layout, high := borrowAhead(t, a, 12_000)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(ctx, "KV_leaf_workers")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{fmt.Sprintf("w%d", w), fmt.Sprintf("t%d", w)} {
		if err := str.Purge(ctx, jetstream.WithPurgeSubject("$KV.leaf_workers."+key)); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.KeyValue(ctx, "leaf_workers")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, fmt.Sprintf("w%d", 1-w), []byte("{}"), jetstream.KeyTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, ids := firstIDsOn(t, base, "sb", w)
	t.Logf("the second node's first id is of %v, the holder's last of %v", layout.Decompose(ids[0]).Time, high)
	for _, id := range ids {
		if at := layout.Decompose(id).Time; !at.After(high) {
			t.Fatalf("the second node's id %d of worker %d is of %v, not above %v, the time of the stopped holder's ids", id, w, at, high)
		}
	}
}

// firstIDsOn starts a node named name on cfg, which must get the erased
// worker id w, and returns it with its first snowflake ids: the first of
// the ring its responder serves from.
func firstIDsOn(t *testing.T, cfg config.Config, name string, w int64) (*node.Node, []int64) {
	t.Helper()
	cfg.Name = name
	b := startNode(t, cfg)
	if got := b.Snowflake().Worker(); got != w {
		t.Fatalf("the second node has worker %d, want the erased %d", got, w)
	}
	var ids []int64
	testenv.Eventually(t, "ids from the second node", 30*time.Second, func() bool {
		buf := make([]int64, 64)
		ids = buf[:b.TakeSnowflake(buf)]
		return len(ids) > 0
	})
	return b, ids
}

// borrowAhead takes ids of n's worker as fast as it makes them: with a
// layout of 12 sequence bits in seconds (4096 ids a second), count ids at
// once borrow count/4096 seconds ahead of the clock, up to half the lease
// ahead. It returns the layout and the time of the highest id.
func borrowAhead(t *testing.T, n *node.Node, count int) (snowflake.Layout, time.Time) {
	t.Helper()
	var high time.Time
	layout := n.Snowflake().Layout()
	for got, deadline := 0, time.Now().Add(5*time.Second); got < count && time.Now().Before(deadline); {
		buf := make([]int64, 64)
		k, err := n.Snowflake().Fill(t.Context(), buf)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		got += k
		for _, id := range buf[:k] {
			if at := layout.Decompose(id).Time; at.After(high) {
				high = at
			}
		}
	}
	t.Logf("the holder's ids reach %v ahead of the clock", time.Until(high))
	return layout, high
}

// TestZKStoppedHolderWaitedOut: on ZooKeeper, a worker id
// whose last holder stopped a moment ago, after borrowing ids ahead of the
// clock, and whose lease the next node cannot read, is waited out:
//   - cache: the next node has the same --zk-addr and starts from its
//     cache file while ZooKeeper is down; the file has its own older
//     lease, not the one the stopped holder wrote in ZooKeeper, so
//     serving at once would repeat the holder's ids;
//   - wiped: an operator removed /snowflake/<name>, the worker id comes
//     back with a new znode, whose creation time is no lease.
func TestZKStoppedHolderWaitedOut(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"cache", "wiped"} {
		t.Run(fault, func(t *testing.T) {
			s := natstest.RunServer(t)
			base := config.Config{
				NATS: config.NATSConfig{URL: s.ClientURL()},
				Registry: config.RegistryConfig{Kind: config.RegistryZK, ZK: testenv.ZooKeeper(t),
					ZKName: testenv.RandomName("stopped", 6), ZKAddr: "127.0.0.1:7401"},
				Snowflake: config.SnowflakeConfig{Layout: "50+1+12", TimeUnit: "s", LeaseAhead: 20 * time.Second, PeerClockMax: -1},
			}
			cfgA := base
			cfgA.Name, cfgA.DataDir = "za", t.TempDir()
			if fault == "cache" { // A's cache file holds worker w, with A's lease
				a := startNode(t, cfgA)
				waitServing(t, a)
				if err := a.Close(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			cfgB := base
			cfgB.Name = "zb"
			b := startNode(t, cfgB)
			waitServing(t, b)
			w := b.Snowflake().Worker()
			layout, high := borrowAhead(t, b, 40_000)
			if err := b.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			if fault == "cache" {
				cfgA.Registry.ZK = "127.0.0.1:1" // down
			} else {
				wipeRegistry(t, base)
				cfgA.Registry.ZKAddr = "127.0.0.1:7402" // another host
			}
			_, ids := firstIDsOn(t, cfgA, "za", w)
			t.Logf("%s: the next node's first id is of %v, the stopped holder's last of %v", fault, layout.Decompose(ids[0]).Time, high)
			for _, id := range ids {
				if at := layout.Decompose(id).Time; !at.After(high) {
					t.Fatalf("%s: id %d of worker %d is of %v, not above %v, the time of the stopped holder's ids", fault, id, w, at, high)
				}
			}
		})
	}
}
