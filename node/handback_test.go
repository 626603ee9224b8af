package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/segment/mysql"
	"github.com/leafmq/leafmq/wire"
)

// TestGracefulRestartNoGap: a node alone, stopped gracefully, hands back
// what its buffers and ring held, so the tag continues right after the
// last id it served; with a peer alive it does not (the peer knows its
// floors), and no id repeats either way. On JetStream KV and MariaDB.
func TestGracefulRestartNoGap(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"kv", "mysql"} {
		t.Run(store, func(t *testing.T) {
			srv := natstest.RunServer(t)
			cfg := config.Config{Name: "alone", NATS: config.NATSConfig{URL: srv.ClientURL()}, DataDir: t.TempDir()}
			if store == "mysql" {
				cfg.Store.MySQL = testenv.MySQL(t)
			}
			n := startNode(t, cfg)
			nc := natstest.Connect(t, n.ClientURL())
			admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100})
			var last int64
			for range 37 {
				ids, err := takeReady(nc, "orders", 1, false)
				if err != nil {
					t.Fatal(err)
				}
				if ids[0] <= last {
					t.Fatalf("id %d after %d", ids[0], last)
				}
				last = ids[0]
			}
			nc.Close()
			if err := n.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			n = startNode(t, cfg)
			nc = natstest.Connect(t, n.ClientURL())
			ids, err := takeReady(nc, "orders", 3, false)
			if err != nil {
				t.Fatal(err)
			}
			if ids[0] != last+1 {
				t.Fatalf("after a graceful restart: ids %v, want %d next (no gap)", ids, last+1)
			}
			last = ids[2]

			// With a peer alive, nothing is handed back: the peer goes on
			// above everything the stopped node reserved.
			nc.Close()
			if err := n.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			n = startNode(t, cfg)
			peer := startNode(t, config.Config{Name: "peer", NATS: config.NATSConfig{URL: srv.ClientURL()}, DataDir: t.TempDir(), Store: config.StoreConfig{MySQL: cfg.Store.MySQL}})
			nc = natstest.Connect(t, srv.ClientURL())
			seen := map[int64]bool{}
			for range 20 {
				ids, err := takeReady(nc, "orders", 1, false)
				if err != nil {
					t.Fatal(err)
				}
				seen[ids[0]] = true
				last = max(last, ids[0])
			}
			if err := n.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			for range 20 {
				ids, err := takeReady(nc, "orders", 1, false)
				if err != nil {
					t.Fatal(err)
				}
				if seen[ids[0]] {
					t.Fatalf("id %d handed out twice", ids[0])
				}
				seen[ids[0]] = true
			}
			_ = peer
		})
	}
}

// TestGracefulRestartsWithPoolNoRepeat: a lone node with a batch pool,
// restarted gracefully again and again (each stop hands back what its
// buffers and ring hold) while ids are taken by requests of every size and
// from the pool: no id repeats, and pool batches made before a stop stay
// valid after it.
func TestGracefulRestartsWithPoolNoRepeat(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	// Tags are not created on first use: the pool's filler would race the
	// create below (a tag of the default step, and "exists").
	cfg := config.Config{Name: "alone", NATS: config.NATSConfig{URL: srv.ClientURL()}, DataDir: t.TempDir(),
		Store: config.StoreConfig{AutoCreate: "false"}, Pool: config.PoolConfig{Tags: "orders", Depth: 4, Batch: 50}}
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	add := func(ids []int64, from string) {
		t.Helper()
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("id %d handed out twice (%s)", id, from)
			}
			seen[id] = true
		}
	}
	for round := range 5 {
		n := startNode(t, cfg)
		if round == 0 {
			admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100})
		}
		for i := range 40 {
			ids, err := takeReady(nc, "orders", 1+(i*37)%300, i%2 == 0)
			if err != nil {
				t.Fatal(err)
			}
			add(ids, "request")
		}
		for range 3 {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			ids, err := pool.Take(ctx, js, pool.SegmentSubject("orders"), 2*time.Second)
			cancel()
			if err == nil {
				add(ids, "pool")
			}
		}
		if err := n.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) < 5*40 {
		t.Fatalf("only %d ids taken", len(seen))
	}
}

// TestHandBackWhileAPeerIsFrozen: of two nodes serving a tag, the one that
// reserved last stops gracefully while the other is frozen (its link
// holds every byte, as a SIGSTOPped process's kernel does): the stopping
// node hears no peer and hands back the top of its last range, setting
// max_id below the floor the frozen node heard it announce. The woken
// node must go on serving the tag, above that floor, with no id twice;
// and so must the stopped node once it starts again. On JetStream KV and
// MariaDB.
func TestHandBackWhileAPeerIsFrozen(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"kv", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			srv := natstest.RunServer(t)
			var dsn string
			if kind == "mysql" {
				dsn = testenv.MySQL(t)
			}
			link := newCutProxy(t, srv.Addr().String())
			cfg := func(name, url string) config.Config {
				return config.Config{Name: name, NATS: config.NATSConfig{URL: url}, DataDir: t.TempDir(),
					Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{MySQL: dsn, DefaultStep: 100, MaxStep: 100}}
			}
			frozen := startNode(t, cfg("frozen", "nats://"+link.addr()))
			stopCfg := cfg("stopping", srv.ClientURL())
			stopping := startNode(t, stopCfg)
			nc := natstest.Connect(t, srv.ClientURL())
			admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100})
			seen := map[int64]bool{}
			add := func(what string, ids ...int64) {
				t.Helper()
				for _, id := range ids {
					if seen[id] {
						t.Fatalf("%s: id %d handed out twice", what, id)
					}
					seen[id] = true
				}
			}
			for i := 0; frozen.SegmentFloor("orders") == 0 || stopping.SegmentFloor("orders") == 0; i++ {
				if i == 200 {
					t.Fatal("the queue group did not reach both nodes")
				}
				ids, err := takeReady(nc, "orders", 10, true)
				if err != nil {
					t.Fatal(err)
				}
				add("both serving", ids...)
			}
			settleFloors(t, "orders", frozen, stopping)

			// The stopping node reserves the last range, and announces it.
			ann, err := nc.SubscribeSync(wire.FloorAnnouncePrefix + "orders")
			if err != nil {
				t.Fatal(err)
			}
			was := stopping.SegmentFloor("orders")
			for i := 0; stopping.SegmentFloor("orders") == was; i++ {
				if i == 1000 {
					t.Fatal("the stopping node loaded no range")
				}
				add("the stopping node alone", httpID(t, stopping, "orders"))
			}
			settleFloors(t, "orders", frozen, stopping)
			high := stopping.SegmentFloor("orders")
			if high <= frozen.SegmentFloor("orders") {
				t.Fatalf("the stopping node's floor %d is not above the frozen one's %d", high, frozen.SegmentFloor("orders"))
			}
			for heard := false; !heard; {
				m, err := ann.NextMsg(10 * time.Second)
				if err != nil {
					t.Fatalf("no announcement of floor %d: %v", high, err)
				}
				var a wire.FloorAnnounce
				heard = json.Unmarshal(m.Data, &a) == nil && a.Node == "stopping" && a.Floor == high
			}

			link.freeze()
			if err := stopping.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := maxID(t, srv.ClientURL(), dsn, "orders"); got >= high {
				t.Fatalf("max_id %d after the stop, want it handed back below %d", got, high)
			}
			link.thaw()

			// The woken node alone: past its buffers, its loads meet a
			// max_id below the floor it heard.
			for i := range 20 {
				ids, err := takeReady(nc, "orders", 50, true)
				if err != nil {
					t.Fatalf("request %d to the woken node: %v (the stopped node's floor %d, max_id below it)", i, err, high)
				}
				add("the woken node", ids...)
			}
			stopping = startNode(t, stopCfg)
			for range 20 {
				ids, err := takeReady(nc, "orders", 50, true)
				if err != nil {
					t.Fatal(err)
				}
				add("both again", ids...)
			}
			for range 50 {
				add("the restarted node", httpID(t, stopping, "orders"))
			}
		})
	}
}

// httpID takes one id of tag from n itself (its Leaf HTTP API).
func httpID(t *testing.T, n *node.Node, tag string) int64 {
	t.Helper()
	return httpGetID(t, n, "/api/segment/get/"+tag)
}

// httpGetID takes one id from n itself at path of its Leaf HTTP API.
// A 503 (a first range slower than the ready wait on a loaded machine) is
// asked again for up to 10 s, as a client would.
func httpGetID(t *testing.T, n *node.Node, path string) int64 {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			continue
		}
		id, err := strconv.ParseInt(string(body), 10, 64)
		if resp.StatusCode != 200 || err != nil {
			t.Fatalf("%s: HTTP %d %q", n.Name(), resp.StatusCode, body)
		}
		return id
	}
}

// maxID reads tag's max_id from the store: MariaDB at dsn, else the alloc
// bucket of the NATS at url.
func maxID(t *testing.T, url, dsn, tag string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var (
		st  segment.Store
		err error
	)
	if dsn != "" {
		st, err = mysql.Open(ctx, dsn, mysql.Options{})
	} else {
		nc := natstest.Connect(t, url)
		js, jerr := jetstream.New(nc)
		if jerr != nil {
			t.Fatal(jerr)
		}
		st, err = kvstore.Open(ctx, js, kvstore.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	row, err := st.Get(ctx, wire.MustTag(tag))
	if err != nil {
		t.Fatal(err)
	}
	return row.MaxID
}
