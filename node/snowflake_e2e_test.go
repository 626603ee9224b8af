package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	zkclient "github.com/go-zookeeper/zk"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// threeSnowflakeNodes: three leafd on one registry hand out a million
// snowflake ids to eight clients while one node is stopped and started again
// with the same configuration (so, on ZooKeeper and static registries, the
// same worker id): no duplicate.
func threeSnowflakeNodes(t *testing.T, base config.Config) {
	s := natstest.RunServer(t)
	cfgs := make([]config.Config, 3)
	nodes := make([]*node.Node, 3)
	for i := range cfgs {
		cfg := base
		cfg.Name = fmt.Sprintf("sf-%d", i)
		cfg.NATS.URL = s.ClientURL()
		cfg.DataDir = t.TempDir()
		cfg.Registry.ZKAddr = fmt.Sprintf("127.0.0.1:%d", 7000+i)
		cfgs[i] = cfg
		nodes[i] = startNode(t, cfg)
	}
	workers := map[int64]bool{}
	for _, n := range nodes {
		waitServing(t, n)
		workers[n.Snowflake().Worker()] = true
	}
	if len(workers) != 3 {
		t.Fatalf("three nodes got workers %v", workers)
	}
	// Failed requests are counted, not a failure below 400: a node's lease
	// renewal slower than its timeout on a busy machine takes it out of the
	// queue group for a moment (no responders while all three are out).
	all := load(t, s.ClientURL(), wire.SnowflakeSubject, 8, 1_000_000, 400, func() {
		old := nodes[1].Snowflake().Worker()
		if err := nodes[1].Close(context.Background()); err != nil {
			t.Errorf("stop node: %v", err)
		}
		nodes[1] = startNode(t, cfgs[1])
		t.Logf("node restarted: worker %d, then %d", old, nodes[1].Snowflake().Worker())
	})
	layout := snowflake.LeafLayout()
	seen := map[int64]int{}
	for _, id := range all {
		seen[layout.Decompose(id).Worker]++
	}
	t.Logf("ids by worker: %v", seen)
	if len(seen) < 3 {
		t.Errorf("ids came from %d workers, want every node's", len(seen))
	}
}

func waitServing(t *testing.T, n *node.Node) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n.Snowflake().State() != snowflake.StateServing || !n.SnowflakeJoined() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: snowflake %v, not serving", n.Name(), n.Snowflake().State())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestThreeSnowflakeNodesKV(t *testing.T) {
	t.Parallel()
	threeSnowflakeNodes(t, config.Config{Registry: config.RegistryConfig{Kind: config.RegistryKV}})
}

func TestThreeSnowflakeNodesZooKeeper(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZooKeeper(t)
	threeSnowflakeNodes(t, config.Config{Registry: config.RegistryConfig{Kind: config.RegistryZK, ZK: zkAddr, ZKName: testenv.RandomName("e2e", 6)}})
}

func TestThreeSnowflakeNodesMySQL(t *testing.T) {
	t.Parallel()
	threeSnowflakeNodes(t, config.Config{Registry: config.RegistryConfig{Kind: config.RegistryMySQL}, Store: config.StoreConfig{MySQL: testenv.MySQL(t)}})
}

// takeAll takes n snowflake ids in batches of 1000.
func takeAll(t *testing.T, nc *nats.Conn, n int) []int64 {
	t.Helper()
	var ids []int64
	// A node out of the queue group for a moment (a lease renewal slower
	// than its timeout on a busy machine) is asked again, as clients do.
	deadline := time.Now().Add(30 * time.Second)
	for len(ids) < n {
		got, err := takeFrom(nc, wire.SnowflakeSubject, min(1000, n-len(ids)), true)
		if (errors.Is(err, nats.ErrNoResponders) || errors.Is(err, wire.ErrUnavailable)) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("take: %v", err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// The fault drill of the issue: a node restarted with its clock 10s behind,
// on the same worker id, refuses snowflake until its clock has passed its
// last lease, and never repeats an id.
func TestRestartClockBehind(t *testing.T) {
	t.Parallel()
	for _, reg := range []string{config.RegistryStatic, config.RegistryZK} {
		t.Run(reg, func(t *testing.T) {
			s := natstest.RunServer(t)
			nc := natstest.Connect(t, s.ClientURL())
			cfg := config.Config{
				Name:      "drill",
				NATS:      config.NATSConfig{URL: s.ClientURL()},
				DataDir:   t.TempDir(),
				Registry:  config.RegistryConfig{Kind: reg, WorkerID: 7, ZKAddr: "127.0.0.1:7100"},
				Snowflake: config.SnowflakeConfig{PeerClockMax: -1},
			}
			if reg == config.RegistryZK {
				cfg.Registry.ZK = testenv.ZooKeeper(t)
				cfg.Registry.ZKName = testenv.RandomName("drill", 6)
			}
			n := startNode(t, cfg)
			waitServing(t, n)
			worker := n.Snowflake().Worker()
			before := takeAll(t, nc, 20_000)
			if err := n.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			closed := time.Now()

			// Far behind: the start fails, with a clear error.
			far := cfg
			far.HTTP.Addr = "127.0.0.1:0" // node.Start, not startNode: not the default 8080, which another process may hold
			far.Fault.ClockOffset = -10 * time.Second
			far.Snowflake.MaxStartWait = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if n, err := node.Start(ctx, far, nil); err == nil {
				_ = n.Close(context.Background())
				t.Fatal("a node with its clock 10s behind its last lease started")
			} else if !errors.Is(err, snowflake.ErrClockBackwards) || !strings.Contains(err.Error(), "behind the last time lease") {
				t.Fatalf("start error %v, want ErrClockBackwards about the last time lease", err)
			}

			// Within MaxStartWait: the node starts, stays out of the queue
			// group while its clock is behind, then serves.
			// 10 s behind the lease even if the far start above took long
			// (a busy machine); MaxStartWait covers the wait.
			behind := cfg
			behind.Fault.ClockOffset = -10*time.Second - time.Since(closed)
			behind.Snowflake.MaxStartWait = -behind.Fault.ClockOffset + 10*time.Second
			n = startNode(t, behind)
			if w := n.Snowflake().Worker(); w != worker {
				t.Fatalf("restarted on worker %d, want %d", w, worker)
			}
			if st := n.Snowflake().State(); st != snowflake.StateWaiting {
				t.Fatalf("state %v, want waiting", st)
			}
			if _, err := takeFrom(nc, wire.SnowflakeSubject, 1, false); !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, wire.ErrUnavailable) {
				t.Fatalf("request while waiting: %v, want no responders or 503", err)
			}
			waitServing(t, n)
			after := takeAll(t, nc, 20_000)
			last := before[len(before)-1]
			seen := make(map[int64]bool, len(before))
			for _, id := range before {
				seen[id] = true
			}
			for _, id := range after {
				if seen[id] {
					t.Fatalf("id %d issued again after the restart", id)
				}
				if id <= last {
					t.Fatalf("id %d after the restart is not above the last one before (%d)", id, last)
				}
			}
		})
	}
}

// A clock stepped back at run time pauses snowflake on the node (it leaves
// the queue group, with an event) until the clock is past the last tick it
// used; then it serves again, with no id repeated.
func TestClockStepPausesAndResumes(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	evs := make(chan events.Event, 64)
	sub, err := nc.Subscribe(events.Prefix+"snowflake.>", func(m *nats.Msg) {
		var ev events.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			evs <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	n := startNode(t, config.Config{
		Name:      "step",
		NATS:      config.NATSConfig{URL: s.ClientURL()},
		Registry:  config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 3},
		Snowflake: config.SnowflakeConfig{PeerClockMax: -1, LeaseAhead: time.Second},
		Fault:     config.FaultConfig{ClockStep: "-4s@2s"},
	})
	waitServing(t, n)
	seen := map[int64]bool{}
	record := func(ids []int64) {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate id %d", id)
			}
			seen[id] = true
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	var paused, resumed bool
	for !resumed {
		if time.Now().After(deadline) {
			t.Fatalf("paused %v, resumed %v after 60s", paused, resumed)
		}
		ids, err := takeFrom(nc, wire.SnowflakeSubject, 100, false)
		switch {
		case err == nil:
			record(ids)
		case errors.Is(err, nats.ErrNoResponders), errors.Is(err, wire.ErrUnavailable):
		default:
			t.Fatalf("take: %v", err)
		}
		for drained := false; !drained; {
			select {
			case ev := <-evs:
				t.Logf("event %+v", ev)
				switch ev.Kind {
				case events.SnowflakePaused:
					paused = true
				case events.SnowflakeServing:
					resumed = paused
				}
			default:
				drained = true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	record(takeAll(t, nc, 5000))
	t.Logf("%d unique ids across the step", len(seen))
}

// A node whose clock is far off the live nodes' refuses to start.
func TestPeerClockCheck(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	startNode(t, config.Config{Name: "peer-a", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryKV}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:     "peer-b",
		NATS:     config.NATSConfig{URL: s.ClientURL()},
		Registry: config.RegistryConfig{Kind: config.RegistryKV},
		DataDir:  t.TempDir(),
		HTTP:     config.HTTPConfig{Addr: "127.0.0.1:0"},
		Fault:    config.FaultConfig{ClockOffset: -10 * time.Second},
	}, nil)
	if err == nil {
		_ = n.Close(context.Background())
		t.Fatal("a node 10s off its peer started")
	}
	if !strings.Contains(err.Error(), "off the average of 1 live nodes") {
		t.Fatalf("error %v, want the peer clock check's", err)
	}
	// Within the threshold it starts.
	startNode(t, config.Config{Name: "peer-c", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryKV}, Fault: config.FaultConfig{ClockOffset: 300 * time.Millisecond}})
}

func TestSnowflakeMetrics(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	n := startNode(t, config.Config{Name: "metrics", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 9}})
	waitServing(t, n)
	nc := natstest.Connect(t, s.ClientURL())
	takeAll(t, nc, 10)
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`leafmq_snowflake_state{state="serving"} 1`,
		`leafmq_snowflake_state{state="paused"} 0`,
		`leafmq_snowflake_worker 9`,
		`leafmq_snowflake_ring_capacity 65536`,
		`leafmq_requests_total{endpoint="snowflake"} `, // with the self-probes: id requests are counted below
		`leafmq_snowflake_layout_remaining_seconds `,
		`leafmq_snowflake_lease_until_timestamp_seconds `,
		`leafmq_snowflake_peer_clock_offset_seconds 0`,
		`leafmq_ids_issued_total{engine="snowflake"} 10`,
		`leafmq_id_requests_total{code="200",engine="snowflake"} 1`,
		`leafmq_request_duration_seconds_count{engine="snowflake"} 1`,
		`leafmq_events_published_total{kind="node.up"} 1`,
		`leafmq_build_info{goversion="`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// A static worker id is no registry's to count.
	if strings.Contains(string(body), "leafmq_snowflake_worker_ids_free{") {
		t.Error("/metrics has free worker ids with a static worker id")
	}
}

// UidGenerator's default layout ran out on 2024-11-20: a node refuses it
// with a clear error, and warns (log, event, metric) about one that runs
// out within --layout-warn.
func TestLayoutExpiry(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:      "expired",
		NATS:      config.NATSConfig{URL: s.ClientURL()},
		HTTP:      config.HTTPConfig{Addr: "off"},
		DataDir:   t.TempDir(),
		Registry:  config.RegistryConfig{Kind: config.RegistryStatic},
		Snowflake: config.SnowflakeConfig{Layout: "uidgen"},
	}, nil)
	if err == nil {
		_ = n.Close(context.Background())
		t.Fatal("a node started on an expired layout")
	}
	if !errors.Is(err, snowflake.ErrExpired) || !strings.Contains(err.Error(), "--snowflake-epoch") {
		t.Fatalf("error %v, want ErrExpired naming --snowflake-epoch", err)
	}

	nc := natstest.Connect(t, s.ClientURL())
	layoutEvents, err := nc.SubscribeSync(events.Subject(events.LayoutExpiring))
	if err != nil {
		t.Fatal(err)
	}
	// 28 bits of seconds last 8.5 years: an epoch 8.4 years ago leaves ~5 weeks.
	epoch := time.Now().Add(-8*365*24*time.Hour - 146*24*time.Hour).UTC().Format(time.DateOnly)
	n = startNode(t, config.Config{
		Name:      "expiring",
		NATS:      config.NATSConfig{URL: s.ClientURL()},
		Registry:  config.RegistryConfig{Kind: config.RegistryStatic},
		Snowflake: config.SnowflakeConfig{Layout: "uidgen", Epoch: epoch},
	})
	msg, err := layoutEvents.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no layout event: %v", err)
	}
	var ev events.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Kind != events.LayoutExpiring || ev.Node != "expiring" ||
		ev.Level != events.Error || !strings.Contains(ev.Message, "runs out") {
		t.Fatalf("event %s (%v), want layout.expiring", msg.Data, err)
	}
	waitServing(t, n)
	ids := takeAll(t, nc, 3)
	if d := snowflake.UidGenLayout(mustEpoch(t, epoch)).Decompose(ids[0]); time.Since(d.Time).Abs() > time.Minute {
		t.Fatalf("id %d decodes to %v on the uidgen layout", ids[0], d.Time)
	}
}

func mustEpoch(t *testing.T, s string) time.Time {
	t.Helper()
	e, err := time.Parse(time.DateOnly, s)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// An operator deletes the worker registry (the ZooKeeper tree, or the
// leaf_workers bucket) under a live node A; node B, with its own identity
// and data directory, registers and gets a worker id with no time lease on
// record — on ZooKeeper A's, whose sequence starts over. B must not serve
// it while A may: it asks the live nodes, sees A holds it, and waits out
// A's claim.
func TestWipedWorkerRegistry(t *testing.T) {
	t.Parallel()
	for _, reg := range []string{config.RegistryZK, config.RegistryKV} {
		t.Run(reg, func(t *testing.T) { wipedWorkerRegistry(t, reg) })
	}
}

func wipedWorkerRegistry(t *testing.T, reg string) {
	s := natstest.RunServer(t)
	base := config.Config{NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: reg}}
	if reg == config.RegistryZK {
		base.Registry.ZK, base.Registry.ZKName = testenv.ZooKeeper(t), testenv.RandomName("wipe", 6)
	}
	cfgA, cfgB := base, base
	cfgA.Name, cfgA.Registry.ZKAddr = "wa", "127.0.0.1:7101"
	cfgB.Name, cfgB.Registry.ZKAddr = "wb", "127.0.0.1:7102"
	a := startNode(t, cfgA)
	waitServing(t, a)

	var (
		all  []int64
		stop = make(chan struct{})
		done = make(chan error, 1)
	)
	go func() {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			done <- err
			return
		}
		defer nc.Close()
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if ids, err := takeFrom(nc, wire.SnowflakeSubject, 200, true); err == nil {
				all = append(all, ids...)
			}
		}
	}()

	worker := a.Snowflake().Worker()
	wipeRegistry(t, base)
	b := startNode(t, cfgB)
	waitServing(t, b)
	time.Sleep(time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	seen := make(map[int64]bool, len(all))
	dups := 0
	for _, id := range all {
		if seen[id] {
			dups++
		}
		seen[id] = true
	}
	t.Logf("A had worker %d, B got %d; %d ids, %d duplicates", worker, b.Snowflake().Worker(), len(all), dups)
	if dups > 0 {
		t.Fatalf("%d duplicate snowflake ids after the worker registry was deleted under a live node", dups)
	}
}

// wipeRegistry deletes cfg's worker registry as an operator would.
func wipeRegistry(t *testing.T, cfg config.Config) {
	t.Helper()
	switch cfg.Registry.Kind {
	case config.RegistryKV:
		js, err := jetstream.New(natstest.Connect(t, cfg.NATS.URL))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteKeyValue(ctx, "leaf_workers"); err != nil {
			t.Fatal(err)
		}
	case config.RegistryZK:
		conn, _, err := zkclient.Connect([]string{cfg.Registry.ZK}, 10*time.Second, zkclient.WithLogInfo(false))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var rm func(path string)
		rm = func(path string) {
			kids, _, err := conn.Children(path)
			if err != nil {
				t.Fatalf("zk children %s: %v", path, err)
			}
			for _, k := range kids {
				rm(path + "/" + k)
			}
			if err := conn.Delete(path, -1); err != nil {
				t.Fatalf("zk delete %s: %v", path, err)
			}
		}
		rm("/snowflake/" + cfg.Registry.ZKName)
	}
}

// TestGracefulRestartSnowflake: a node stopped gracefully and started
// again on its data directory gets its worker id back and serves
// snowflake ids as soon as it has started: it waits only past the last
// time it used (its stop record), not out its time lease. A client takes
// ids all along, across three restarts; none repeats.
func TestGracefulRestartSnowflake(t *testing.T) {
	t.Parallel()
	for _, reg := range []string{config.RegistryKV, config.RegistryStatic} {
		t.Run(reg, func(t *testing.T) {
			s := natstest.RunServer(t)
			cfg := config.Config{Name: "alone", NATS: config.NATSConfig{URL: s.ClientURL()}, DataDir: t.TempDir(),
				Registry: config.RegistryConfig{Kind: reg, WorkerID: 9}}
			n := startNode(t, cfg)
			waitServing(t, n)
			worker := n.Snowflake().Worker()

			var (
				all  []int64
				stop = make(chan struct{})
				done = make(chan error, 1)
			)
			go func() {
				nc, err := nats.Connect(s.ClientURL())
				if err != nil {
					done <- err
					return
				}
				defer nc.Close()
				for {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					if ids, err := takeFrom(nc, wire.SnowflakeSubject, 500, true); err == nil {
						all = append(all, ids...)
					}
				}
			}()
			for i := range 3 {
				time.Sleep(200 * time.Millisecond)
				if err := n.Close(t.Context()); err != nil {
					t.Fatal(err)
				}
				n = startNode(t, cfg)
				if st, w := n.Snowflake().State(), n.Snowflake().Worker(); st != snowflake.StateServing || w != worker {
					t.Errorf("restart %d: snowflake %v with worker %d, want serving with worker %d", i+1, st, w, worker)
				}
				waitServing(t, n)
			}
			time.Sleep(200 * time.Millisecond)
			close(stop)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			seen := make(map[int64]bool, len(all))
			for _, id := range all {
				if seen[id] {
					t.Fatalf("id %d issued twice (of %d)", id, len(all))
				}
				seen[id] = true
			}
			t.Logf("%d ids, worker %d", len(all), worker)
		})
	}
}
